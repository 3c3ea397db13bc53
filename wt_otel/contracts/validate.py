"""Check any wt-otel file: find its kind, read it, validate it, lint it.

The kind comes from the most explicit evidence available: the version key
inside the document, then the file name, then the shape (foreign cassettes
carry no version key). A file that cannot be read or parsed is a different
outcome from an invalid one (`UnreadableFile`), because no fix to its content
can be suggested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wt_otel.contracts.formats import FORMATS, VALIDATED, from_file_name, from_version_key
from wt_otel.contracts.formats import json_schema as json_schema
from wt_otel.contracts.problems import ContractError, Problem

KINDS = VALIDATED  # the formats `wt-otel validate` detects and checks (contracts/formats.py)
VERSION_KEYS = {key: k for k in KINDS if (key := FORMATS[k].version_key)}


class UnreadableFile(Exception):
    """The file could not be read or is not well-formed JSON/YAML."""


@dataclass
class FileReport:
    kind: str
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems


def kind_from_name(name: str) -> str | None:
    found = from_file_name(name)
    return found.name if found else None


def detect_kind(path: str | Path, data: Any) -> str:
    """One of KINDS, or "unknown"."""
    by_key = from_version_key(data)
    if by_key is not None:
        return by_key.name
    by_name = kind_from_name(Path(path).name)
    if by_name:
        return by_name
    if isinstance(data, dict) and "traces" in data and "latest_trace_id" in data:
        return "cassette"
    return "unknown"


def read_document(path: str | Path) -> Any:
    """Parse a file: YAML for *.yaml/*.yml, JSON otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).replace("\n", " ")
        raise UnreadableFile(f"cannot read {path}: {reason}") from exc


def check_data(kind: str, data: Any) -> FileReport:
    """Validate and lint an already-parsed document of a known kind."""
    fmt = FORMATS[kind]
    try:
        model = fmt.load(data)
    except ContractError as exc:
        return FileReport(kind, exc.problems)
    return FileReport(kind, warnings=fmt.lint(model) if fmt.lint else [])


def validate_data(kind: str, data: Any) -> list[Problem]:
    """The contract errors of a parsed document (empty when valid); no lints."""
    try:
        FORMATS[kind].load(data)
    except ContractError as exc:
        return exc.problems
    return []


def validate_file(path: str | Path) -> FileReport:
    """Read, detect and validate one file; raises `UnreadableFile`."""
    data = read_document(path)
    kind = detect_kind(path, data)
    if kind == "unknown":
        return FileReport(
            kind,
            [
                Problem(
                    "",
                    "cannot tell which wt-otel format this is: no version key ("
                    + ", ".join(VERSION_KEYS)
                    + ") and the name matches none of *.wtin.json, *.universe.json, "
                    "*.cassette.json, scenario.yaml",
                )
            ],
        )
    return check_data(kind, data)


def find_files(root: str | Path) -> Iterator[Path]:
    """wt-otel files under a folder, sorted, skipping hidden folders (.git, .venv)."""
    root = Path(root)
    for path in sorted(root.rglob("*")):
        hidden = any(part.startswith(".") for part in path.relative_to(root).parts[:-1])
        if not hidden and path.is_file() and kind_from_name(path.name):
            yield path
