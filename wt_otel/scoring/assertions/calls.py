"""`tool-arguments` and `output`: checks over selected calls of one tool (or the final reply)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from wt_otel.contracts.assertions import CallSelection, Output, ToolArguments, show
from wt_otel.contracts.results import LayerResult
from wt_otel.contracts.run import Trace
from wt_otel.scoring.assertions.common import verdict
from wt_otel.scoring.assertions.matchers import mismatches
from wt_otel.scoring.evidence import CallView, EvidenceView


def selected(a: CallSelection, view: EvidenceView) -> tuple[list[tuple[int, CallView]], str | None]:
    """The calls `a` selects (with their index among that tool's calls), or why there are none."""
    calls = list(enumerate(view.of_tool(a.tool)))
    if not calls:
        return [], f"no call of {a.tool!r} (calls: {view.names})"
    if a.index is not None:
        if not -len(calls) <= a.index < len(calls):
            return [], f"no {a.tool!r} call at index {a.index} ({len(calls)} call(s))"
        return [calls[a.index]], None
    if a.which == "first":
        return calls[:1], None
    if a.which == "last":
        return calls[-1:], None
    return calls, None


def judge(a: CallSelection, view: EvidenceView, check: Callable[[CallView], list[str]]) -> LayerResult:
    """Apply `check(call) -> list of reasons` to the selected calls, honouring all / any."""
    calls, problem = selected(a, view)
    if problem:
        return verdict(a, False, problem, view)
    failures = [(i, check(c)) for i, c in calls]
    failures = [(i, reasons) for i, reasons in failures if reasons]
    which = f"index {a.index}" if a.index is not None else a.which
    ok = len(failures) < len(calls) if a.which == "any" and a.index is None else not failures
    if ok:
        return verdict(a, True, f"{a.tool!r} ({which}, {len(calls)} call(s) checked) matches", view)
    shown = "; ".join(f"{a.tool} call #{i}: {', '.join(reasons)}" for i, reasons in failures[:5])
    return verdict(a, False, shown, view)


def evaluate_tool_arguments(a: ToolArguments, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
    return judge(a, view, lambda call: mismatches(a.arguments, call.args, "arguments"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _text_checks(text: str, contains: tuple[str, ...], not_contains: tuple[str, ...], where: str) -> list[str]:
    low = text.lower()
    out = [f"{where} does not contain {c!r}" for c in contains if c.lower() not in low]
    out += [f"{where} contains {c!r}" for c in not_contains if c.lower() in low]
    return out


def _output_reasons(a: Output, value: Any, where: str) -> list[str]:
    reasons = _text_checks(_text(value), a.contains, a.not_contains, where)
    if a.match is not None:
        reasons += mismatches(a.match, value, where)
    return reasons


def evaluate_output(a: Output, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
    if not a.tool:
        reasons = _output_reasons(a, view.final_reply, "the final reply")
        if reasons:
            return verdict(a, False, "; ".join(reasons) + f" (final reply: {show(view.final_reply)})", view)
        return verdict(a, True, "the final reply matches", view)

    def check(call: CallView) -> list[str]:
        if not call.has_result:
            return ["the evidence holds no result for it (transcript calls report no results)"]
        return _output_reasons(a, call.result, "output")

    return judge(a, view, check)
