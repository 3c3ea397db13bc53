"""`tool-sequence`: the order of the calls (exact, ordered subsequence, contiguous run)."""

from __future__ import annotations

from wt_otel.contracts.assertions import ToolSequence
from wt_otel.contracts.results import LayerResult
from wt_otel.contracts.run import Trace
from wt_otel.scoring.assertions.common import verdict
from wt_otel.scoring.evidence import EvidenceView


def _is_subsequence(want: list[str], got: list[str]) -> int | None:
    """None when `want` is an ordered subsequence of `got`; else the index in `want` of the first tool not found."""
    it = iter(got)
    for i, name in enumerate(want):
        if not any(name == g for g in it):
            return i
    return None


def _is_contiguous(want: list[str], got: list[str]) -> bool:
    return any(got[i:i + len(want)] == want for i in range(len(got) - len(want) + 1))


def evaluate_tool_sequence(a: ToolSequence, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
    want, got = list(a.tools), view.names
    shown = f"expected {want}, got {got}"
    if a.mode == "exact":
        return verdict(a, want == got, shown if want != got else f"exactly {got}", view)
    if a.mode == "contiguous":
        ok = _is_contiguous(want, got)
        return verdict(a, ok, f"{want} {'found' if ok else 'not found'} as a contiguous run in {got}", view)
    missing = _is_subsequence(want, got)
    if missing is None:
        return verdict(a, True, f"{want} found in order in {got}", view)
    after = f" after {want[missing - 1]!r}" if missing else ""
    return verdict(a, False, f"{shown}: {want[missing]!r} not found{after} (order matters, gaps allowed)", view)
