"""OpenAI Agents SDK trace export (native JSONL) and the trace2test generic JSONL.

The readers keep each record's payload untouched in `openai_agents.span_data`
or `generic.record`; both use the same per-type fields: `generation` (input
and output as chat messages, model, model_config, usage) and `function` /
`tool` (name, input, output; no tool-call id, so the session builder
correlates by name and order). `agent` spans name the tools offered.
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
    if kind == "agent" and isinstance(data.get("tools"), list):
        call = base_call(span, NAME)
        call.is_transcript = True
        call.tool_definitions = [{"name": t, "description": ""} for t in data["tools"] if isinstance(t, str) and t]
        return [call]
    return []


KNOWN = frozenset({"agent", "generation", "function", "tool", "response", "mcp_tools", "transcription", "speech",
                   "speech_group"})
CUSTOM = frozenset({"guardrail", "handoff", "custom"})


def custom_span(span: SpanRecord) -> dict[str, Any] | None:
    """A guardrail, handoff, custom or not-yet-known span type as a canonical custom span, or None.

    trace2test keeps new SDK span types "as canonical custom spans so an import does not silently lose
    their payload": the type is kept (an unknown one becomes `custom` with `sdk_type`), the payload too.
    """
    data = payload(span)
    if data is None:
        return None
    kind = str(data.get("type") or "")
    if kind in KNOWN:
        return None
    rest = {k: v for k, v in data.items() if k != "type"}
    out: dict[str, Any] = {"type": kind if kind in CUSTOM else "custom", "span_id": span.span_id,
                           "name": str(data.get("name") or (data.get("to_agent") if kind == "handoff" else None)
                                       or kind or "custom")}
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
