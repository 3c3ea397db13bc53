"""GenAI semconv 1.28-1.36: one log record (or span event) per message.

Event names: `gen_ai.{system,user,assistant,tool}.message` and `gen_ai.choice`,
given in the log's `eventName` or its `event.name` attribute; the message is
the body (kvlist, or the same as JSON text), or the attributes for producers that put it there. Log
records reach the span as events (see `wt_otel.model.spans.LogRecord.as_event`).
"""

from __future__ import annotations

from typing import Any

from wt_otel.ingest.dialects.common import INFERENCE_OPERATIONS, base_call, operation
from wt_otel.ingest.messages import read_messages, split_system
from wt_otel.model.parts import decode_json, is_placeholder, text_of
from wt_otel.model.session import LLMCall, Observation
from wt_otel.model.spans import Event, SpanRecord

NAME = "events"
ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE = "gen_ai.choice"


def event_name(ev: Event) -> str:
    if ev.name in ROLES or ev.name == CHOICE:
        return ev.name
    return str(ev.attributes.get("event.name") or ev.name)


def extract(span: SpanRecord) -> list[Observation]:
    op = operation(span)
    if op == "execute_tool":  # Strands puts a tool's arguments and result in message events: `tools` reads them
        return []
    events = [ev for ev in span.events if event_name(ev) in ROLES or event_name(ev) == CHOICE]
    if not events:
        return []
    call = call_from_events(span, events, NAME)
    # agent and loop spans (invoke_agent, Strands' execute_event_loop_cycle) repeat their model calls
    call.is_transcript = op is not None and op not in INFERENCE_OPERATIONS
    return [call]


def call_from_events(span: SpanRecord, events: list[Event], dialect: str) -> LLMCall:
    """One LLM call from its message events (also used for pydantic-ai's `events` attribute)."""
    call = base_call(span, dialect)
    captured = False
    chat: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for ev in sorted(events, key=lambda e: e.time_ns):
        body = decode_json(ev.body)[0] if isinstance(ev.body, str) else ev.body  # Semantic Kernel: JSON text
        data = body if isinstance(body, dict) else dict(ev.attributes)
        name = event_name(ev)
        if name == CHOICE:
            msg = decode_json(data["message"])[0] if "message" in data else data
            if not isinstance(msg, dict):  # Strands: the choice's content blocks as JSON text
                msg = {"role": "assistant", "content": msg}
            captured |= _has_content(msg)
            outputs.append({"role": msg.get("role") or "assistant", "content": msg.get("content"),
                            "tool_calls": msg.get("tool_calls")})
            if data.get("finish_reason"):
                call.finish_reasons.append(str(data["finish_reason"]))
            continue
        role = data.get("role") or ROLES[name]
        captured |= _has_content(data)
        m = {"role": role, "content": data.get("content"), "tool_calls": data.get("tool_calls")}
        if role == "tool":
            m["tool_call_id"] = data.get("id") or data.get("tool_call_id") or ""
        chat.append(m)
    call.system_instructions, call.input_messages = split_system(read_messages(chat))
    call.output_messages = read_messages(outputs, "assistant")
    call.content_captured = captured
    return call


def _has_content(data: dict[str, Any]) -> bool:
    content = data.get("content")
    content = text_of(content) if text_of(content) is not None else (content or None)
    return bool(data.get("tool_calls")) or (bool(content) and not is_placeholder(content))
