"""GenAI semconv 1.26-1.27: the whole prompt and completion as two span events.

`gen_ai.content.prompt` carries attribute `gen_ai.prompt` and
`gen_ai.content.completion` carries `gen_ai.completion`, each a JSON string of
OpenAI-style messages.
"""

from __future__ import annotations

from wt_otel.ingest.dialects.common import as_list, base_call
from wt_otel.ingest.messages import read_messages, split_system
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
    call.system_instructions, call.input_messages = split_system(read_messages(prompt or []))
    call.output_messages = read_messages(completion or [], "assistant")
    return [call]
