"""The one registry of wt-otel's versioned files and wire formats: name -> model, file names, loader, schema.

`wt-otel schema NAME` offers every registered format; `wt-otel validate`
detects and checks the ones that are files of their own (`validated`); the dump
reader recognises an envelope by the suffix and version key written here. So a
format's name, file suffix and version key are written once, in this table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel

from wt_otel.contracts import envelope
from wt_otel.contracts.cassette import Cassette, lint_cassette, load_cassette
from wt_otel.contracts.envelope import Envelope, lint_envelope, load_envelope
from wt_otel.contracts.inject import InjectResponse, ResetRequest, SurfaceResponse
from wt_otel.contracts.problems import Problem, load
from wt_otel.contracts.results import SCORE_SUFFIX, LedgerRow, RunScore, SweepResult
from wt_otel.contracts.run import TRACE_SUFFIX, Trace, load_trace
from wt_otel.contracts.scenario import Scenario, load_scenario
from wt_otel.contracts.surface import SURFACE_SUFFIX, SurfaceGolden, load_golden
from wt_otel.contracts.universe import Universe, lint_universe, load_universe

__all__ = ["ENVELOPE", "FORMATS", "SCHEMA_DIALECT", "VALIDATED", "Format", "by_name", "from_file_name",
           "from_version_key", "json_schema"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class Format:
    """One versioned file or wire format.

    `suffixes` and `file_names` name its files (the first suffix is the canonical one); `version_key` is the
    key a document of this format carries; `validated`: a file of its own that `wt-otel validate` finds in
    folders and checks (a ledger row is a line of a file, the inject bodies travel over HTTP).
    """

    name: str
    model: type[BaseModel]
    title: str
    load: Callable[[Any], BaseModel]
    version_key: str | None = None
    suffixes: tuple[str, ...] = ()
    file_names: tuple[str, ...] = ()
    lint: Callable[[Any], list[Problem]] | None = None
    validated: bool = False

    @property
    def suffix(self) -> str | None:
        return self.suffixes[0] if self.suffixes else None

    def matches_name(self, name: str) -> bool:
        return name in self.file_names or any(name.endswith(s) for s in self.suffixes)


ENVELOPE = Format("envelope", Envelope, "wt-otel Contract A interchange envelope (*.wtin.json)", load_envelope,
                  envelope.VERSION_KEY, (envelope.SUFFIX,), lint=lint_envelope, validated=True)

FORMATS: dict[str, Format] = {f.name: f for f in (
    ENVELOPE,
    Format("universe", Universe, "wt-otel Contract B tool universe (*.universe.json)", load_universe,
           "windtunnel_universe", (".universe.json",), lint=lint_universe, validated=True),
    Format("cassette", Cassette, "wt-otel LLM cassette (*.cassette.json)", load_cassette, "wt_cassette",
           (".cassette.json",), lint=lint_cassette, validated=True),
    Format("scenario", Scenario, "wt-otel scenario (scenario.yaml)", load_scenario, "wt_scenario",
           (".scenario.yaml",), ("scenario.yaml",), validated=True),
    Format("trace", Trace, "wt-otel run trace (*.trace.json)", load_trace, "wt_trace", (TRACE_SUFFIX,),
           validated=True),
    Format("score", RunScore, "wt-otel run score (run-<n>.score.json, beside each run's trace)",
           partial(load, RunScore), "wt_score", (SCORE_SUFFIX,)),
    Format("results", SweepResult, "wt-otel sweep results (wt-otel run/check --format json)",
           partial(load, SweepResult), "wt_results"),
    Format("ledger-row", LedgerRow, "wt-otel ledger row (one line of ledger.ndjsonl)", partial(load, LedgerRow),
           "wt_ledger"),
    Format("inject-response", InjectResponse, "wt-otel Contract C /wt/inject response body",
           partial(load, InjectResponse), "wt_inject"),
    Format("reset-request", ResetRequest, "wt-otel Contract C /wt/reset request body", partial(load, ResetRequest)),
    Format("surface-response", SurfaceResponse, "wt-otel Contract C /wt/surface response body",
           partial(load, SurfaceResponse)),
    Format("surface", SurfaceGolden, "wt-otel golden surface (*.surface.json, wt-otel surface fetch)", load_golden,
           "wt_surface", (SURFACE_SUFFIX,), validated=True),
)}

VALIDATED = tuple(name for name, f in FORMATS.items() if f.validated)


def by_name(name: str) -> Format:
    """The format registered as `name`; raises KeyError naming the known ones."""
    try:
        return FORMATS[name]
    except KeyError:
        raise KeyError(f"no wt-otel format {name!r} (known: {', '.join(FORMATS)})") from None


def from_version_key(data: Any, among: tuple[str, ...] = VALIDATED) -> Format | None:
    """The format whose version key `data` carries, among `among`."""
    if isinstance(data, dict):
        for name in among:
            key = FORMATS[name].version_key
            if key is not None and key in data:
                return FORMATS[name]
    return None


def from_file_name(name: str, among: tuple[str, ...] = VALIDATED) -> Format | None:
    """The format a file name says, among `among` (`scenario.yaml`, `*.wtin.json`, ...)."""
    return next((FORMATS[n] for n in among if FORMATS[n].matches_name(name)), None)


def _defs_by_title(schema: dict[str, Any]) -> dict[str, Any]:
    """Key `$defs` by each model's title: a class renamed in Python (kept `title`) keeps its schema unchanged."""
    defs = schema.get("$defs", {})
    renames = {k: d["title"] for k, d in defs.items() if d.get("title") not in (None, k) and d["title"] not in defs}
    if not renames:
        return schema
    text = json.dumps(schema)
    for old, new in renames.items():
        text = text.replace(f'"#/$defs/{old}"', f'"#/$defs/{new}"')
    out = json.loads(text)
    renamed = [(renames.get(k, k), v) for k, v in out["$defs"].items()]
    out["$defs"] = dict(sorted(renamed, key=lambda kv: kv[0]))  # in pydantic's (sorted) order
    return out


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of a format, generated from its model."""
    fmt = by_name(name)
    return {"$schema": SCHEMA_DIALECT, **_defs_by_title(fmt.model.model_json_schema()), "title": fmt.title}
