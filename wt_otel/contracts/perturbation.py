"""Perturbations: how a robustness run changes the recorded universe (0001, robustness under perturbation).

A scenario (`perturbations:` in scenario.yaml) or `wt-otel run --perturb` declares them; each is run
once, after the scenario's ordinary runs, with the universe answering the chosen tool(s) otherwise:

- `error`: a structured tool error (`isError`), as a failed upstream would;
- `empty`: a schema-shaped empty result (`[]` / `{}` / `""`), as a search finding nothing would;
- `slow`: the recorded answer, but only after `delay_s` seconds: past the agent's deadline.

The run lands in the `robustness` layer: it passes when the agent handled the perturbation (the turn
ended in-contract, the reply states nothing only the hidden recording held, and every `expect`
assertion holds).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from wt_otel.contracts.problems import ContractModel, Rule, describe, fail, is_one_of

KINDS = ("error", "empty", "slow")
DEFAULT_DELAY_S = 30.0
DEFAULT_ERROR = "injected failure (wt-otel robustness run): the upstream is unavailable"
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*\Z")


def _name(value: Any) -> Any:
    if value is None or (isinstance(value, str) and _NAME.match(value)):
        return value
    fail("slug", f"must be a slug of lowercase letters, digits, '_', '.' and '-', {describe(value)}")


class Perturbation(ContractModel):
    """One perturbation of the universe for one robustness run."""

    model_config = ConfigDict(extra="forbid")

    kind: Annotated[Literal["error", "empty", "slow"], is_one_of(KINDS, "error, empty or slow")]
    tool: str = Field("*", description='the tool whose answers change; "*" for every tool')
    name: Annotated[str | None, Rule(_name)] = None
    delay_s: float | None = Field(None, gt=0, description=f"slow: seconds before answering [{DEFAULT_DELAY_S:g}]")
    message: str | None = Field(None, description="error: the error text the tool answers with")
    expect: list[dict[str, Any]] = Field(
        default_factory=list, description="assertions (trace2test vocabulary) the perturbed run must also pass")

    @property
    def label(self) -> str:
        return self.name or f"{self.kind}:{self.tool}"

    def applies_to(self, tool: str) -> bool:
        return self.tool in ("*", tool)

    @property
    def delay(self) -> float:
        return self.delay_s if self.delay_s is not None else DEFAULT_DELAY_S


def parse_flag(spec: str) -> Perturbation:
    """`--perturb KIND[:TOOL[:ARG]]`: `error:lookup_order`, `empty`, `slow:search:12.5` (ARG: delay_s for slow,
    the message for error). Raises ValueError with the accepted forms."""
    kind, _, rest = spec.partition(":")
    tool, _, arg = rest.partition(":")
    if kind not in KINDS:
        raise ValueError(f"--perturb {spec!r}: the kind must be one of {', '.join(KINDS)} "
                         "(KIND[:TOOL[:ARG]], e.g. error:lookup_order or slow:search:12)")
    fields: dict[str, Any] = {"kind": kind, "tool": tool or "*"}
    if arg and kind == "slow":
        try:
            fields["delay_s"] = float(arg)
        except ValueError:
            raise ValueError(f"--perturb {spec!r}: slow takes a delay in seconds, got {arg!r}") from None
    elif arg and kind == "error":
        fields["message"] = arg
    elif arg:
        raise ValueError(f"--perturb {spec!r}: empty takes no argument")
    return Perturbation.model_validate(fields)
