"""Record builders for the live-pipeline tests: semconv chat / execute_tool / invoke_agent spans."""

from __future__ import annotations

import itertools
import json

from tests.support.spans import assistant, chat_span, tool, user
from wt_otel.model.spans import LogRecord, SpanRecord

_ids = itertools.count(1)
RESOURCE = {"service.name": "live-agent"}


def tid(n: int) -> str:
    return f"{n:032x}"


def sid() -> str:
    return f"{next(_ids):016x}"


def agent(trace: str, span_id: str | None = None, parent: str | None = None, **attrs) -> SpanRecord:
    """The root `invoke_agent` span: no gen_ai content, ends last."""
    return SpanRecord(trace_id=trace, span_id=span_id or sid(), name="invoke_agent weather", parent_span_id=parent,
                      start_ns=1_000, end_ns=9_000, attributes={"gen_ai.operation.name": "invoke_agent", **attrs},
                      resource=RESOURCE)


def chat(trace: str, inputs: list, outputs: list, parent: str | None = None, start: int = 2_000, **attrs) -> SpanRecord:
    return SpanRecord(trace_id=trace, span_id=sid(), name="chat gpt-x", parent_span_id=parent, start_ns=start,
                      end_ns=start + 500, resource=RESOURCE,
                      attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
                                  "gen_ai.provider.name": "openai", "gen_ai.input.messages": json.dumps(inputs),
                                  "gen_ai.output.messages": json.dumps(outputs), **attrs})


def exec_tool(trace: str, name: str, args: dict, result, call_id: str, parent: str | None = None,
              start: int = 3_000, **attrs) -> SpanRecord:
    return SpanRecord(trace_id=trace, span_id=sid(), name=f"execute_tool {name}", parent_span_id=parent,
                      start_ns=start, end_ns=start + 100, resource=RESOURCE,
                      attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                  "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": json.dumps(args),
                                  "gen_ai.tool.call.result": json.dumps(result), **attrs})


def http_span(trace: str, parent: str | None = None) -> SpanRecord:
    return SpanRecord(trace_id=trace, span_id=sid(), name="GET /health", parent_span_id=parent,
                      attributes={"http.request.method": "GET"}, resource=RESOURCE)


def log_event(trace: str, span_id: str, name: str = "gen_ai.user.message", body=None) -> LogRecord:
    return LogRecord(event_name=name, trace_id=trace, span_id=span_id, time_ns=2_100, body=body or {"content": "x"})


def weather_session(trace: str) -> list[SpanRecord]:
    """A whole agent run: root, two chat calls, one tool execution (root last, as exported)."""
    root = agent(trace)
    q, call = user("weather in Oslo?"), assistant(calls=[("c1", "weather", {"city": "Oslo"})])
    return [
        chat(trace, [q], [call], parent=root.span_id, start=2_000),
        exec_tool(trace, "weather", {"city": "Oslo"}, {"temp": 3}, "c1", parent=root.span_id, start=3_000),
        chat(trace, [q, call, tool("c1", {"temp": 3})], [assistant("3 degrees.")], parent=root.span_id, start=4_000),
        root,
    ]


def run_agent(tracer, incident: str | None = None) -> None:
    q, call = user("weather in Oslo?"), assistant(calls=[("c1", "weather", {"city": "Oslo"})])
    attrs = {"gen_ai.operation.name": "invoke_agent", **({"wt.incident": incident} if incident else {})}
    with tracer.start_as_current_span("invoke_agent weather", attributes=attrs):
        chat_span(tracer, inputs=[q], outputs=[call])
        with tracer.start_as_current_span("execute_tool weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather",
                "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": json.dumps({"city": "Oslo"}),
                "gen_ai.tool.call.result": json.dumps({"temp": 3})}):
            pass
        chat_span(tracer, inputs=[q, call, tool("c1", {"temp": 3})], outputs=[assistant("3 degrees in Oslo.")])
    with tracer.start_as_current_span("GET /health"):  # not GenAI: filtered out
        pass
