"""Dialect normalizers: pure functions from one span to LLM calls / tool executions.

Each module has a `NAME` and `extract(span) -> list[Observation]` that returns
`[]` when the span is not in its dialect. `observe` asks them in priority
order (richest, most specific evidence first) and takes the first answer.
"""

from __future__ import annotations

from wt_otel.ingest.dialects import (
    agents,
    common,
    content_events,
    events,
    openinference,
    openllmetry,
    pydantic_ai,
    semconv,
    tools,
    vercel_ai,
)
from wt_otel.model.session import Observation
from wt_otel.model.spans import SpanRecord

DIALECTS = (pydantic_ai, semconv, tools, events, content_events, openllmetry, openinference, agents, vercel_ai)


def observe(span: SpanRecord) -> list[Observation]:
    """What this span tells about the session, in the first dialect that recognises it."""
    for dialect in DIALECTS:
        found = dialect.extract(span)
        if found:
            return found
    if common.operation(span) in common.INFERENCE_OPERATIONS:
        # An inference span with no message content: capture was off.
        call = common.base_call(span, "semconv")
        call.content_captured = False
        return [call]
    return []
