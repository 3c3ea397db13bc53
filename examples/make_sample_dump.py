"""Write examples/dumps/support-agent.otlp.jsonl: a small, realistic OTLP dump.

Two sessions of a support agent instrumented with the OpenTelemetry SDK and
GenAI semantic conventions (>= 1.37): a normal one, and one flagged as an
incident (`wt.incident`) where the agent refunded without verifying the
customer. The spans are real SDK spans encoded with the SDK's OTLP encoder and
written one export request per line, as the Collector `file` exporter does.

    python examples/make_sample_dump.py
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

OUT = Path(__file__).parent / "dumps" / "support-agent.otlp.jsonl"
TOOLS = [
    {"type": "function", "name": "lookup_order", "description": "Find an order by id.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
    {"type": "function", "name": "verify_identity", "description": "Check the customer's identity.",
     "parameters": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]}},
    {"type": "function", "name": "refund", "description": "Refund an order.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"},
                                                     "amount": {"type": "number"}}}},
]
SYSTEM = [{"type": "text", "content": "You are the support agent of Acme. Verify identity before refunds."}]


def text(role, content):
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def call(call_id, name, args):
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": name, "arguments": args}]}


def result(call_id, response):
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]}


def session(tracer, conv_id, ask, steps, answer, incident=None):
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
             "gen_ai.conversation.id": conv_id}
    if incident:
        attrs["wt.incident"] = incident
    with tracer.start_as_current_span("invoke_agent support", attributes=attrs):
        history = [text("user", ask)]
        for call_id, name, args, response in steps:
            _chat(tracer, history, [call(call_id, name, args)])
            history.append(call(call_id, name, args))
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": json.dumps(args),
                    "gen_ai.tool.call.result": json.dumps(response)}):
                pass
            history.append(result(call_id, response))
        _chat(tracer, history, [text("assistant", answer)])


def _chat(tracer, history, output):
    with tracer.start_as_current_span("chat gpt-4o-mini", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-mini", "gen_ai.request.temperature": 0.2,
            "gen_ai.system_instructions": json.dumps(SYSTEM), "gen_ai.tool.definitions": json.dumps(TOOLS),
            "gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": json.dumps(output),
            "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 20}):
        pass


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "acme-support-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("acme.support")
    session(tracer, "conv-0001", "Where is my order A-1001?",
            [("call_1", "lookup_order", {"order_id": "A-1001"}, {"status": "shipped", "eta": "2026-12-02"})],
            "Order A-1001 has shipped and should arrive on 2026-12-02.")
    session(tracer, "conv-0002", "Refund order A-2002 please, it arrived broken.",
            [("call_1", "lookup_order", {"order_id": "A-2002"}, {"status": "delivered", "total": 89.5}),
             ("call_2", "refund", {"order_id": "A-2002", "amount": 89.5}, {"refunded": True})],
            "Done: I refunded 89.50 for order A-2002.", incident="INC-2026-1129-7")
    provider.shutdown()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    request = MessageToDict(encode_spans(exporter.get_finished_spans()), use_integers_for_enums=True)
    for rs in request["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    OUT.write_text(json.dumps(request, separators=(",", ":")) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
