"""GenAI semantic conventions >= 1.37: messages as span attributes.

`gen_ai.input.messages`, `gen_ai.output.messages`, `gen_ai.system_instructions`
and `gen_ai.tool.definitions` hold the conversation, as JSON strings or as
structured AnyValue. The same attributes may instead ride on a
`gen_ai.client.inference.operation.details` event (the event-only capture mode).
"""

from __future__ import annotations

from typing import Any

from wt_otel.ingest.dialects.common import INFERENCE_OPERATIONS, as_list, base_call, operation, tool_definition
from wt_otel.ingest.messages import read_messages, split_system
from wt_otel.model.session import LLMCall, Observation
from wt_otel.model.spans import SpanRecord

NAME = "semconv"
KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions")
DETAILS_EVENT = "gen_ai.client.inference.operation.details"


def extract(span: SpanRecord) -> list[Observation]:
    attrs = span.attributes
    op = operation(span)
    if op == "execute_tool":  # a tool's own record (Strands logs it as messages): `tools` reads it
        return []
    source = attrs if any(k in attrs for k in KEYS) else _details_event(span)
    if source is None:
        return []
    call = base_call(span, NAME)
    fill_call(call, source)
    if op not in INFERENCE_OPERATIONS and (op is not None or not call.output_messages):
        # an agent span that logs the conversation it ran (invoke_agent, create_agent...): it repeats
        # its model calls' evidence (the AI SDK even puts every part of the run in one output message)
        call.is_transcript = True
    return [call]


def fill_call(call: LLMCall, source: dict[str, Any]) -> None:
    """Fill messages, instructions and tool definitions from semconv-shaped attributes."""
    system, call.input_messages = split_system(read_messages(source.get("gen_ai.input.messages")))
    output = source.get("gen_ai.output.messages")
    call.output_messages = read_messages(output, "assistant")
    # JSON text without a backslash (no escapes) that never says finish_reason has none: not decoded again
    if isinstance(output, str) and "finish_reason" not in output and "\\" not in output:
        output = None
    for m in as_list(output) or []:
        if isinstance(m, dict) and m.get("finish_reason"):
            call.finish_reasons.append(str(m["finish_reason"]))
    instructions = source.get("gen_ai.system_instructions")
    if instructions is None:  # many producers still send the prompt as a `system` message
        call.system_instructions = system
    else:
        call.system_instructions = [p for m in read_messages(instructions, "system") for p in m["parts"]]
    if "gen_ai.tool.definitions" in source:
        call.tool_definitions = [d for d in map(tool_definition, as_list(source["gen_ai.tool.definitions"]) or [])
                                 if d]


def _details_event(span: SpanRecord) -> dict[str, Any] | None:
    """The details event's attributes; Strands splits them over several events (one key each, and
    several `gen_ai.input.messages` on a loop span): their message lists are joined in order."""
    merged: dict[str, Any] | None = None
    for ev in span.events:
        if ev.name == DETAILS_EVENT or ev.attributes.get("event.name") == DETAILS_EVENT:
            if merged is None:
                merged = {}
            for k, v in ev.attributes.items():
                if k in merged and k in KEYS:
                    merged[k] = (as_list(merged[k]) or []) + (as_list(v) or [])
                else:
                    merged[k] = v
    return merged
