"""`policy`: require-prior-tool, forbid-after, and no-divergence (which reads a replayed run's server logs)."""

from __future__ import annotations

from wt_otel.contracts.assertions import Matcher, Policy
from wt_otel.contracts.results import LayerResult
from wt_otel.contracts.run import Trace
from wt_otel.scoring.assertions.common import verdict
from wt_otel.scoring.assertions.matchers import mismatches
from wt_otel.scoring.evidence import CallView, EvidenceView
from wt_otel.scoring.scorers import no_divergence


def _output_ok(call: CallView, matcher: Matcher | None) -> bool:
    return matcher is None or (call.has_result and not mismatches(matcher, call.result, ""))


def evaluate_policy(a: Policy, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
    if a.rule == "no-divergence":
        if trace is None:
            return verdict(a, False, "no-divergence needs a replayed run (wt-otel run)", view)
        result = no_divergence()(trace)
        return verdict(a, result.passed, result.detail, view)
    names = view.names
    if a.rule == "require-prior-tool":
        return _require_prior(a, view, names)
    return _forbid_after(a, view, names)


def _needs_results(a: Policy, view: EvidenceView) -> str:
    if a.other_output is not None and view.calls and not any(c.has_result for c in view.calls):
        return " (the transcript carries no tool results, so no output could match)"
    return ""


def _require_prior(a: Policy, view: EvidenceView, names: list[str]) -> LayerResult:
    guarded = [i for i, n in enumerate(names) if n == a.tool]
    if not guarded:
        return verdict(a, True, f"{a.tool!r} was not called, so nothing required {a.other!r}", view)
    qualifying = [i for i, c in enumerate(view.calls) if c.name == a.other and _output_ok(c, a.other_output)]
    what = f"{a.other!r}" + (" with a matching output" if a.other_output else "")
    bad = [i for i in guarded if not any(q < i for q in qualifying)]
    if bad:
        return verdict(a, False, f"{a.tool!r} at position {bad[0]} in {names} has no prior {what}"
                       + _needs_results(a, view), view)
    return verdict(a, True, f"every {a.tool!r} call follows {what}", view)


def _forbid_after(a: Policy, view: EvidenceView, names: list[str]) -> LayerResult:
    trigger = next((i for i, c in enumerate(view.calls)
                    if c.name == a.other and _output_ok(c, a.other_output)), None)
    what = f"{a.other!r}" + (" with a matching output" if a.other_output else "")
    if trigger is None:
        return verdict(a, True, f"no {what} call, so {a.tool!r} was never forbidden", view)
    late = [i for i, n in enumerate(names) if n == a.tool and i > trigger]
    if late:
        return verdict(a, False, f"{a.tool!r} at position {late[0]} follows {what} at position {trigger} "
                                 f"in {names}", view)
    return verdict(a, True, f"no {a.tool!r} after {what} (position {trigger})", view)
