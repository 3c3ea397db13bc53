"""OpenAI Agents SDK trace export (native JSONL) and the trace2test generic JSONL.

The readers keep each record's payload untouched in `openai_agents.span_data`
or `generic.record`; both use the same per-type fields: `generation` (input
and output as chat messages, model, model_config, usage) and `function` /
`tool` (name, input, output; no tool-call id, so the session builder
correlates by name and order). `agent` and `mcp_tools` spans name the tools offered.
Every other span type, known to the SDK or not, is kept whole as a canonical custom span
(`custom_span`), and so are agent and mcp_tools spans, whose names, handoffs, output type
and server the tool list does not carry.
"""

from __future__ import annotations

from typing import Any

from wt_otel.ingest.dialects.common import base_call
from wt_otel.ingest.dialects.tools import tool_execution
from wt_otel.ingest.messages import read_messages, split_system
from wt_otel.model.session import Observation
from wt_otel.model.spans import SpanRecord

NAME = "agents"


def payload(span: SpanRecord) -> dict[str, Any] | None:
    data = span.attributes.get("openai_agents.span_data")
    if data is None:
        data = span.attributes.get("generic.record")
    return data if isinstance(data, dict) else None


def extract(span: SpanRecord) -> list[Observation]:
    data = payload(span)
    if data is None:
        return []
    kind = data.get("type")
    if kind == "generation":
        return [_generation(span, data)]
    if kind in ("function", "tool"):
        return [tool_execution(span, str(data.get("name") or ""), data.get("input"), data.get("output"),
                               (data.get("mcp_data") or {}).get("call_id") if isinstance(data.get("mcp_data"), dict)
                               else None, NAME)]
    offered = data.get("tools") if kind == "agent" else data.get("result") if kind == "mcp_tools" else None
    if isinstance(offered, list):  # an mcp_tools span's `result` is the server's tool list, not a tool's output
        call = base_call(span, NAME)
        call.is_transcript = True
        call.tool_definitions = [{"name": t, "description": ""} for t in offered if isinstance(t, str) and t]
        return [call]
    return []


# the types the session holds whole elsewhere (model calls, tool executions); every other one, known or not,
# is kept as a custom span: agent (name, handoffs, output_type), response (response_id), mcp_tools (server),
# transcription / speech / speech_group (model, formats, text) have no richer place in the session
MAPPED = frozenset({"generation", "function", "tool"})
CUSTOM = frozenset({"guardrail", "handoff", "custom"})


def custom_span(span: SpanRecord) -> dict[str, Any] | None:
    """Any span type but a model call or tool execution (MAPPED) as a canonical custom span, or None.

    trace2test keeps new SDK span types "as canonical custom spans so an import does not silently lose
    their payload"; the known types with no richer mapping are kept the same way. The type is kept (any
    but guardrail, handoff and custom becomes `custom` with `sdk_type`), the payload too.
    """
    data = payload(span)
    if data is None:
        return None
    kind = str(data.get("type") or "")
    if kind in MAPPED:
        return None
    rest = {k: v for k, v in data.items() if k != "type"}
    named = data.get("to_agent") if kind == "handoff" else data.get("server") if kind == "mcp_tools" else None
    out: dict[str, Any] = {"type": kind if kind in CUSTOM else "custom", "span_id": span.span_id,
                           "name": str(data.get("name") or named or kind or "custom")}
    if kind not in CUSTOM:
        out["sdk_type"] = kind
    if kind == "guardrail":
        out["triggered"] = bool(data.get("triggered"))
    if kind == "handoff":
        out["from_agent"], out["to_agent"] = data.get("from_agent"), data.get("to_agent")
    if span.parent_span_id:
        out["parent_span_id"] = span.parent_span_id
    out["start_ns"] = span.start_ns
    out["data"] = rest
    return out


def _generation(span: SpanRecord, data: dict[str, Any]) -> Observation:
    call = base_call(span, NAME)
    inputs = data["input"] if isinstance(data.get("input"), list) else []
    outputs = data["output"] if isinstance(data.get("output"), list) else []
    call.system_instructions, call.input_messages = split_system(read_messages(inputs))
    call.output_messages = read_messages(outputs, "assistant")
    call.model = str(data.get("model")) if data.get("model") else call.model
    config = data["model_config"] if isinstance(data.get("model_config"), dict) else {}
    for k in ("temperature", "top_p", "max_tokens", "seed"):
        if config.get(k) is not None:
            call.sampler[k] = config[k]
    usage = data["usage"] if isinstance(data.get("usage"), dict) else {}
    for ours, theirs in (("input_tokens", ("input_tokens", "prompt_tokens")),
                         ("output_tokens", ("output_tokens", "completion_tokens"))):
        v = next((usage[k] for k in theirs if isinstance(usage.get(k), int)), None)
        if v is not None:
            call.usage[ours] = v
    if {"input_tokens", "output_tokens"} <= call.usage.keys():
        call.usage["total_tokens"] = call.usage["input_tokens"] + call.usage["output_tokens"]
    call.provider = call.provider or "openai"
    call.content_captured = bool(inputs or outputs)
    return call
