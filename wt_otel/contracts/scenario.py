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

from pydantic import ConfigDict, Field, model_validator

from wt_otel.contracts.assertions import AssertionSyntaxError, parse_assertions
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.problems import (
    ContractModel,
    Rule,
    describe,
    fail,
    is_nonempty_str,
    is_one_of,
    is_version,
    load,
    raise_at,
)

GATES = ("outcome", "trajectory", "constraint", "robustness")
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


class _StrictModel(ContractModel):
    model_config = ConfigDict(extra="forbid")


class Fixtures(_StrictModel):
    envelope: RelPath = None
    universe: RelPath = None
    cassette: RelPath = None


class AssertionEntry(ContractModel):
    """One check in the trace2test vocabulary (`wt_otel.contracts.assertions`): the keys
    beyond `type` are kept here and checked strictly by the Scenario validator."""

    model_config = ConfigDict(title="Assertion")  # the schema title the format has always had

    type: Annotated[str, is_nonempty_str("the assertion kind, e.g. tool-sequence")]


class Scenario(_StrictModel):
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
    assertions: list[AssertionEntry] = []
    fixtures: Fixtures = Field(default_factory=Fixtures)
    scorer: RelPath = None
    runs: int = Field(1, ge=1)
    variance_allowed: bool = False
    synthesize: str | None = Field(
        None, description="MODULE:ATTR of the universe's synthesize hook (on_miss: synthesize); the scenario's folder "
                          "is importable")
    perturbations: list[Perturbation] = Field(
        default_factory=list, description="robustness runs: each changes the universe once (error, empty, slow)")
    gates: list[Annotated[Literal["outcome", "trajectory", "constraint", "robustness"], is_one_of(GATES)]] = Field(
        # mypy infers the lambda as list[str], not the Literal list
        default_factory=lambda: ["outcome"], description="layers that decide the verdict"  # type: ignore[arg-type]
    )
    metadata: dict[str, str] = {}

    def inferred_gate(self) -> list[str]:
        """The layers the scenario's own declarations put in the gate: outcome always; trajectory with a
        tool-sequence / tool-arguments assertion, must_call or forbidden_calls; constraint with a policy."""
        kinds = {a.type for a in self.assertions}
        gate = ["outcome"]
        if kinds & {"tool-sequence", "tool-arguments"} or self.must_call or self.forbidden_calls:
            gate.append("trajectory")
        if "policy" in kinds:
            gate.append("constraint")
        if self.perturbations:
            gate.append("robustness")
        return gate

    def gate(self) -> list[str]:
        """The effective gate: the inferred layers plus any an explicit `gates:` adds, in GATES order."""
        wanted = set(self.inferred_gate()) | (set(self.gates) if "gates" in self.model_fields_set else set())
        return [g for g in GATES if g in wanted]

    @model_validator(mode="after")
    def _assertions_and_gates(self) -> Scenario:
        errors: list[tuple[tuple[str | int, ...], str]] = []
        try:
            parse_assertions([a.model_dump(mode="python") for a in self.assertions])
        except AssertionSyntaxError as exc:
            errors += [(loc, f"is invalid: {message}") for loc, message in exc.problems]
        for i, perturbation in enumerate(self.perturbations):
            try:
                parse_assertions(perturbation.expect, ("perturbations", i, "expect"))
            except AssertionSyntaxError as exc:
                errors += [(loc, f"is invalid: {message}") for loc, message in exc.problems]
        if "gates" in self.model_fields_set:
            dropped = [g for g in self.inferred_gate() if g not in self.gates]
            for layer in dropped:
                errors.append((("gates",), f"omits {layer!r}, which the scenario's own checks put in the gate "
                                           f"({_why(self, layer)}); gates may only widen the inferred gate "
                                           f"{self.inferred_gate()}: add {layer!r} or remove the check"))
        raise_at(errors)
        return self


def _why(scenario: Scenario, layer: str) -> str:
    if layer == "outcome":
        return "the outcome layer is always gated"
    if layer == "robustness":
        return "perturbations"
    kinds = ("tool-sequence", "tool-arguments") if layer == "trajectory" else ("policy",)
    found = [f"{k} assertion" for k in kinds if any(a.type == k for a in scenario.assertions)]
    if layer == "trajectory":
        found += [k for k in ("must_call", "forbidden_calls") if getattr(scenario, k)]
    return ", ".join(found)


def load_scenario(data: Any) -> Scenario:
    """Validate a parsed `scenario.yaml`; raises `ContractError` listing every problem."""
    return load(Scenario, data)
