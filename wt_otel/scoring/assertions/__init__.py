"""Declarative assertions, the evaluation: each parsed assertion judged over a run's evidence.

The syntax (what a `tool-sequence`, `tool-arguments`, `output` or `policy`
assertion and each matcher is, and how YAML parses into them) lives in
`wt_otel.contracts.assertions`. Here each family has its own evaluator module,
all of them over an `EvidenceView`: server-witnessed calls when a witness was
available, the agent's transcript otherwise, and every detail names which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from wt_otel.contracts.assertions import Assertion, Output, Policy, ToolArguments, ToolSequence
from wt_otel.contracts.results import LayerResult
from wt_otel.contracts.run import Trace
from wt_otel.scoring.assertions.calls import evaluate_output, evaluate_tool_arguments
from wt_otel.scoring.assertions.matchers import mismatches
from wt_otel.scoring.assertions.policy import evaluate_policy
from wt_otel.scoring.assertions.sequence import evaluate_tool_sequence
from wt_otel.scoring.evidence import EvidenceView

__all__ = ["EVALUATORS", "evaluate", "evaluate_one", "mismatches"]

Evaluator = Callable[..., LayerResult]  # (assertion, view, trace) -> LayerResult

EVALUATORS: dict[type[Assertion], Evaluator] = {
    ToolSequence: evaluate_tool_sequence,
    ToolArguments: evaluate_tool_arguments,
    Output: evaluate_output,
    Policy: evaluate_policy,
}


def evaluate_one(assertion: Assertion, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
    """One assertion over one view (`trace`: the replayed run, for rules that need its server logs)."""
    return EVALUATORS[type(assertion)](assertion, view, trace)


def evaluate(assertions: Sequence[Assertion], view: EvidenceView, trace: Trace | None = None
             ) -> list[tuple[Assertion, LayerResult]]:
    """Every assertion over one view; an assertion that raises is a failure naming the exception."""
    out = []
    for a in assertions:
        try:
            out.append((a, evaluate_one(a, view, trace)))
        except Exception as exc:  # a bug here must not hide the other assertions' verdicts
            out.append((a, LayerResult(passed=False, detail=f"{a.where} {a.type}: raised {type(exc).__name__}: "
                                                            f"{exc}")))
    return out
