"""OpenLLMetry (traceloop-sdk): flattened attributes (<= 0.54) and traceloop tool spans.

Chat spans spread messages over `gen_ai.prompt.{i}.{role,content,tool_calls.{j}.*,
tool_call_id}` and `gen_ai.completion.{i}.*`; tool definitions over
`llm.request.functions.{i}.{name,description,parameters}`. Newer versions emit
semconv message attributes instead (read by `semconv`), but keep the
`@tool`-decorated spans: `traceloop.span.kind=tool` with
`traceloop.entity.input` = `{"args": [...], "kwargs": {...}}` and
`traceloop.entity.output`.
"""

from __future__ import annotations

import json
from typing import Any

from wt_otel.ingest.dialects.common import base_call, tool_definition, unflatten
from wt_otel.ingest.dialects.tools import tool_execution
from wt_otel.ingest.messages import read_messages, split_system
from wt_otel.model.parts import decode_json
from wt_otel.model.session import Observation
from wt_otel.model.spans import SpanRecord

NAME = "openllmetry"


def extract(span: SpanRecord) -> list[Observation]:
    a = span.attributes
    if a.get("traceloop.span.kind") == "tool":
        return [_tool(span)]
    if not ("gen_ai.prompt.0.role" in a or "gen_ai.completion.0.role" in a or "gen_ai.prompt.0.content" in a):
        return []
    call = base_call(span, NAME)
    prompt = [_chat(m) for m in unflatten(a, "gen_ai.prompt") if isinstance(m, dict)]
    completion = [_chat(m) for m in unflatten(a, "gen_ai.completion") if isinstance(m, dict)]
    call.system_instructions, call.input_messages = split_system(read_messages(prompt))
    call.output_messages = read_messages(completion, "assistant")
    call.finish_reasons = [str(m["finish_reason"]) for m in completion if m.get("finish_reason")]
    call.tool_definitions = [d for d in map(tool_definition, unflatten(a, "llm.request.functions")) if d]
    return [call]


def _chat(m: dict[str, Any]) -> dict[str, Any]:
    """Flattened tool calls are `{id, name, arguments}`; make them OpenAI-shaped."""
    calls = m.get("tool_calls")
    if isinstance(calls, list):
        m = {**m, "tool_calls": [{"id": c.get("id"), "function": {"name": c.get("name"),
                                                                    "arguments": c.get("arguments")}}
                                 for c in calls if isinstance(c, dict)]}
    return m


def _tool(span: SpanRecord) -> Observation:
    a = span.attributes
    raw = a.get("traceloop.entity.input")
    args, ok = decode_json(raw)
    if ok and isinstance(args, dict) and set(args) <= {"args", "kwargs"}:
        kwargs = args["kwargs"] if isinstance(args.get("kwargs"), dict) else {}
        positional = args.get("args") or []
        args = {**({"args": positional} if positional else {}), **kwargs}
        raw = json.dumps(args)
    name = a.get("gen_ai.tool.name") or a.get("traceloop.entity.name") or span.name.removesuffix(".tool")
    return tool_execution(span, str(name), raw, a.get("traceloop.entity.output"), a.get("gen_ai.tool.call.id"), NAME)
