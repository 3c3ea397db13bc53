"""`scenario.yaml` (`wt_scenario: 1`): one regression scenario and its fixtures.

Written by `wt-otel` from a trace, then edited by people, so it is the one
strict format: an unknown key is an error (a misspelt `forbiden_calls` must not
silently turn a check off). Fixture paths are relative to the scenario file
and may not leave its folder, so a scenario directory can be moved or shared.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from wt_otel.contracts.problems import (
    ContractModel,
    Rule,
    describe,
    fail,
    is_nonempty_str,
    is_one_of,
    is_version,
    load,
)

GATES = ("outcome", "trajectory", "constraint")
_SLUG = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")


def _slug(value: Any) -> Any:
    if isinstance(value, str) and _SLUG.match(value):
        return value
    fail("slug", f"must be a slug of lowercase letters, digits, '_' and '-', {describe(value)}")


def _relative_path(value: Any) -> Any:
    if value is None:
        return value
    if not isinstance(value, str) or not value:
        fail("path", f"must be a relative path, {describe(value)}")
    posix, windows = PurePosixPath(value), PureWindowsPath(value)
    if posix.is_absolute() or windows.is_absolute() or windows.drive:
        fail("path", f"must be relative to the scenario file, got {value!r}")
    if ".." in posix.parts or ".." in windows.parts:
        fail("path", f"must not contain '..' (keep fixtures inside the scenario folder), got {value!r}")
    return value


def _turns(value: Any) -> Any:
    if isinstance(value, list) and value:
        return value
    fail("turns", f"must be a list of at least one user message, {describe(value)}")


RelPath = Annotated[str | None, Rule(_relative_path)]


class _Strict(ContractModel):
    model_config = ConfigDict(extra="forbid")


class Fixtures(_Strict):
    envelope: RelPath = None
    universe: RelPath = None
    cassette: RelPath = None


class Assertion(ContractModel):
    """One check; the vocabulary is defined by the assertion suites, so any
    further keys are kept for them to read."""

    type: Annotated[str, is_nonempty_str("the assertion kind, e.g. tool_sequence")]


class Scenario(_Strict):
    """A `scenario.yaml`."""

    wt_scenario: Annotated[Literal[1], is_version("wt_scenario")]
    id: Annotated[str, Rule(_slug)]
    description: str = ""
    pack: str | None = None
    owner: str | None = None
    tags: list[str] = Field(default_factory=list, description='e.g. "origin:<ref>", "unreviewed"')
    user_turns: Annotated[list[str], Rule(_turns)] = Field(description="what the user says, turn by turn")
    requires_tool_use: bool = False
    must_call: list[str] = []
    forbidden_calls: list[str] = []
    assertions: list[Assertion] = []
    fixtures: Fixtures = Field(default_factory=Fixtures)
    scorer: RelPath = None
    runs: int = Field(1, ge=1)
    variance_allowed: bool = False
    gates: list[Annotated[Literal["outcome", "trajectory", "constraint"], is_one_of(GATES)]] = Field(
        default_factory=lambda: ["outcome"], description="layers that decide the verdict"
    )
    metadata: dict[str, str] = {}


def load_scenario(data: Any) -> Scenario:
    """Validate a parsed `scenario.yaml`; raises `ContractError` listing every problem."""
    return load(Scenario, data)
