"""Check any wt-otel file: find its kind, read it, validate it, lint it.

The kind comes from the most explicit evidence available: the version key
inside the document, then the file name, then the shape (foreign cassettes
carry no version key). A file that cannot be read or parsed is a different
outcome from an invalid one (`UnreadableFile`), because no fix to its content
can be suggested.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from wt_otel.contracts.cassette import Cassette, load_cassette
from wt_otel.contracts.envelope import Envelope, lint_envelope, load_envelope
from wt_otel.contracts.problems import ContractError, Problem
from wt_otel.contracts.scenario import Scenario, load_scenario
from wt_otel.contracts.universe import Universe, lint_universe, load_universe

KINDS = ("envelope", "universe", "cassette", "scenario", "trace")
VERSION_KEYS = {
    "windtunnel_interchange": "envelope",
    "windtunnel_universe": "universe",
    "wt_cassette": "cassette",
    "wt_scenario": "scenario",
    "wt_trace": "trace",
}
SUFFIXES = {
    ".wtin.json": "envelope",
    ".universe.json": "universe",
    ".cassette.json": "cassette",
    ".scenario.yaml": "scenario",
    ".trace.json": "trace",
}
MODELS: dict[str, type[BaseModel]] = {
    "envelope": Envelope,
    "universe": Universe,
    "cassette": Cassette,
    "scenario": Scenario,
}
TITLES = {
    "envelope": "wt-otel Contract A interchange envelope (*.wtin.json)",
    "universe": "wt-otel Contract B tool universe (*.universe.json)",
    "cassette": "wt-otel LLM cassette (*.cassette.json)",
    "scenario": "wt-otel scenario (scenario.yaml)",
    "trace": "wt-otel run trace (*.trace.json)",
}
_LOADERS: dict[str, Callable[[Any], Any]] = {
    "envelope": load_envelope,
    "universe": load_universe,
    "cassette": load_cassette,
    "scenario": load_scenario,
    "trace": lambda data: _trace_module().load_trace(data),
}
_LINTERS: dict[str, Callable[[Any], list[Problem]]] = {"envelope": lint_envelope, "universe": lint_universe}


def _trace_module() -> Any:
    """wt_otel.contracts.run (a run's record) lives outside this package and imports it: import it on use."""
    from wt_otel.contracts import run as trace

    return trace


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
    if name == "scenario.yaml":
        return "scenario"
    return next((kind for suffix, kind in SUFFIXES.items() if name.endswith(suffix)), None)


def detect_kind(path: str | Path, data: Any) -> str:
    """One of KINDS, or "unknown"."""
    if isinstance(data, dict):
        for key, kind in VERSION_KEYS.items():
            if key in data:
                return kind
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
    try:
        model = _LOADERS[kind](data)
    except ContractError as exc:
        return FileReport(kind, exc.problems)
    lint = _LINTERS.get(kind)
    return FileReport(kind, warnings=lint(model) if lint else [])


def validate_data(kind: str, data: Any) -> list[Problem]:
    """The contract errors of a parsed document (empty when valid); no lints."""
    try:
        _LOADERS[kind](data)
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


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of a kind, generated from its model."""
    model = MODELS[kind] if kind in MODELS else _trace_module().Trace
    schema = model.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": TITLES[kind]}
