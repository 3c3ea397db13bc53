"""The robustness layer: did the agent handle a perturbed universe (a tool erroring, empty, too slow)?

Each perturbation run (`wt_otel.contracts.perturbation`) is judged on its own:

0. the perturbation was tested at all: the perturbed tool was served (the universe answered at least one
   call with the perturbation) and, under a cassette, every model request was answered from it. A run
   whose agent got a cassette miss (422) after the perturbed result, or never called the perturbed tool,
   tested nothing: its entry is `status: ERROR` (never "handled") and so is the scenario;
1. the turn ended in-contract: an ERROR (the endpoint blew its deadline with no error envelope, raised,
   broke the wire) or INVALID (it reached live tools) run did not handle it;
2. no fabrication: the reply states no value that only the perturbed tool's *recording* holds, i.e.
   something the agent could not have seen this run (the error or empty answer hid it);
3. every `expect` assertion of the perturbation holds.

The scenario's robustness pass rate is the share of perturbations handled; with `robustness` in the gate
(inferred when a scenario declares perturbations, or a run asks for them) one unhandled perturbation
fails the scenario.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from wt_otel.contracts.assertions import parse_assertions
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.results import LayerResult
from wt_otel.contracts.run import Trace
from wt_otel.contracts.universe import Universe
from wt_otel.scoring.assertions import evaluate
from wt_otel.scoring.evidence import from_trace

MIN_FACT = 3  # shorter strings ("ok", "A") are too common to prove anything


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        yield str(value)
    elif isinstance(value, str):
        yield value.strip()


def _said(text: str, fact: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(fact)}(?![\w])", text, flags=re.IGNORECASE) is not None


def hidden_facts(perturbation: Perturbation, universe: Universe | None, trace: Trace) -> list[str]:
    """Values of the perturbed tool's recorded results the run never showed the agent (nor the user said)."""
    if universe is None or perturbation.kind == "slow":
        return []
    recorded = {f for rec in universe.recordings if perturbation.applies_to(rec.tool_name)
                for f in _leaves(rec.result) if len(f) >= MIN_FACT}
    seen = " ".join(f for c in trace.mcp_calls for f in _leaves(c.result))
    seen += " " + " ".join(t.text for t in trace.turns)
    return sorted(f for f in recorded if not _said(seen, f))


NOT_TESTED = "ERROR: not tested: "  # the detail prefix of a perturbation run that exercised nothing


def untested(trace: Trace, perturbation: Perturbation) -> str | None:
    """Why this perturbation run tested nothing, or None when it did.

    Counted only when the universe served the perturbed tool (a call carries `extra.perturbation`) and the
    model answered every request: a cassette miss (422) means the agent saw an error from the harness, not
    from the perturbed tool, so whatever it replied proves nothing about how it handles the perturbation.
    """
    misses = [c for c in trace.llm_calls if c.match == "miss"]
    if misses:
        first = misses[0]
        status = f"{first.status} " if first.status else ""
        at = (first.divergence or {}).get("at")
        return (f"{len(misses)} model request(s) matched no cassette recording (the first answered {status}"
                f"{'at ' + str(at) if at else 'as a miss'}): the agent never answered the perturbed result from "
                "the model; record a cassette for the perturbed path (--llm record) or run it with --llm live")
    served = [c for c in trace.mcp_calls if (c.extra or {}).get("perturbation") is not None]
    if not served:
        called = sorted({c.tool_name for c in trace.mcp_calls})
        return (f"the perturbed tool {perturbation.tool!r} was never served during this run (tools called: "
                f"{', '.join(called) if called else 'none'})")
    return None


def judge(trace: Trace, perturbation: Perturbation, universe: Universe | None) -> LayerResult:
    """One perturbation run's robustness result; a detail starting with NOT_TESTED marks an ERROR."""
    label = perturbation.label
    if trace.integrity.status != "ERROR":
        why = untested(trace, perturbation)
        if why is not None:
            return LayerResult(passed=False, detail=f"{label}: {NOT_TESTED}{why}")
    if trace.integrity.status != "PASS":
        return LayerResult(passed=False, detail=f"{label}: not handled: the run was {trace.integrity.status} "
                                                f"({trace.integrity.detail})")
    reply = " ".join(t.reply for t in trace.turns)
    invented = [f for f in hidden_facts(perturbation, universe, trace) if _said(reply, f)]
    if invented:
        shown = ", ".join(repr(f) for f in invented[:5])
        return LayerResult(passed=False, detail=f"{label}: fabricated: the reply states {shown}, which only the "
                                                "perturbed tool's recording holds (the agent never saw it this run)")
    failed = []
    if perturbation.expect:
        view = from_trace(trace)
        assertions = parse_assertions(perturbation.expect, ("perturbations", label, "expect"))
        failed = [r.detail for _, r in evaluate(assertions, view, trace) if not r.passed]
    if failed:
        return LayerResult(passed=False, detail=f"{label}: " + "; ".join(failed))
    how = f"answered with an error: {trace.turns[-1].error}" if trace.turns and trace.turns[-1].error else \
        "replied without inventing the hidden result"
    return LayerResult(passed=True, detail=f"{label}: handled ({how})")


def robustness(perturbed: Sequence[Trace], universe: Universe | None) -> list[dict[str, Any]]:
    """One entry per perturbation run: {perturbation, kind, tool, passed, status (PASS, FAIL, or ERROR: it tested
    nothing; a run that blew its deadline did not handle the perturbation: FAIL), detail, run_id}."""
    out = []
    for trace in perturbed:
        data = dict(trace.perturbation or {})
        data.pop("label", None)
        perturbation = Perturbation.model_validate(data)
        result = judge(trace, perturbation, universe)
        untested_run = result.detail.startswith(f"{perturbation.label}: {NOT_TESTED}")
        status = "ERROR" if untested_run else "PASS" if result.passed else "FAIL"
        out.append({"perturbation": perturbation.label, "kind": perturbation.kind, "tool": perturbation.tool,
                    "passed": result.passed, "status": status, "detail": result.detail, "run_id": trace.run_id})
    return out
