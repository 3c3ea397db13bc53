"""The rotel processor end to end: a real rotel process (unit tests on stand-ins: tests/unit/processors/test_rotel.py).

The tests start rotel through the shipped `collector-config/rotel.sh`, send spans and log records with the
real OTel SDK OTLP/gRPC exporters, and check what rotel exports twice: record by record with a grpcio
TraceService/LogsService server, and as a session `wt-otel serve` writes.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from concurrent import futures
from types import SimpleNamespace

import pytest

from tests.support.kept import render_kept
from tests.support.paths import ROOT
from wt_otel.processors import rotel as rp

ROTEL_SH = ROOT / "collector-config" / "rotel.sh"




def rotel_missing() -> str | None:
    if importlib.util.find_spec("rotel") is None:
        return "rotel is not installed (pip install rotel==0.0.1a15; CI installs it with the test extra)"
    if ctypes.util.find_library("python3.11") is None:
        return "rotel needs Debian's libpython3.11 (apt-get install -y libpython3.11; .ci/run installs it)"
    return None


needs_rotel = pytest.mark.skipif(rotel_missing() is not None, reason=rotel_missing() or "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"rotel exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"rotel did not listen on {port}")


@pytest.fixture
def capture():
    """A grpcio OTLP server that keeps every export request rotel sends it."""
    import grpc
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    got = SimpleNamespace(traces=[], logs=[])

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            got.traces.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    class Logs(logs_service_pb2_grpc.LogsServiceServicer):
        def Export(self, request, context):
            got.logs.append(request)
            return logs_service_pb2.ExportLogsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.so_reuseport", 0)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
    got.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield got
    server.stop(0)


@pytest.fixture
def start_rotel(tmp_path, capture):
    procs = []

    def start(**env: str) -> int:
        grpc_port, http_port = free_port(), free_port()
        full_env = {
            **os.environ,
            "ROTEL_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}",
            "ROTEL_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
            "ROTEL_OTLP_EXPORTER_ENDPOINT": f"http://127.0.0.1:{capture.port}",
            "ROTEL_BATCH_TIMEOUT": "50ms",
            "ROTEL_PID_FILE": str(tmp_path / "rotel.pid"),
            **env,
        }
        log = open(tmp_path / "rotel.log", "wb")  # noqa: SIM115 - closed with the process below
        proc = subprocess.Popen(["bash", str(ROTEL_SH)], env=full_env, stdout=log, stderr=subprocess.STDOUT)
        procs.append((proc, log))
        wait_for_port(grpc_port, proc)
        return grpc_port

    yield start
    for proc, log in procs:
        alive = proc.poll() is None
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        assert alive, "rotel died during the test:\n" + (tmp_path / "rotel.log").read_text(errors="replace")


def send_agent_run(port: int) -> None:
    """One agent run (invoke_agent > chat, execute_tool, http), one unrelated trace, two log events."""
    from opentelemetry._logs import LogRecord as SdkLogRecord
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": "rotel-e2e"})
    traces = TracerProvider(resource=resource)
    # batched as in production: one export request per run (see the processor's note on cross-batch order)
    traces.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True)))
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"127.0.0.1:{port}",
                                                                           insecure=True)))
    tracer, logger = traces.get_tracer("e2e"), logs.get_logger("e2e")
    with tracer.start_as_current_span("invoke_agent support"):
        with tracer.start_as_current_span("POST api.openai.com"):
            pass
        with tracer.start_as_current_span("chat gpt-4o", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.finish_reasons": ["tool_calls", "stop"],
        }):
            logger.emit(SdkLogRecord(event_name="gen_ai.choice",
                                     body={"tool_calls": [{"id": "c1"}, {"id": "c2"}]}))
        with tracer.start_as_current_span("execute_tool lookup", attributes={"gen_ai.tool.name": "lookup"}):
            pass
    with tracer.start_as_current_span("GET /health"):
        logger.emit(SdkLogRecord(body="health ok"))
    traces.shutdown()
    logs.shutdown()


def received(capture, timeout: float = 10.0, spans: int = 0, logs: int = 0):
    """Spans and log records rotel exported, as (name or body, attributes dict, message) tuples."""
    from google.protobuf.json_format import MessageToDict

    def flat(attrs):
        return {a.key: MessageToDict(a.value) for a in attrs}

    deadline = time.monotonic() + timeout
    while True:
        got_spans = [(s.name, flat(s.attributes)) for req in capture.traces for rs in req.resource_spans
                     for ss in rs.scope_spans for s in ss.spans]
        got_logs = [(MessageToDict(r.body), flat(r.attributes)) for req in capture.logs
                    for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records]
        if (len(got_spans) >= spans and len(got_logs) >= logs) or time.monotonic() > deadline:
            return dict(got_spans), got_logs
        time.sleep(0.05)


GENAI_RUN = {"invoke_agent support", "POST api.openai.com", "chat gpt-4o", "execute_tool lookup"}


def has_tag(attrs: dict) -> bool:
    return attrs.get(rp.TAG_KEY) == {"stringValue": rp.TAG_VALUE}


@needs_rotel
def test_rotel_tags_genai_traces_and_keeps_the_rest(start_rotel, capture):
    port = start_rotel()
    send_agent_run(port)
    spans, logs = received(capture, spans=5, logs=2)
    assert set(spans) == GENAI_RUN | {"GET /health"}
    for name in GENAI_RUN:
        assert has_tag(spans[name]), name
    assert rp.TAG_KEY not in spans["GET /health"]
    # rotel 0.0.1a15 reverses arrays the processor touched; the processor undoes that
    reasons = spans["chat gpt-4o"]["gen_ai.response.finish_reasons"]["arrayValue"]["values"]
    assert reasons == [{"stringValue": "tool_calls"}, {"stringValue": "stop"}]
    by_body = {("choice" if "kvlistValue" in body else body["stringValue"]): attrs for body, attrs in logs}
    assert has_tag(by_body["choice"]) and rp.TAG_KEY not in by_body["health ok"]
    choice_body = next(body for body, _ in logs if "kvlistValue" in body)
    calls = choice_body["kvlistValue"]["values"][0]["value"]["arrayValue"]["values"]
    assert [c["kvlistValue"]["values"][0]["value"]["stringValue"] for c in calls] == ["c1", "c2"]


@needs_rotel
def test_rotel_drops_non_genai_traces_when_configured(start_rotel, capture):
    port = start_rotel(WT_ROTEL_DROP_NON_GENAI="1")
    send_agent_run(port)
    spans, logs = received(capture, spans=5, logs=2, timeout=2.0)  # waits out the timeout: less arrives
    assert set(spans) == GENAI_RUN
    assert len(logs) == 1 and has_tag(logs[0][1])


@needs_rotel
def test_rotel_feeds_wt_otel_serve_which_writes_the_session(start_rotel, tmp_path):
    """The shipped path: app -> rotel + wt-otel processor -> `wt-otel serve` -> data dir."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    data_dir = tmp_path / "wt-data"
    serve = subprocess.Popen(
        [sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint",
         "127.0.0.1:0", "--data-dir", str(data_dir), "--session-idle-timeout", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in serve.stdout:
            if m := re.search(r"OTLP/gRPC listening on \S+:(\d+)", line):
                break
        else:
            raise AssertionError("wt-otel serve did not start: " + serve.stderr.read())
        port = start_rotel(ROTEL_OTLP_EXPORTER_ENDPOINT=f"http://127.0.0.1:{m.group(1)}")

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True)))
        tracer = provider.get_tracer("e2e")
        with tracer.start_as_current_span("invoke_agent support") as root, tracer.start_as_current_span(
                "chat gpt-4o", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                    "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                        {"type": "text", "content": "Where is my parcel?"}]}]),
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": "It arrives tomorrow."}], "finish_reason": "stop"}]),
                }):
            pass
        trace_id = format(root.get_span_context().trace_id, "032x")
        provider.shutdown()

        index = data_dir / "sessions.ndjsonl"
        deadline = time.monotonic() + 15
        while not (index.exists() and trace_id in index.read_text()):
            assert time.monotonic() < deadline, "no session written for the trace"
            time.sleep(0.1)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(30)
    render_kept(data_dir)  # unflagged: kept by reference (serve's default), rendered on demand
    entry = next(e for e in reversed([*map(json.loads, index.read_text().splitlines())]) if trace_id in e["trace_ids"])
    written = "".join(p.read_text() for p in (data_dir / entry["path"]).rglob("*") if p.is_file())
    assert "Where is my parcel?" in written and "It arrives tomorrow." in written
