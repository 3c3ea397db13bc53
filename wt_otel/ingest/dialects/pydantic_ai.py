"""pydantic-ai / Logfire instrumentation.

Current versions put semconv messages on chat spans (read by `semconv`) and
the whole run's history on the agent span as `pydantic_ai.all_messages`
(parts model: tool results in `role: user`, `result` for `response`).
Version 1 instead logs events *inside an attribute*: `events` on chat spans
and `all_messages_events` on the agent run span, each a JSON list of event
dicts carrying `event.name`.
"""

from __future__ import annotations

from wt_otel.ingest.dialects.common import as_list, base_call
from wt_otel.ingest.dialects.events import call_from_events
from wt_otel.ingest.messages import read_messages, split_system
from wt_otel.model.session import Observation
from wt_otel.model.spans import Event, SpanRecord

NAME = "pydantic_ai"


def extract(span: SpanRecord) -> list[Observation]:
    a = span.attributes
    if "pydantic_ai.all_messages" in a:
        call = base_call(span, NAME)
        call.input_messages = split_system(read_messages(a["pydantic_ai.all_messages"]))[1]
        call.is_transcript = True
        return [call]
    for key, transcript in (("events", False), ("all_messages_events", True)):
        if key in a:
            events = [Event(name=str(e.get("event.name") or ""), body=e)
                      for e in as_list(a[key]) or [] if isinstance(e, dict)]
            if events:
                call = call_from_events(span, events, NAME)
                call.is_transcript = transcript
                return [call]
    return []
