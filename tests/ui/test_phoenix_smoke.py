"""Smoke test of the UI harness: GenAI semconv spans from the real OTel SDK exporters reach a real Phoenix,
which classifies them, serves them through its API and renders them on its trace page.

Opt-in (`make test-ui`: `pytest -m ui`); the default suite deselects it. Missing Phoenix or Chromium is an
error here, not a skip: `make test-ui` must fail loudly when the UI cannot be checked.
"""

from __future__ import annotations

import json
import shutil

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, SpanContext, Status, StatusCode

from .phoenix import ARTIFACTS, Phoenix, render_page, running_phoenix

pytestmark = pytest.mark.ui

AGENT = "weather-agent"
ROOT_NAME = f"invoke_agent {AGENT}"
CHAT_NAME = "chat gpt-4o-mini"
TOOL_NAME = "execute_tool get_weather"
INCIDENT_NAME = f"invoke_agent {AGENT}"
SCENARIO = "incident-oslo-weather"
VERDICT = "PASS"
ARGS = {"city": "Oslo"}
RESULT = {"city": "Oslo", "temperature_c": 3, "sky": "sleet"}
INPUT_MESSAGES = [{"role": "user", "parts": [{"type": "text", "content": "What's the weather in Oslo?"}]}]
OUTPUT_MESSAGES = [{"role": "assistant", "finish_reason": "tool_calls",
                    "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": ARGS}]}]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory) -> Phoenix:
    workdir = tmp_path_factory.mktemp("phoenix")
    try:
        with running_phoenix(workdir) as px:
            print(f"Phoenix up at {px.base_url} in {px.startup_s:.1f} s (gRPC {px.otlp_grpc_endpoint})")
            yield px
    finally:  # Phoenix's own log is a CI artifact too: it is what explains a failed start or a lost span
        if (workdir / "phoenix.log").exists():
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(workdir / "phoenix.log", ARTIFACTS / "phoenix.log")


class RecordingExporter(SpanExporter):
    """The real OTLP exporter, with its export results kept: a rejected batch (e.g. 415) fails the test here."""

    def __init__(self, inner: SpanExporter):
        self.inner, self.results = inner, []

    def export(self, spans):
        result = self.inner.export(spans)
        self.results.append(result)
        return result

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def exporter_for(phoenix: Phoenix, protocol: str) -> SpanExporter:
    if protocol == "http/protobuf":
        return HttpSpanExporter(endpoint=phoenix.otlp_http_endpoint, timeout=10)
    return GrpcSpanExporter(endpoint=phoenix.otlp_grpc_endpoint, insecure=True, timeout=10)


def export(phoenix: Phoenix, protocol: str, service: str, build) -> object:
    """Run `build(tracer)` under a real TracerProvider + BatchSpanProcessor + OTLP exporter; flush; return
    what `build` returned."""
    exporter = RecordingExporter(exporter_for(phoenix, protocol))
    provider = TracerProvider(resource=Resource.create({"service.name": service, "service.version": "0.1.0"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    out = build(provider.get_tracer("wt-otel.ui-smoke"))
    provider.shutdown()
    assert exporter.results and all(r is SpanExportResult.SUCCESS for r in exporter.results), \
        f"{protocol} export to Phoenix failed: {exporter.results}; Phoenix log:\n{phoenix.log_tail()}"
    return out


def send_incident(tracer) -> SpanContext:
    """The flagged production run the replay links back to (another trace, another service)."""
    with tracer.start_as_current_span(INCIDENT_NAME, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}) as span:
        span.set_status(Status(StatusCode.ERROR, "user reported a wrong forecast"))
        return span.get_span_context()


def send_replay(tracer, incident: SpanContext) -> dict[str, str]:
    """What the results exporter will emit for one replayed run: invoke_agent > chat, execute_tool."""
    origin = {"wt.incident.trace_id": format(incident.trace_id, "032x"),
              "wt.incident.span_id": format(incident.span_id, "016x")}
    with tracer.start_as_current_span(ROOT_NAME, links=[Link(incident, {"wt.link.type": "incident"})], attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT,
            "wt.scenario.id": SCENARIO, "wt.verdict": VERDICT, "wt.run.index": 0, **origin}) as root:
        with tracer.start_as_current_span(CHAT_NAME, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini", "gen_ai.usage.input_tokens": 42,
                "gen_ai.usage.output_tokens": 7, "gen_ai.input.messages": json.dumps(INPUT_MESSAGES),
                "gen_ai.output.messages": json.dumps(OUTPUT_MESSAGES)}) as chat:
            pass
        with tracer.start_as_current_span(TOOL_NAME, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.arguments": json.dumps(ARGS),
                "gen_ai.tool.call.result": json.dumps(RESULT), "wt.match": "exact"}) as tool:
            pass
    return {"trace_id": format(root.get_span_context().trace_id, "032x"),
            "root": format(root.get_span_context().span_id, "016x"),
            "chat": format(chat.get_span_context().span_id, "016x"),
            "tool": format(tool.get_span_context().span_id, "016x"), **origin}


def send_both(phoenix: Phoenix, protocol: str) -> dict[str, str]:
    incident = export(phoenix, protocol, "live-agent", send_incident)
    return export(phoenix, protocol, "wt-otel", lambda tracer: send_replay(tracer, incident))


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_genai_spans_arrive_classified_and_linked(phoenix: Phoenix, protocol: str):
    sent = send_both(phoenix, protocol)
    spans = {s["context"]["span_id"]: s for s in phoenix.wait_for_spans(sent["trace_id"], 3)}
    assert set(spans) == {sent["root"], sent["chat"], sent["tool"]}
    root, chat, tool = spans[sent["root"]], spans[sent["chat"]], spans[sent["tool"]]

    # arrived whole: names, tree, attributes as sent (Phoenix flattens them back to dotted keys)
    assert (root["name"], chat["name"], tool["name"]) == (ROOT_NAME, CHAT_NAME, TOOL_NAME)
    assert root["parent_id"] is None and chat["parent_id"] == tool["parent_id"] == sent["root"]
    assert root["attributes"]["wt.verdict"] == VERDICT
    assert root["attributes"]["wt.scenario.id"] == SCENARIO
    assert json.loads(chat["attributes"]["gen_ai.input.messages"]) == INPUT_MESSAGES
    assert json.loads(chat["attributes"]["gen_ai.output.messages"]) == OUTPUT_MESSAGES
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == ARGS
    assert json.loads(tool["attributes"]["gen_ai.tool.call.result"]) == RESULT

    # Phoenix's own classification, from gen_ai.operation.name, and the OpenInference views it derives
    assert (root["span_kind"], chat["span_kind"], tool["span_kind"]) == ("AGENT", "LLM", "TOOL")
    assert chat["attributes"]["llm.model_name"] == "gpt-4o-mini"
    assert chat["attributes"]["llm.input_messages.0.message.content"] == "What's the weather in Oslo?"
    assert tool["attributes"]["tool.name"] == "get_weather"
    by_kind = phoenix.spans(trace_id=sent["trace_id"], span_kind="TOOL")
    assert [s["name"] for s in by_kind] == [TOOL_NAME]
    by_verdict = phoenix.spans(attributes={"wt.verdict": VERDICT, "wt.scenario.id": SCENARIO})
    assert sent["root"] in {s["context"]["span_id"] for s in by_verdict}

    # the link to the incident. Phoenix 20.26.1 drops OTLP span links at ingestion (its API's `links` is
    # always null), so the jump goes through the origin attributes: the incident trace is one lookup away.
    links = phoenix.span_links(sent["trace_id"], sent["root"])
    if links is not None:  # a Phoenix that keeps links must show ours
        assert any(json.dumps(link).find(sent["wt.incident.trace_id"]) >= 0 for link in links), links
    assert root["attributes"]["wt.incident.trace_id"] == sent["wt.incident.trace_id"]
    incident = phoenix.wait_for_spans(root["attributes"]["wt.incident.trace_id"], 1)
    assert [(s["context"]["span_id"], s["name"], s["status_code"]) for s in incident] == \
        [(sent["wt.incident.span_id"], INCIDENT_NAME, "ERROR")]


def test_trace_page_shows_the_replay(phoenix: Phoenix):
    sent = send_both(phoenix, "http/protobuf")
    phoenix.wait_for_spans(sent["trace_id"], 3)
    phoenix.wait_for_spans(sent["wt.incident.trace_id"], 1)

    screenshot = ARTIFACTS / "phoenix-trace.png"
    page = render_page(phoenix.trace_url(sent["trace_id"]), screenshot)
    (ARTIFACTS / "phoenix-trace.txt").write_text(page.text + "\n")
    for expected in (sent["trace_id"], ROOT_NAME, CHAT_NAME, TOOL_NAME, "wt.verdict", VERDICT, SCENARIO):
        assert expected in page.text, f"{expected!r} not on {page.url} (screenshot {screenshot}):\n{page.text}"
    # the root span is the one selected, and its kind is shown as Phoenix classified it
    assert f"agent {ROOT_NAME}" in page.text

    # the incident is one link away: the redirect needs only its trace id and lands on its trace page
    incident_page = render_page(phoenix.trace_redirect_url(sent["wt.incident.trace_id"]))
    assert f"Trace {sent['wt.incident.trace_id']}" in incident_page.text, incident_page.text
    # (the docs screenshot comes from a real replay: test_full_loop.py)
