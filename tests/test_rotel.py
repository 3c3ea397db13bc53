"""The rotel processor: its logic on stand-ins for rotel's objects, then a real rotel process end to end.

rotel's object types (`rotel_sdk.*`) exist only inside a running rotel binary, so the unit tests
use small stand-ins with the shapes rotel documents (mutable lists of KeyValue/AnyValue). The
end-to-end tests start rotel through the shipped `collector-config/rotel.sh`, send spans and log
records with the real OTel SDK OTLP/gRPC exporters, and check what rotel exports twice: record by
record with a grpcio TraceService/LogsService server, and as a session `wt-otel serve` writes.
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
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from wt_otel.processors import rotel as rp

ROOT = Path(__file__).resolve().parents[1]
ROTEL_SH = ROOT / "collector-config" / "rotel.sh"


# -- stand-ins for rotel_sdk objects ------------------------------------------------------------


@dataclass
class AnyValue:
    value: Any = None


@dataclass
class KeyValue:
    key: str
    value: AnyValue | None

    @staticmethod
    def new_string_value(key: str, value: str) -> KeyValue:
        return KeyValue(key, AnyValue(value))


class ArrayValue(list):
    pass


class KeyValueList(list):
    pass


SDK = SimpleNamespace(AnyValue=AnyValue, KeyValue=KeyValue, ArrayValue=ArrayValue, KeyValueList=KeyValueList)


@dataclass
class Span:
    name: str
    trace_id: bytes
    attributes: list = field(default_factory=list)


@dataclass
class ScopeSpans:
    spans: list


@dataclass
class Resource:
    attributes: list = field(default_factory=list)


@dataclass
class ResourceSpans:
    scope_spans: list
    resource: Resource | None = None


@dataclass
class LogRecord:
    trace_id: bytes = b""
    event_name: str = ""
    body: AnyValue | None = None
    attributes: list = field(default_factory=list)


@dataclass
class ScopeLogs:
    log_records: list


@dataclass
class ResourceLogs:
    scope_logs: list
    resource: Resource | None = None


def kv(key: str, value: Any) -> KeyValue:
    return KeyValue(key, AnyValue(value))


def tagged(attrs: list) -> bool:
    return any(a.key == rp.TAG_KEY and a.value.value == rp.TAG_VALUE for a in attrs)


def processor(**settings: Any) -> rp.RotelGenAIProcessor:
    return rp.RotelGenAIProcessor(rp.Settings(**settings), sdk=SDK)


T1, T2, T3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16


# -- unit tests ---------------------------------------------------------------------------------


def test_genai_spans_and_the_rest_of_their_trace_are_tagged_whatever_the_order():
    http = Span("POST /v1/chat", T1, [kv("http.method", "POST")])
    chat = Span("chat gpt-4o", T1)
    tool = Span("lookup", T1, [kv("gen_ai.tool.name", "lookup")])
    other = Span("GET /health", T2)
    batch = ResourceSpans([ScopeSpans([http, chat, tool, other])])
    p = processor()
    p.process_spans(batch)
    assert [tagged(s.attributes) for s in batch.scope_spans[0].spans] == [True, True, True, False]
    assert p.stats["genai_spans"] == 2 and p.stats["tagged_spans"] == 3 and p.stats["errors"] == 0


def test_a_later_batch_of_a_genai_trace_is_tagged_and_tags_are_not_duplicated():
    p = processor()
    p.process_spans(ResourceSpans([ScopeSpans([Span("invoke_agent triage", T1)])]))
    root = Span("workflow", T1, [kv(rp.TAG_KEY, rp.TAG_VALUE)])
    p.process_spans(ResourceSpans([ScopeSpans([root])]))
    assert [a.key for a in root.attributes] == [rp.TAG_KEY]


def test_non_genai_traces_are_kept_by_default_and_dropped_only_when_configured():
    def batch():
        return ResourceSpans([ScopeSpans([Span("GET /", T2), Span("chat m", T1), Span("db", T2)])])

    kept = batch()
    processor().process_spans(kept)
    assert [s.name for s in kept.scope_spans[0].spans] == ["GET /", "chat m", "db"]

    dropped, p = batch(), processor(drop_non_genai=True)
    p.process_spans(dropped)
    assert [s.name for s in dropped.scope_spans[0].spans] == ["chat m"]
    assert p.stats["dropped_spans"] == 2


@pytest.mark.parametrize("key", ["gen_ai.system", "llm.model_name", "traceloop.entity.name",
                                 "openinference.span.kind", "pydantic_ai.all_messages", "wt.incident"])
def test_genai_is_recognised_by_attribute_key_prefix(key):
    span = Span("anything", T1, [kv(key, "x")])
    processor(drop_non_genai=True).process_spans(b := ResourceSpans([ScopeSpans([span])]))
    assert b.scope_spans[0].spans == [span] and tagged(span.attributes)


def test_the_trace_memory_is_bounded():
    p = processor(max_traces=2, drop_non_genai=True)
    for tid in (T1, T2, T3):
        p.process_spans(ResourceSpans([ScopeSpans([Span("chat m", tid)])]))
    late = ResourceSpans([ScopeSpans([Span("root", T1), Span("root", T3)])])
    p.process_spans(late)
    assert [s.trace_id for s in late.scope_spans[0].spans] == [T3]


class Exploding:
    trace_id = T1

    @property
    def name(self):
        raise RuntimeError("rotel object went away")


def test_an_error_never_escapes_and_never_drops_data():
    spans = [Span("GET /", T2), Exploding()]
    batch = ResourceSpans([ScopeSpans(list(spans))])
    p = processor(drop_non_genai=True)
    p.process_spans(batch)
    p.process_logs(None)
    assert batch.scope_spans[0].spans == spans
    assert p.stats["errors"] == 2
    rp.process_spans(None)  # the module-level hooks swallow even a batch that is not one
    rp.process_logs(object())


def rotel_convert(value: Any) -> Any:
    """What rotel 0.0.1a15 does on the way out: every array, at every level, comes out reversed."""
    if isinstance(value, ArrayValue):
        return [rotel_convert(v.value) for v in reversed(value)]
    if isinstance(value, KeyValueList):
        return {k.key: rotel_convert(k.value.value) for k in value}
    return value


def test_array_order_survives_rotels_reversing_conversion():
    messages = ArrayValue([
        AnyValue(KeyValueList([kv("role", "user"), kv("parts", ArrayValue([AnyValue("a"), AnyValue("b")]))])),
        AnyValue(KeyValueList([kv("role", "assistant")])),
    ])
    span = Span("chat m", T1, [kv("gen_ai.input.messages", messages), kv("n", 1)])
    resource = Resource([kv("process.command_args", ArrayValue([AnyValue("x"), AnyValue("y")]))])
    processor().process_spans(ResourceSpans([ScopeSpans([span])], resource))
    assert rotel_convert(messages) == [{"role": "user", "parts": ["a", "b"]}, {"role": "assistant"}]
    assert rotel_convert(resource.attributes[0].value.value) == ["x", "y"]


def test_array_repair_can_be_switched_off():
    arr = ArrayValue([AnyValue(1), AnyValue(2)])
    processor(fix_array_order=False).process_spans(ResourceSpans([ScopeSpans([Span("chat", T1, [kv("a", arr)])])]))
    assert [v.value for v in arr] == [1, 2]


def test_log_records_follow_the_same_rules():
    body = AnyValue(KeyValueList([kv("tool_calls", ArrayValue([AnyValue("1"), AnyValue("2")]))]))
    choice = LogRecord(T1, "gen_ai.choice", body)
    legacy = LogRecord(T2, "", None, [kv("event.name", "gen_ai.user.message")])
    same_trace = LogRecord(T1, "", AnyValue("app log"))
    plain = LogRecord(T3, "", AnyValue("GET / 200"))
    no_trace = LogRecord(b"", "", AnyValue("startup"))
    batch = ResourceLogs([ScopeLogs([plain, same_trace, choice, legacy, no_trace])])
    p = processor(drop_non_genai=True)
    p.process_logs(batch)
    assert batch.scope_logs[0].log_records == [same_trace, choice, legacy]
    assert all(tagged(r.attributes) for r in batch.scope_logs[0].log_records)
    assert rotel_convert(body.value) == {"tool_calls": ["1", "2"]}
    assert p.stats["dropped_log_records"] == 2 and p.stats["errors"] == 0


def test_a_genai_log_marks_its_trace_for_the_span_hook():
    p = processor(drop_non_genai=True)
    p.process_logs(ResourceLogs([ScopeLogs([LogRecord(T1, "gen_ai.user.message")])]))
    batch = ResourceSpans([ScopeSpans([Span("root", T1)])])
    p.process_spans(batch)
    assert tagged(batch.scope_spans[0].spans[0].attributes)


def test_settings_from_env():
    assert rp.Settings.from_env({}) == rp.Settings()
    s = rp.Settings.from_env({"WT_ROTEL_DROP_NON_GENAI": "true", "WT_ROTEL_MAX_TRACES": "7",
                              "WT_ROTEL_FIX_ARRAY_ORDER": "0"})
    assert s == rp.Settings(drop_non_genai=True, max_traces=7, fix_array_order=False)


def test_the_entry_file_rotel_loads_exports_the_hooks():
    spec = importlib.util.spec_from_file_location("rotel_entry", ROOT / "collector-config" / "rotel_processor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.process_spans is rp.process_spans and module.process_logs is rp.process_logs


# -- end to end: a real rotel process ---------------------------------------------------------


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
    entry = next(e for e in map(json.loads, index.read_text().splitlines()) if trace_id in e["trace_ids"])
    written = "".join(p.read_text() for p in (data_dir / entry["path"]).rglob("*") if p.is_file())
    assert "Where is my parcel?" in written and "It arrives tomorrow." in written
