"""End to end: a real GenAI instrumentation -> the SDK's OTLP exporter -> `wt-otel serve` -> the data dir.

The app is the shared producer loop (`chat_agent.py`: two user turns, each its own `invoke_agent` trace
sharing `gen_ai.conversation.id`, a hand-made `execute_tool client_lookup` span per tool call) driving the
real `openai` client against the fake OpenAI-compatible server, with the OTel contrib instrumentation
`opentelemetry-instrumentation-genai-openai` making the chat spans. It runs in a subprocess (this file run
as a script): the instrumentation patches `openai` process-wide and the semconv opt-in is read once per
process, so neither may leak into the test process (test_cassette_server drives a plain openai client).

Nothing is hand-encoded: spans leave through the SDK's own `OTLPSpanExporter` (grpc or http/protobuf).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parents[1] / "fixtures" / "producers" / "_common"  # run as a script too
APP_ENV = {
    "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
}
SERVICE = "e2e-crm-agent"


# --------------------------------------------------------------------------- the app (subprocess side)

def run_app(transport: str, endpoint: str, incident: str) -> None:
    """Run the instrumented app once and print what it produced (tool spans, scopes) as one JSON line."""
    for key, value in APP_ENV.items():  # before the instrumentation is imported
        os.environ.setdefault(key, value)
    sys.path.insert(0, str(COMMON))
    import openai
    from chat_agent import run_conversation
    from fake_openai import start_server
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=endpoint)

    results: list[SpanExportResult] = []
    real_export = exporter.export

    def export(spans):  # the SDK only logs a failed export: record it so the test can tell
        results.append(real_export(spans))
        return results[-1]

    exporter.export = export

    class FlagRoots(SpanProcessor):
        """What an app does when it knows a run went wrong: mark the agent span with the incident id."""

        def on_start(self, span, parent_context=None) -> None:
            if span.name.startswith("invoke_agent"):
                span.set_attribute("wt.incident", incident)

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    if incident:
        provider.add_span_processor(FlagRoots())
    seen = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(seen))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    OpenAIInstrumentor().instrument(tracer_provider=provider)

    server, port = start_server()
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-fake", max_retries=0)
    run_conversation(client, provider.get_tracer("e2e-crm-agent"))
    provider.shutdown()  # flushes the batch processor through the exporter
    server.shutdown()

    spans = seen.get_finished_spans()
    print(json.dumps({
        "exports": [r.name for r in results],
        "tool_spans": [{"span_id": f"{s.context.span_id:016x}", "call_id": s.attributes["gen_ai.tool.call.id"]}
                       for s in spans if s.name.startswith("execute_tool")],
        "chat_scopes": sorted({s.instrumentation_scope.name for s in spans if s.name.startswith("chat")}),
        "traces": sorted({f"{s.context.trace_id:032x}" for s in spans}),
    }))


# --------------------------------------------------------------------------- the test side

class Serve:
    """`wt-otel serve` on free loopback ports; its stdout is read by a thread for the bound ports."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint",
             "127.0.0.1:0", "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(lines,), daemon=True).start()
        self.grpc = self.http = None
        deadline = time.monotonic() + 20
        while self.grpc is None or self.http is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if m := re.search(r"OTLP/gRPC listening on (\S+)", line):
                self.grpc = m.group(1)
            if m := re.search(r"OTLP/HTTP listening on (http://\S+)", line):
                self.http = m.group(1)

    def _read(self, lines: queue.Queue[str]) -> None:
        for line in self.proc.stdout:
            self.out.append(line)
            lines.put(line)

    def wait_written(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not any(" wrote " in line for line in self.out):
            assert time.monotonic() < deadline, self.out
            time.sleep(0.05)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read()
        return self.proc.stderr.read()


def app(transport: str, endpoint: str, incident: str = "") -> dict:
    env = {**os.environ, **APP_ENV, "PYTHONPATH": str(COMMON)}
    done = subprocess.run([sys.executable, __file__, transport, endpoint, incident], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def texts(message: dict) -> list[str]:
    return [p["content"] for p in message["parts"] if p["type"] == "text"]


def parts(envelope: dict, kind: str) -> list[dict]:
    return [p for m in envelope["messages"] for p in m["parts"] if p["type"] == kind]


def run_through_serve(tmp_path: Path, transport: str, incident: str = "") -> tuple[dict, list[dict], dict]:
    """One app run exported to a fresh serve; returns (app report, index entries, envelope)."""
    from tests.support.kept import render_kept  # here: this file is also the app, run as a script
    from wt_otel.exporters.datadir import read_index

    serve = Serve(tmp_path, "--session-idle-timeout", "1")
    try:
        endpoint = serve.grpc if transport == "grpc" else serve.http + "/v1/traces"
        report = app(transport, endpoint, incident)
        serve.wait_written()
    finally:
        serve.stop()
    render_kept(tmp_path)  # an unflagged session is kept by reference (the default), rendered on demand
    index = read_index(tmp_path)
    assert index.problems == []
    entries = index.entries
    envelope = json.loads((tmp_path / entries[-1]["path"] / "incident.wtin.json").read_text())
    return report, entries, envelope


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_instrumented_app_exports_to_serve(tmp_path, transport):
    report, entries, env = run_through_serve(tmp_path, transport)
    assert report["exports"] and set(report["exports"]) == {"SUCCESS"}, report
    assert report["chat_scopes"] == ["opentelemetry.instrumentation.genai.openai"], report  # the real library

    # one session: the two turns' traces joined by gen_ai.conversation.id (late revisions share the key)
    assert {e["key"] for e in entries} == {entries[0]["key"]}, entries
    last = entries[-1]
    assert last["conversation_id"] == "conv-bluewing-0001"
    assert sorted(last["trace_ids"]) == report["traces"]
    assert last["service"] == SERVICE
    assert last["flagged"] is False

    messages = env["messages"]
    users = [texts(m) for m in messages if m["role"] == "user"]
    assert users == [["What is the email on file for Bluewing?"], ["Thanks! And its phone?"]]
    calls = parts(env, "tool_call")
    assert [c["name"] for c in calls] == ["client_lookup", "client_lookup"]
    assert all(c["arguments"] == {"query": "Bluewing"} for c in calls)  # an object, not a JSON string
    responses = parts(env, "tool_call_response")
    assert [r["id"] for r in responses] == [c["id"] for c in calls]
    assert responses[0]["response"]["email"] == "ops@bluewing.example"
    answers = [t for m in messages if m["role"] == "assistant" for t in texts(m)]
    assert answers[0] == "The email on file for Bluewing is ops@bluewing.example."
    assert answers[-1].endswith("The phone on file for Bluewing is +1-555-0100.")  # streamed in turn 2

    witnessed = [(w["tool_call_id"], w["span_id"]) for w in env["witnessed_calls"]]
    assert witnessed == [(s["call_id"], s["span_id"]) for s in report["tool_spans"]]
    assert [c["id"] for c in calls] == [s["call_id"] for s in report["tool_spans"]]
    assert all(w["tool_name"] == "client_lookup" and w["args"] == {"query": "Bluewing"}
               for w in env["witnessed_calls"])


def test_flagged_incident_is_marked_in_the_index(tmp_path):
    report, entries, env = run_through_serve(tmp_path, "grpc", incident="INC-4242")
    last = entries[-1]
    assert last["flagged"] is True and last["flag_ref"] == "INC-4242", last
    assert "wt.incident" in last["flag_reason"]
    assert env["source"]["ref"] == "INC-4242"
    assert len(env["witnessed_calls"]) == len(report["tool_spans"]) == 2


if __name__ == "__main__":
    run_app(*sys.argv[1:4])
