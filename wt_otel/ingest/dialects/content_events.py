"""GenAI semconv 1.26-1.27: the whole prompt and completion as two span events.

`gen_ai.content.prompt` carries attribute `gen_ai.prompt` and
`gen_ai.content.completion` carries `gen_ai.completion`, each a JSON string of
OpenAI-style messages.
"""

from __future__ import annotations

from wt_otel.ingest.dialects.common import as_list, base_call
from wt_otel.model.parts import from_openai_chat, text_of
from wt_otel.model.session import Observation
from wt_otel.model.spans import SpanRecord

NAME = "content_events"


def extract(span: SpanRecord) -> list[Observation]:
    prompt = completion = None
    for ev in span.events:
        if ev.name == "gen_ai.content.prompt":
            prompt = as_list(ev.attributes.get("gen_ai.prompt"))
        elif ev.name == "gen_ai.content.completion":
            completion = as_list(ev.attributes.get("gen_ai.completion"))
    if prompt is None and completion is None:
        return []
    call = base_call(span, NAME)
    messages = [m for m in prompt or [] if isinstance(m, dict)]
    call.system_instructions = [{"type": "text", "content": text_of(m.get("content")) or ""}
                                for m in messages if m.get("role") == "system"]
    call.input_messages = from_openai_chat([m for m in messages if m.get("role") != "system"])
    outputs = [c.get("message", c) if isinstance(c, dict) else c for c in completion or []]
    call.output_messages = from_openai_chat([{**m, "role": m.get("role") or "assistant"}
                                             for m in outputs if isinstance(m, dict)])
    return [call]
