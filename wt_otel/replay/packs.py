"""Packs: a folder of scenarios with a `pack.yaml` (name, owner, metadata).

A pack is how a team says "these scenarios are ours": its name becomes the
JUnit `<testsuite>` and the ledger's `pack`, its owner the `owner` a red row
is routed to. Scenarios inherit both unless their own `scenario.yaml` sets
them, and inherit the pack's metadata under their own (theirs wins).

`pack.yaml` is strict like `scenario.yaml` (people write it; a misspelt
`ownr:` must be an error, not an unowned pack). The nearest `pack.yaml` at or
above a scenario directory applies; the search stops at a repository root (a
folder holding `.git`) so a stray file outside the project never claims it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

PACK_FILE = "pack.yaml"
ORIGIN_TAG = "origin:"


class PackError(ValueError):
    """A `pack.yaml` that cannot be read or is invalid (names the file and the key)."""


class Pack(BaseModel):
    """A `pack.yaml`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, pattern=r"\S", description="the pack's name (the JUnit testsuite)")
    owner: str | None = Field(None, description="a team, a handle, a CODEOWNERS path: free-form")
    description: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)


def load_pack(path: Path) -> Pack:
    """Read and validate one `pack.yaml`; raises `PackError` naming each bad key."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PackError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise PackError(f"{path}: must be a mapping with at least `name:`, got {type(data).__name__}")
    try:
        return Pack.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors())
        raise PackError(f"{path}: {problems}") from exc


def find_pack_file(scenario_dir: Path) -> Path | None:
    """The nearest `pack.yaml` at or above `scenario_dir`, not crossing a repository root."""
    here = scenario_dir.resolve()
    for folder in (here, *here.parents):
        candidate = folder / PACK_FILE
        if candidate.is_file():
            return candidate
        if (folder / ".git").exists():
            return None
    return None


@dataclass
class Membership:
    """What a scenario ends up with after inheritance: effective pack, owner, metadata, origin."""

    pack: str | None = None
    owner: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    origin: str | None = None
    pack_file: Path | None = None


def origin_of(tags: list[str]) -> str | None:
    """The ref of the first `origin:<ref>` tag (stamped by `wt-otel import`), else None."""
    for tag in tags:
        if tag.startswith(ORIGIN_TAG) and tag[len(ORIGIN_TAG):].strip():
            return tag[len(ORIGIN_TAG):].strip()
    return None


class PackCache:
    """Loads each `pack.yaml` once per sweep; a broken one is reported once, per file."""

    def __init__(self) -> None:
        self._packs: dict[Path, Pack | PackError] = {}

    def pack_for(self, scenario_dir: Path) -> tuple[Pack | None, Path | None]:
        """Raises `PackError` when the applicable `pack.yaml` is invalid."""
        path = find_pack_file(scenario_dir)
        if path is None:
            return None, None
        if path not in self._packs:
            try:
                self._packs[path] = load_pack(path)
            except PackError as exc:
                self._packs[path] = exc
        found = self._packs[path]
        if isinstance(found, PackError):
            raise found
        return found, path

    def membership(self, scenario_dir: Path, scenario: Any | None, *, strict: bool = True) -> Membership:
        """Effective pack/owner/metadata of a loaded scenario (`scenario` may be None: a broken scenario.yaml
        still belongs to its folder's pack, so its ERROR row reaches the right owner).

        An invalid `pack.yaml` raises `PackError` when `strict`, else counts as no pack.
        """
        try:
            pack, path = self.pack_for(scenario_dir)
        except PackError:
            if strict:
                raise
            pack, path = None, None
        own_meta = dict(getattr(scenario, "metadata", None) or {})
        tags = list(getattr(scenario, "tags", None) or [])
        return Membership(
            pack=getattr(scenario, "pack", None) or (pack.name if pack else None),
            owner=getattr(scenario, "owner", None) or (pack.owner if pack else None),
            metadata={**(pack.metadata if pack else {}), **own_meta},
            tags=tags,
            origin=origin_of(tags),
            pack_file=path,
        )


_SAMPLER_PREFIX = re.compile(r"^sampler\.")


def model_and_sampler(metadata: dict[str, str]) -> tuple[str | None, dict[str, Any]]:
    """`model` and `sampler.*` from metadata: the scenario schema has no fields for them, and metadata is
    where an author (or a pack) pins what the ledger should say the scenario ran against."""
    sampler = {_SAMPLER_PREFIX.sub("", k): v for k, v in metadata.items() if _SAMPLER_PREFIX.match(k)}
    return metadata.get("model") or None, sampler
