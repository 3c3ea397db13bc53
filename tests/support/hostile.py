"""Hostile inputs for the robustness tests (issue 13): GenAI sessions as real OTLP requests.

Spans are built as real `opentelemetry.proto` messages (what an SDK exporter sends) or as
`SpanRecord`s for the processors and writers; the values are the ones that broke a session's
write: integers beyond 64 bits, deep nesting, lone surrogates.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from wt_otel.model.spans import SpanRecord

HUGE_INT_ARGS = '{"account": 12345678901234567890123}'
DEEP_ARGS = "[" * 300 + "]" * 300
SURROGATE_TEXT = "bad \udc80 text"


def tid(n: int) -> str:
    return f"{n + 1:032x}"


def span_ids(trace: str) -> list[str]:
    """Deterministic span ids for the four spans of `genai_session`."""
    return [f"{trace[-12:]}{i:04x}" for i in range(1, 5)]


def genai_session(trace: str, *, args: str = '{"city": "Oslo"}', conversation: str | None = None,
                  reply: str = "3 degrees.", start: int = 1_000) -> list[SpanRecord]:
    """root agent + chat (asks for a tool) + execute_tool(args) + chat (answers), root last as exported."""
    root_id, chat1, tool_id, chat2 = span_ids(trace)
    conv = {"gen_ai.conversation.id": conversation} if conversation else {}
    q = {"role": "user", "parts": [{"type": "text", "content": "weather in Oslo?"}]}
    call = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "weather",
                                            "arguments": {"city": "Oslo"}}]}
    res = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": {"temp": 3}}]}
    ans = {"role": "assistant", "parts": [{"type": "text", "content": reply}]}

    def chat(span_id: str, inputs: list, outputs: list, at: int) -> SpanRecord:
        return SpanRecord(trace_id=trace, span_id=span_id, name="chat gpt-x", parent_span_id=root_id,
                          start_ns=start + at, end_ns=start + at + 500, resource={"service.name": "hostile"},
                          attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
                                      "gen_ai.provider.name": "openai", **conv,
                                      "gen_ai.input.messages": json.dumps(inputs),
                                      "gen_ai.output.messages": json.dumps(outputs)})

    return [
        chat(chat1, [q], [call], 1_000),
        SpanRecord(trace_id=trace, span_id=tool_id, name="execute_tool weather", parent_span_id=root_id,
                   start_ns=start + 2_000, end_ns=start + 2_100, resource={"service.name": "hostile"},
                   attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather",
                               "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": args, **conv,
                               "gen_ai.tool.call.result": '{"temp": 3}'}),
        chat(chat2, [q, call, res], [ans], 3_000),
        SpanRecord(trace_id=trace, span_id=root_id, name="invoke_agent weather", parent_span_id=None,
                   start_ns=start, end_ns=start + 9_000, resource={"service.name": "hostile"},
                   attributes={"gen_ai.operation.name": "invoke_agent", **conv}),
    ]


def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def to_request(spans: list[SpanRecord]) -> ExportTraceServiceRequest:
    """Real OTLP protobuf, as an SDK exporter would send these spans."""
    pb = []
    for s in spans:
        pb.append(Span(trace_id=bytes.fromhex(s.trace_id), span_id=bytes.fromhex(s.span_id),
                       parent_span_id=bytes.fromhex(s.parent_span_id) if s.parent_span_id else b"",
                       name=s.name, start_time_unix_nano=s.start_ns, end_time_unix_nano=s.end_ns,
                       attributes=[KeyValue(key=k, value=_any(v)) for k, v in s.attributes.items()]))
    resource = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="hostile"))])
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource,
                                                                   scope_spans=[ScopeSpans(spans=pb)])])


def to_otlp_json(spans: list[SpanRecord]) -> dict[str, Any]:
    """OTLP/JSON (hex ids, string int64s), as the collector's file exporter writes it."""
    from google.protobuf import json_format

    data = json_format.MessageToDict(to_request(spans))
    for rs in data.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = __import__("base64").b64decode(sp[key]).hex()
    return data
