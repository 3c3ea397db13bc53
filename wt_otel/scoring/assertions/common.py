"""What every evaluator's verdict looks like: where the assertion was written, its type, the reason, the evidence."""

from __future__ import annotations

from wt_otel.contracts.assertions import Assertion
from wt_otel.contracts.results import LayerResult
from wt_otel.scoring.evidence import EvidenceView


def verdict(assertion: Assertion, ok: bool, text: str, view: EvidenceView) -> LayerResult:
    return LayerResult(passed=ok, detail=f"{assertion.where} {assertion.type}: {text} ({view.describe()})")
