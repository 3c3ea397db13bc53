"""Dialect normalizers: pure functions from one span to LLM calls / tool executions.

Each module has a `NAME` and `extract(span) -> list[Observation]` that returns
`[]` when the span is not in its dialect. `observe` asks them in priority
order (richest, most specific evidence first) and takes the first answer; the
shape-first reader (`shape`) comes last and reads what no dialect knows.

Dialects are hints: `WT_OTEL_DIALECTS_OFF` (comma-separated names, or `all`) switches them off, leaving
the shape reader alone; the leave-one-producer-out test runs the fixtures that way. Set it before the
import starts (worker processes read it when they load this module).
"""

from __future__ import annotations

import os

from wt_otel.ingest.dialects import (
    agents,
    common,
    content_events,
    events,
    openinference,
    openllmetry,
    pydantic_ai,
    semconv,
    shape,
    tools,
    vercel_ai,
)
from wt_otel.model.session import Observation, ToolExecution
from wt_otel.model.spans import SpanRecord

DIALECTS = (pydantic_ai, semconv, tools, events, content_events, openllmetry, openinference, agents, vercel_ai)
NAMES = frozenset(d.NAME for d in DIALECTS)
OFF_ENV = "WT_OTEL_DIALECTS_OFF"


def _enabled(off: str) -> tuple:
    names = {n.strip() for n in off.split(",") if n.strip()}
    unknown = names - NAMES - {"all"}
    if unknown:
        raise ValueError(f"{OFF_ENV}: unknown dialect(s) {sorted(unknown)}; known: {sorted(NAMES)} or 'all'")
    return tuple(d for d in DIALECTS if "all" not in names and d.NAME not in names) + (shape,)


_active = _enabled(os.environ.get(OFF_ENV, ""))


def switch_off(names: str) -> None:
    """Read without the named dialects (comma-separated, or `all`), here and in worker processes
    started from now on; `""` switches every dialect back on."""
    global _active
    _active = _enabled(names)
    if names:
        os.environ[OFF_ENV] = names
    else:
        os.environ.pop(OFF_ENV, None)


def observe(span: SpanRecord) -> list[Observation]:
    """What this span tells about the session, in the first dialect that reads content from it.

    A dialect that recognises the span but finds no message in it (its producer put the content somewhere
    it does not look: a log body as JSON text, an attribute of a newer version) is only a hint: the next
    readers, the shape reader last, look further; its answer stands when none of them finds more."""
    hint: list[Observation] = []
    for dialect in _active:
        found = dialect.extract(span)
        if found:
            for o in found:
                if type(o) is ToolExecution or o.input_messages or o.output_messages or o.tool_definitions:
                    return found
            hint = hint or found
    if hint:
        return hint
    if common.operation(span) in common.INFERENCE_OPERATIONS:
        # An inference span with no message content: capture was off.
        call = common.base_call(span, "semconv")
        call.content_captured = False
        return [call]
    return []
