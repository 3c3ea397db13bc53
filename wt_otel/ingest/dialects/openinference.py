"""OpenInference (Arize): `openinference.span.kind` LLM / TOOL spans.

LLM spans flatten messages as `llm.input_messages.{i}.message.{role,content,
contents.{j}.message_content.text,tool_calls.{j}.tool_call.{id,function.name,
function.arguments},tool_call_id}` (and `llm.output_messages`), tools as
`llm.tools.{i}.tool.json_schema`. When the flattened messages are absent the
raw `input.value` / `output.value` JSON (request / response or message lists)
is read instead. TOOL spans: `tool.name`, `tool.id`, `input.value`,
`output.value`.
"""

from __future__ import annotations

from typing import Any

from wt_otel.ingest.dialects.common import base_call, tool_definition, unflatten
from wt_otel.ingest.dialects.tools import tool_execution
from wt_otel.ingest.messages import read_messages, split_system
from wt_otel.model.parts import decode_json
from wt_otel.model.session import Observation
from wt_otel.model.spans import SpanRecord

NAME = "openinference"


def extract(span: SpanRecord) -> list[Observation]:
    a = span.attributes
    kind = str(a.get("openinference.span.kind") or "").upper()
    if kind == "TOOL":
        name = str(a.get("tool.name") or span.name)
        found: list[Observation] = [tool_execution(span, name, a.get("input.value"), a.get("output.value"),
                                                   a.get("tool.id") or a.get("tool_call.id"), NAME)]
        definition = tool_definition({"name": name, "description": a.get("tool.description"),
                                      "parameters": a.get("tool.parameters")})
        if definition and "input_schema" in definition:  # the tool span also says how the tool was offered
            offered = base_call(span, NAME)
            offered.is_transcript, offered.tool_definitions = True, [definition]
            found.append(offered)
        return found
    if kind != "LLM":
        if kind and any(k.startswith(("llm.input_messages.", "llm.output_messages.")) for k in a):
            # CHAIN / AGENT spans (LangGraph nodes) echo part of the history: transcript evidence
            view = base_call(span, NAME)
            view.is_transcript = True
            view.input_messages = split_system(read_messages([_chat(m) for m in unflatten(a, "llm.input_messages")]))[1]
            view.output_messages = read_messages([_chat(m) for m in unflatten(a, "llm.output_messages")], "assistant")
            return [view]
        return []
    call = base_call(span, NAME)
    inputs = read_messages([_chat(m) for m in unflatten(a, "llm.input_messages")]) or _raw(a.get("input.value"))
    outputs = (read_messages([_chat(m) for m in unflatten(a, "llm.output_messages")], "assistant")
               or _raw(a.get("output.value"), "assistant"))
    call.system_instructions, call.input_messages = split_system(inputs)
    call.output_messages = [m for m in outputs if m["role"] != "system"]
    if a.get("llm.finish_reason"):
        call.finish_reasons = [str(a["llm.finish_reason"])]
    tools = [t.get("tool", {}).get("json_schema") for t in unflatten(a, "llm.tools") if isinstance(t, dict)]
    call.tool_definitions = [d for d in (tool_definition(decode_json(t)[0]) for t in tools) if d]
    call.content_captured = bool(inputs or outputs)
    return [call]


def _chat(entry: Any) -> dict[str, Any]:
    """One unflattened `{message: {...}}` entry as an OpenAI chat message."""
    m = entry.get("message", entry) if isinstance(entry, dict) else {}
    out: dict[str, Any] = {"role": m.get("role") or "user"}
    content = m.get("content")
    if content is None and isinstance(m.get("contents"), list):
        content = [c.get("message_content", c) for c in m["contents"] if isinstance(c, dict)]
    out["content"] = content
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    calls = [c.get("tool_call", c) for c in m.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        out["tool_calls"] = [{"id": c.get("id"), "function": c.get("function") or {}} for c in calls]
    return out


def _raw(value: Any, role: str = "user") -> list[dict[str, Any]]:
    """The raw request / response JSON (`input.value`, `output.value`): only message-shaped content
    counts (a bare prompt string on an LLM span is not evidence of a turn)."""
    data, ok = decode_json(value)
    if not ok or not isinstance(data, dict | list):
        return []
    if isinstance(data, dict):
        data = next((data[k] for k in ("messages", "input", "choices", "output") if isinstance(data.get(k), list)),
                    [data])
    # only structured messages count: a list of reprs (LlamaIndex's ChatMessage) or strings is not a transcript
    return read_messages([m for m in data if isinstance(m, dict | list)], role)
