"""OTLP receivers against real clients: the OTel SDK's gRPC and HTTP exporters for the happy
paths, raw http.client / grpc stubs for hostile and broken input. Every failure test ends by
checking that the server still accepts a good request."""

from __future__ import annotations

import gzip
import http.client
import json
import shutil
import ssl
import subprocess
import threading
import tracemalloc
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import zstandard
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from wt_otel.model.spans import LogRecord, SpanRecord
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers import Receivers, ReceiversConfig, start_receivers
from wt_otel.serve.receivers.common import decompress_capped, retry_info_bytes, rpc_status_bytes

TIMEOUT = 10.0
PB = "application/x-protobuf"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """grpc and requests both honour proxy variables; these tests talk to 127.0.0.1 only."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@dataclass
class Recorder:
    """A pipeline consumer that records what reaches it; optionally blocks until released."""

    gate: threading.Event | None = None
    records: list = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def consume(self, records: Sequence, now: float) -> None:
        if self.gate is not None:
            self.gate.wait(TIMEOUT)
        with self.cond:
            self.records.extend(records)
            self.cond.notify_all()

    def tick(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass

    def wait_for(self, n: int) -> list:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.records) >= n, TIMEOUT), f"got {len(self.records)} of {n}"
            return list(self.records)


@dataclass
class Env:
    receivers: Receivers
    pipeline: Pipeline
    metrics: Metrics
    recorder: Recorder
    token: str | None = None
    cert: Path | None = None

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.receivers.grpc_port}"

    def grpc_channel(self) -> grpc.Channel:
        if self.cert is not None:
            return grpc.secure_channel(self.grpc_target, grpc.ssl_channel_credentials(self.cert.read_bytes()))
        return grpc.insecure_channel(self.grpc_target)

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def post(self, path: str, body: bytes, content_type: str | None = PB, headers: dict[str, str] | None = None,
             method: str = "POST") -> tuple[int, http.client.HTTPResponse, bytes]:
        """One raw HTTP request on a fresh connection: (status, response, body)."""
        if self.cert is not None:
            context = ssl.create_default_context(cafile=str(self.cert))
            conn = http.client.HTTPSConnection("127.0.0.1", self.receivers.http_port, timeout=TIMEOUT,
                                               context=context)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.receivers.http_port, timeout=TIMEOUT)
        all_headers = {**self.auth(), **(headers or {})}
        if content_type:
            all_headers["Content-Type"] = content_type
        try:
            conn.request(method, path, body=body, headers=all_headers)
            response = conn.getresponse()
            return response.status, response, response.read()
        finally:
            conn.close()

    def grpc_export(self, request: ExportTraceServiceRequest, metadata=None, compression=None):
        with self.grpc_channel() as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            md = metadata if metadata is not None else ([("authorization", f"Bearer {self.token}")] if self.token
                                                        else None)
            return stub.Export(request, metadata=md, timeout=TIMEOUT, compression=compression)

    def assert_still_serves(self) -> None:
        """A good request over each transport is still accepted after whatever came before."""
        before = len(self.recorder.records)
        status, _, _ = self.post("/v1/traces", span_request(name="after-http").SerializeToString())
        assert status == 200
        self.grpc_export(span_request(name="after-grpc"))
        names = {r.name for r in self.recorder.wait_for(before + 2)[before:]}
        assert names == {"after-http", "after-grpc"}


@pytest.fixture
def make_env(tmp_path: Path) -> Iterator[Callable[..., Env]]:
    started: list[Env] = []

    def make(recorder: Recorder | None = None, max_queued_records: int = 10_000, token: str | None = None,
             tls: bool = False, **config) -> Env:
        recorder = recorder or Recorder()
        metrics = Metrics()
        pipeline = Pipeline(recorder, metrics, max_queued_records=max_queued_records, tick_interval=60).start()
        cert = None
        if token is not None:
            (tmp_path / "token").write_text(token + "\n")
            config["auth_token_file"] = tmp_path / "token"
        if tls:
            cert, key = self_signed_cert(tmp_path)
            config.update(tls_cert=cert, tls_key=key)
        cfg = ReceiversConfig(**{"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0", **config})
        env = Env(start_receivers(cfg, pipeline, metrics), pipeline, metrics, recorder, token, cert)
        started.append(env)
        return env

    yield make
    for env in started:
        env.receivers.stop(grace=1)
        if env.recorder.gate is not None:
            env.recorder.gate.set()
        env.pipeline.stop(timeout=TIMEOUT)


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A throwaway cert for 127.0.0.1 made with the openssl CLI (cryptography is not a dependency)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("TLS test needs the openssl CLI to make a self-signed certificate, and it is not installed")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


# --------------------------------------------------------------------------- payloads


def sdk_spans(n: int = 3, name: str = "chat gpt-x", **attrs) -> list[ReadableSpan]:
    """Real SDK spans: one root with n-1 children."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "receiver-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("wt-otel-tests")
    with tracer.start_as_current_span(name, attributes={"gen_ai.operation.name": "chat", **attrs}):
        for i in range(n - 1):
            with tracer.start_as_current_span(f"execute_tool t{i}", attributes={"gen_ai.tool.name": f"t{i}"}):
                pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def span_request(n: int = 1, name: str = "chat gpt-x", **attrs) -> ExportTraceServiceRequest:
    return encode_spans(sdk_spans(n, name, **attrs))


def logs_request(n: int = 2) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    scope_logs = request.resource_logs.add().scope_logs.add()
    for i in range(n):
        rec = scope_logs.log_records.add(event_name="gen_ai.user.message", time_unix_nano=1 + i)
        rec.trace_id, rec.span_id = bytes(range(1, 17)), bytes(range(1, 9))
        rec.body.kvlist_value.values.add(key="content").value.string_value = f"hello {i}"
    return request


def retry_after(response: http.client.HTTPResponse) -> str | None:
    return response.getheader("Retry-After")


def status_message(body: bytes) -> str:
    return status_pb2.Status.FromString(body).message


def bomb(inflated: int, encoding: str = "gzip") -> bytes:
    """`inflated` zero bytes compressed with `encoding`, built without ever holding them."""
    zeros = bytes(1 << 20)
    if encoding == "zstd":
        writer = zstandard.ZstdCompressor(level=19).compressobj()
        return b"".join(writer.compress(zeros) for _ in range(inflated >> 20)) + writer.flush()
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
    parts = [compressor.compress(zeros) for _ in range(inflated >> 20)]
    return b"".join(parts) + compressor.flush()


def compress(data: bytes, encoding: str) -> bytes:
    """What a client sends with Content-Encoding `encoding` (raw-deflate: deflate without the zlib header)."""
    if encoding == "gzip":
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "raw-deflate":
        packer = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        return packer.compress(data) + packer.flush()
    return zstandard.ZstdCompressor().compress(data)


# --------------------------------------------------------------------------- happy paths, real SDK exporters


def test_sdk_grpc_exporter_delivers_spans(make_env):
    env = make_env()
    exporter = GrpcSpanExporter(endpoint=env.grpc_target, insecure=True, timeout=TIMEOUT)
    spans = sdk_spans(3)
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    got = env.recorder.wait_for(3)
    assert all(isinstance(r, SpanRecord) for r in got)
    assert {r.span_id for r in got} == {format(s.context.span_id, "016x") for s in spans}
    assert got[0].resource["service.name"] == "receiver-test"
    assert env.metrics.get("wt_otel_spans_received_total") == 3
    assert env.metrics.get("wt_otel_records_accepted_total") == 3
    assert env.metrics.get("wt_otel_requests_total", transport="grpc", signal="traces", code="OK") == 1


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.Deflate])
def test_sdk_grpc_exporter_with_compression(make_env, compression):
    env = make_env()
    exporter = GrpcSpanExporter(endpoint=env.grpc_target, insecure=True, timeout=TIMEOUT, compression=compression)
    assert exporter.export(sdk_spans(2)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert len(env.recorder.wait_for(2)) == 2


@pytest.mark.parametrize("compression", [HttpCompression.NoCompression, HttpCompression.Gzip,
                                         HttpCompression.Deflate])
def test_sdk_http_exporter_delivers_spans(make_env, compression):
    env = make_env()
    exporter = HttpSpanExporter(endpoint=f"http://127.0.0.1:{env.receivers.http_port}/v1/traces",
                                timeout=TIMEOUT, compression=compression)
    assert exporter.export(sdk_spans(3)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert {r.name for r in env.recorder.wait_for(3)} == {"chat gpt-x", "execute_tool t0", "execute_tool t1"}
    assert env.metrics.get("wt_otel_requests_total", transport="http", signal="traces", code="200") == 1


def test_sdk_log_exporters_over_both_transports(make_env):
    env = make_env()
    port = env.receivers.http_port
    for exporter in (GrpcLogExporter(endpoint=env.grpc_target, insecure=True, timeout=TIMEOUT),
                     HttpLogExporter(endpoint=f"http://127.0.0.1:{port}/v1/logs", timeout=TIMEOUT)):
        provider = LoggerProvider(resource=Resource.create({"service.name": "receiver-test"}))
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        provider.get_logger("wt-otel-tests").emit(event_name="gen_ai.user.message", body={"content": "hi"},
                                                 attributes={"gen_ai.system": "openai"})
        provider.shutdown()
    got = env.recorder.wait_for(2)
    assert all(isinstance(r, LogRecord) and r.event_name == "gen_ai.user.message" for r in got)
    assert got[0].body == {"content": "hi"}
    assert got[0].trace_id is None  # outside a span: no (all-zero) trace id
    assert env.metrics.get("wt_otel_log_records_received_total") == 2
    assert env.metrics.get("wt_otel_requests_total", transport="grpc", signal="logs", code="OK") == 1
    assert env.metrics.get("wt_otel_requests_total", transport="http", signal="logs", code="200") == 1


def test_raw_logs_over_both_transports(make_env):
    env = make_env()
    status, _, _ = env.post("/v1/logs", logs_request(2).SerializeToString())
    assert status == 200
    with env.grpc_channel() as channel:
        logs_service_pb2_grpc.LogsServiceStub(channel).Export(logs_request(3), timeout=TIMEOUT)
    got = env.recorder.wait_for(5)
    assert got[0].trace_id == bytes(range(1, 17)).hex() and got[0].body == {"content": "hello 0"}


def test_otlp_json_success(make_env):
    env = make_env()
    body = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
                                                            "value": {"stringValue": "json-app"}}]},
                               "scopeSpans": [{"spans": [{"traceId": "5b8efff798038103d269b633813fc60c",
                                                          "spanId": "eee19b7ec3c1b174", "name": "invoke_agent",
                                                          "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]}
    status, response, payload = env.post("/v1/traces", json.dumps(body).encode(), "application/json")
    assert status == 200 and response.getheader("Content-Type") == "application/json"
    assert json.loads(payload) == {}
    (record,) = env.recorder.wait_for(1)
    assert record.name == "invoke_agent" and record.service_name == "json-app"


def test_http_gzip_success_raw(make_env):
    env = make_env()
    body = gzip.compress(span_request(2).SerializeToString())
    status, response, payload = env.post("/v1/traces", body, headers={"Content-Encoding": "gzip"})
    assert status == 200 and response.getheader("Content-Type") == PB
    assert ExportTraceServiceResponse.FromString(payload) == ExportTraceServiceResponse()
    assert len(env.recorder.wait_for(2)) == 2


@pytest.mark.parametrize("encoding", ["deflate", "raw-deflate", "zlib", "zstd", "zstd-frames"])
def test_http_deflate_and_zstd_bodies_are_read(make_env, encoding):
    """deflate as the Python SDK sends it (zlib format) and as raw deflate; zlib and zstd as the Collector's
    otlphttp exporter sends them with `compression: zlib` (the zlib format, named "zlib") or `zstd`, in one
    frame or several."""
    env = make_env()
    data = span_request(3).SerializeToString()
    if encoding == "zstd-frames":
        body, header = compress(data[:100], "zstd") + compress(data[100:], "zstd"), "zstd"
    elif encoding == "zlib":
        body, header = zlib.compress(data), "zlib"
    else:
        body, header = compress(data, encoding), encoding.removeprefix("raw-")
    status, _, payload = env.post("/v1/traces", body, headers={"Content-Encoding": header})
    assert status == 200, status_message(payload)
    assert len(env.recorder.wait_for(3)) == 3


def test_chunked_body_is_read(make_env):
    env = make_env()
    body = span_request(2).SerializeToString()
    conn = http.client.HTTPConnection("127.0.0.1", env.receivers.http_port, timeout=TIMEOUT)
    conn.request("POST", "/v1/traces", body=iter([body[:10], body[10:]]), headers={"Content-Type": PB},
                 encode_chunked=True)
    assert conn.getresponse().status == 200
    conn.close()
    assert len(env.recorder.wait_for(2)) == 2


# --------------------------------------------------------------------------- partial success


def bad_id_request() -> ExportTraceServiceRequest:
    request = span_request(3)
    request.resource_spans[0].scope_spans[0].spans[1].trace_id = b"\x01\x02\x03\x04"
    return request


def test_partial_success_grpc(make_env):
    env = make_env()
    response = env.grpc_export(bad_id_request())
    assert response.partial_success.rejected_spans == 1
    assert "trace_id is 4 bytes, must be 16" in response.partial_success.error_message
    assert len(env.recorder.wait_for(2)) == 2
    assert env.metrics.get("wt_otel_records_rejected_total", reason="invalid_id") == 1


def test_partial_success_http_protobuf_and_json(make_env):
    env = make_env()
    status, _, payload = env.post("/v1/traces", bad_id_request().SerializeToString())
    assert status == 200
    partial = ExportTraceServiceResponse.FromString(payload).partial_success
    assert partial.rejected_spans == 1 and "trace_id" in partial.error_message
    env.recorder.wait_for(2)
    # The same request as OTLP/JSON: rejected whole by the strict JSON decoder, naming the path.
    bad_json = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "01020304", "spanId": "eee19b7ec3c1b174"}]}]}]}
    status, _, payload = env.post("/v1/traces", json.dumps(bad_json).encode(), "application/json")
    assert status == 400
    assert "resourceSpans[0].scopeSpans[0].spans[0].traceId" in json.loads(payload)["message"]


# --------------------------------------------------------------------------- malformed input


def test_truncated_protobuf(make_env):
    env = make_env()
    body = span_request(3).SerializeToString()
    status, response, payload = env.post("/v1/traces", body[: len(body) // 2])
    assert status == 400 and response.getheader("Content-Type") == PB
    assert "not a valid ExportTraceServiceRequest protobuf" in status_message(payload)
    with env.grpc_channel() as channel:
        raw = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as err:
            raw(body[: len(body) // 2], timeout=TIMEOUT)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid ExportTraceServiceRequest protobuf" in err.value.details()
    assert env.metrics.get("wt_otel_requests_total", transport="http", signal="traces", code="400") == 1
    assert env.metrics.get("wt_otel_requests_total", transport="grpc", signal="traces", code="INVALID_ARGUMENT") == 1
    env.assert_still_serves()


def test_keep_alive_connection_survives_a_bad_request(make_env):
    """A 400 after reading the whole body keeps the connection usable for the next request."""
    env = make_env()
    body = span_request(2).SerializeToString()
    conn = http.client.HTTPConnection("127.0.0.1", env.receivers.http_port, timeout=TIMEOUT)
    try:
        for payload, expected in ((body[:-3], 400), (body, 200), (b"{", 400), (body, 200)):
            conn.request("POST", "/v1/traces", body=payload, headers={"Content-Type": PB})
            response = conn.getresponse()
            response.read()
            assert response.status == expected
    finally:
        conn.close()
    assert len(env.recorder.wait_for(4)) == 4


def test_wrong_content_type(make_env):
    env = make_env()
    status, _, payload = env.post("/v1/traces", b"hello", "text/plain")
    assert status == 415 and "unsupported Content-Type 'text/plain'" in json.loads(payload)["message"]
    status, _, _ = env.post("/v1/traces", b"hello", None)
    assert status == 415
    status, _, payload = env.post("/v1/traces", span_request().SerializeToString(),
                                  headers={"Content-Encoding": "br"})
    assert status == 415 and "use one of gzip, x-gzip, deflate, zlib, zstd or none" in status_message(payload)
    env.assert_still_serves()


@pytest.mark.parametrize("body", [b'{"resourceSpans": [', b"\xff\xfe not utf-8", b"[" * 100_000,
                                  b'{"resourceSpans": {"oops": 1}}'])
def test_invalid_json(make_env, body):
    env = make_env()
    status, response, payload = env.post("/v1/traces", body, "application/json")
    assert status == 400 and response.getheader("Content-Type") == "application/json"
    message = json.loads(payload)["message"]
    assert message.startswith(("invalid JSON", "not an OTLP/JSON request")), message
    env.assert_still_serves()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_broken_compressed_bodies(make_env, encoding):
    env = make_env()
    good = compress(span_request().SerializeToString(), encoding)
    for body in (good[: len(good) // 2], b"not compressed at all", good + b"trailing", b""):
        status, _, payload = env.post("/v1/traces", body, headers={"Content-Encoding": encoding})
        assert status == 400, status_message(payload)
        assert encoding in status_message(payload)
    env.assert_still_serves()


# --------------------------------------------------------------------------- size limits


def test_huge_attribute_is_refused(make_env):
    env = make_env(max_message_bytes=256 * 1024, max_decompressed_bytes=1024 * 1024)
    # Bigger than the socket buffers: http.client is still writing when the 413 comes, and must get it
    # (the server drains before closing) rather than a broken pipe.
    request = span_request(1, big="x" * 8_000_000)
    status, response, payload = env.post("/v1/traces", request.SerializeToString())
    assert status == 413 and "exceeds the 262144-byte limit" in status_message(payload)
    assert response.getheader("Connection") == "close"  # the unread body must not be parsed as a request
    with pytest.raises(grpc.RpcError) as err:
        env.grpc_export(request)
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    # gzip does not get the same body past the decompressed cap (max_decompressed_bytes)
    status, _, _ = env.post("/v1/traces", gzip.compress(span_request(1, big="x" * 2_000_000).SerializeToString()),
                            headers={"Content-Encoding": "gzip"})
    assert status == 413
    env.assert_still_serves()


def test_huge_gzip_grpc_message_is_refused(make_env):
    """grpc applies max_receive_message_length after decompression: gzip is no way around it."""
    env = make_env(max_message_bytes=256 * 1024, max_decompressed_bytes=1024 * 1024)
    with pytest.raises(grpc.RpcError) as err:
        env.grpc_export(span_request(1, big="x" * 2_000_000), compression=grpc.Compression.Gzip)
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    env.assert_still_serves()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_compression_bomb_is_refused_with_bounded_memory(make_env, encoding):
    cap = 1024 * 1024
    env = make_env(max_message_bytes=cap, max_decompressed_bytes=2 * cap)
    body = bomb(256 << 20, encoding)  # 256 MiB of zeros in ~250 KB (zstd: ~8 KB)
    assert len(body) < cap
    tracemalloc.start()
    try:
        status, _, payload = env.post("/v1/traces", body, headers={"Content-Encoding": encoding})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 413 and "max_decompressed_bytes" in status_message(payload)
    assert peak < 12 * cap, f"peak {peak} bytes while refusing a gzip bomb"
    env.assert_still_serves()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate", "zstd"])
def test_decompress_capped_unit(encoding):
    data = b"a" * 10_000
    header = encoding.removeprefix("raw-")
    assert decompress_capped(compress(data, encoding), header, 10_000) == data
    with pytest.raises(ValueError, match="beyond"):
        decompress_capped(compress(data, encoding), header, 9_999)
    if encoding in ("gzip", "zstd"):  # several members / frames, one body
        assert decompress_capped(compress(data[:5], encoding) + compress(data[5:], encoding), header, 10_000) == data
    else:  # a deflate stream is one stream
        with pytest.raises(ValueError, match="garbage"):
            decompress_capped(compress(data, encoding) * 2, header, 20_000)


def test_a_zstd_frame_that_asks_for_a_window_above_the_cap_is_too_large():
    """The window is what the decoder allocates before it writes a byte: a frame may not ask for more than the
    decompressed cap could ever need (here 128 MiB against a 1 MiB cap)."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
    writer = zstandard.ZstdCompressor(compression_params=params).compressobj()  # streamed: no content size
    body = writer.compress(b"x" * 1000) + writer.flush()
    assert decompress_capped(body, "zstd", 256 << 20) == b"x" * 1000
    with pytest.raises(ValueError, match="window"):
        decompress_capped(body, "zstd", 1 << 20)


# --------------------------------------------------------------------------- auth and TLS


def test_bearer_token(make_env):
    env = make_env(token="s3cret-token")
    body = span_request().SerializeToString()
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"}):
        status, response, _ = env.post("/v1/traces", body, headers=headers)
        assert status == 401 and response.getheader("WWW-Authenticate", "").startswith("Bearer")
    for metadata in ([], [("authorization", "Bearer wrong")]):
        with pytest.raises(grpc.RpcError) as err:
            env.grpc_export(span_request(), metadata=metadata)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert env.post("/healthz", b"", None, method="GET")[0] == 200  # probes need no token
    assert env.post("/metrics", b"", None, headers={"Authorization": "Bearer wrong"}, method="GET")[0] == 401
    assert env.post("/metrics", b"", None, method="GET")[0] == 200  # env.post sends the right token
    assert env.metrics.get("wt_otel_requests_total", transport="http", signal="traces", code="401") == 3
    assert env.metrics.get("wt_otel_requests_total", transport="grpc", signal="traces", code="UNAUTHENTICATED") == 2
    env.assert_still_serves()
    exporter = GrpcSpanExporter(endpoint=env.grpc_target, insecure=True, timeout=TIMEOUT,
                                headers={"authorization": "Bearer s3cret-token"})
    assert exporter.export(sdk_spans(1)) is SpanExportResult.SUCCESS
    exporter.shutdown()


def test_tls_with_sdk_exporters(make_env, monkeypatch):
    # requests lets these variables override the exporter's certificate_file (psf/requests#3829)
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    env = make_env(tls=True, token="tok")
    grpc_exporter = GrpcSpanExporter(endpoint=env.grpc_target, timeout=TIMEOUT, headers={"authorization": "Bearer tok"},
                                     credentials=grpc.ssl_channel_credentials(env.cert.read_bytes()))
    http_exporter = HttpSpanExporter(endpoint=f"https://127.0.0.1:{env.receivers.http_port}/v1/traces",
                                     certificate_file=str(env.cert), headers={"Authorization": "Bearer tok"},
                                     timeout=TIMEOUT)
    for exporter in (grpc_exporter, http_exporter):
        assert exporter.export(sdk_spans(1)) is SpanExportResult.SUCCESS
        exporter.shutdown()
    env.recorder.wait_for(2)
    # A plaintext client gets nowhere, and the server carries on.
    conn = http.client.HTTPConnection("127.0.0.1", env.receivers.http_port, timeout=TIMEOUT)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn.request("GET", "/healthz")
        conn.getresponse()
    conn.close()
    env.assert_still_serves()


# --------------------------------------------------------------------------- back-pressure and shutdown


def test_full_queue(make_env):
    gate = threading.Event()
    env = make_env(recorder=Recorder(gate=gate), max_queued_records=2)
    assert env.post("/v1/traces", span_request(2).SerializeToString())[0] == 200  # taken; the consumer blocks
    status, response, payload = env.post("/v1/traces", span_request(1).SerializeToString())
    assert status == 429 and retry_after(response) == "1"
    status_pb = status_pb2.Status.FromString(payload)
    assert "queue is full" in status_pb.message
    assert status_pb.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
    with pytest.raises(grpc.RpcError) as err:
        env.grpc_export(span_request(1))
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(err.value.trailing_metadata())
    assert error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds == 1
    details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert details.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert env.metrics.get("wt_otel_records_rejected_total", reason="queue_full") == 2
    gate.set()  # the consumer drains; the receivers take data again
    env.recorder.wait_for(2)
    env.assert_still_serves()


def test_closed_pipeline(make_env):
    env = make_env()
    env.pipeline.stop(timeout=TIMEOUT)
    status, response, payload = env.post("/v1/traces", span_request().SerializeToString())
    assert status == 503 and retry_after(response) == "1" and "shutting down" in status_message(payload)
    with pytest.raises(grpc.RpcError) as err:
        env.grpc_export(span_request())
    assert err.value.code() is grpc.StatusCode.UNAVAILABLE
    # refused before decoding: counted as requests, not records
    assert env.metrics.get("wt_otel_requests_shed_total", reason="shutting_down") == 2
    assert env.metrics.get("wt_otel_spans_received_total") == 0
    assert env.post("/healthz", b"", None, method="GET")[0] == 200  # the server itself still answers


def test_stop_refuses_new_connections(make_env):
    env = make_env()
    port = env.receivers.http_port
    env.receivers.stop(grace=1)
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT).request("GET", "/healthz")


# --------------------------------------------------------------------------- routes, health, metrics


def test_routes_and_methods(make_env):
    env = make_env()
    status, _, payload = env.post("/v1/profiles", b"", PB)
    assert status == 404 and "no such path" in status_message(payload)
    status, response, _ = env.post("/v1/traces", b"", None, method="GET")
    assert status == 405 and response.getheader("Allow") == "POST"
    assert env.post("/healthz", b"", None, method="POST")[0] == 405
    status, _, payload = env.post("/healthz", b"", None, method="GET")
    assert status == 200 and json.loads(payload) == {"status": "ok"}
    env.assert_still_serves()


def test_grpc_health_check_answers_probes_and_follows_the_data_dir(make_env):
    """A Kubernetes `grpc:` probe (grpc.health.v1, no token) sees what /healthz says: NOT_SERVING while
    exports are refused because the data dir cannot be written, SERVING again once it can."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    env = make_env(token="s3cret")
    check = health_pb2.HealthCheckRequest
    with env.grpc_channel() as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "opentelemetry.proto.collector.trace.v1.TraceService"):
            assert stub.Check(check(service=service), timeout=TIMEOUT).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            stub.Check(check(service="grpc.reflection.v1.ServerReflection"), timeout=TIMEOUT)
        assert err.value.code() is grpc.StatusCode.NOT_FOUND
        env.pipeline.admission.set_degraded("data dir", "No space left on device")
        assert stub.Check(check(), timeout=TIMEOUT).status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert env.post("/healthz", b"", None, method="GET")[0] == 503
        env.pipeline.admission.set_degraded("data dir", None)
        assert stub.Check(check(), timeout=TIMEOUT).status == health_pb2.HealthCheckResponse.SERVING


def test_metrics_endpoint_counts_requests(make_env):
    env = make_env()
    env.post("/v1/traces", span_request(3).SerializeToString())
    env.post("/v1/traces", b"\x0a\xff", PB)
    env.grpc_export(bad_id_request())
    env.recorder.wait_for(5)
    status, response, payload = env.post("/metrics", b"", None, method="GET")
    assert status == 200 and response.getheader("Content-Type").startswith("text/plain")
    lines = set(payload.decode().splitlines())
    assert 'wt_otel_requests_total{code="200",signal="traces",transport="http"} 1' in lines
    assert 'wt_otel_requests_total{code="400",signal="traces",transport="http"} 1' in lines
    assert 'wt_otel_requests_total{code="OK",signal="traces",transport="grpc"} 1' in lines
    assert "wt_otel_spans_received_total 6" in lines
    assert "wt_otel_records_accepted_total 5" in lines
    assert 'wt_otel_records_rejected_total{reason="invalid_id"} 1' in lines


# --------------------------------------------------------------------------- config and wire helpers


def test_config_validation(tmp_path):
    with pytest.raises(ValueError, match="tls_cert and tls_key go together"):
        ReceiversConfig(tls_cert=tmp_path / "c.pem")
    with pytest.raises(ValueError, match="must be host:port"):
        ReceiversConfig(grpc_endpoint="4317")
    assert ReceiversConfig(http_endpoint="[::1]:0", grpc_endpoint=None).grpc_endpoint is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        start_receivers(ReceiversConfig(auth_token_file=tmp_path / "empty"), None, Metrics())  # type: ignore[arg-type]


def test_ipv6_loopback_and_disabled_grpc(make_env):
    try:
        env = make_env(grpc_endpoint=None, http_endpoint="[::1]:0")
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    assert env.receivers.grpc_port is None
    conn = http.client.HTTPConnection("::1", env.receivers.http_port, timeout=TIMEOUT)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    conn.close()


def test_hand_encoded_status_matches_google_rpc():
    info = error_details_pb2.RetryInfo.FromString(retry_info_bytes(3))
    assert info.retry_delay.seconds == 3
    status = status_pb2.Status.FromString(rpc_status_bytes(8, "full ✓", [("type.googleapis.com/x", b"\x01")]))
    assert (status.code, status.message, status.details[0].type_url, status.details[0].value) == (
        8, "full ✓", "type.googleapis.com/x", b"\x01")


# --------------------------------------------------------------------------- metrics: accepted and dropped (issue 12)


def sdk_metrics_data():
    """Real metric data from the OTel SDK: a counter (1 point) and a histogram with two attribute sets (2 points)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "receiver-test"}))
    meter = provider.get_meter("wt-otel-tests")
    meter.create_counter("gen_ai.requests").add(3)
    histogram = meter.create_histogram("gen_ai.client.token.usage")
    histogram.record(12, {"gen_ai.token.type": "input"})
    histogram.record(5, {"gen_ai.token.type": "output"})
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def test_sdk_metric_exporters_succeed_and_points_are_counted_and_dropped(make_env):
    """An app exporting every signal to serve: metrics were 404 / UNIMPLEMENTED, and the app logged failures."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
    from opentelemetry.sdk.metrics.export import MetricExportResult

    env = make_env()
    data = sdk_metrics_data()
    for exporter in (GrpcMetricExporter(endpoint=env.grpc_target, insecure=True, timeout=TIMEOUT),
                     HttpMetricExporter(endpoint=f"http://127.0.0.1:{env.receivers.http_port}/v1/metrics",
                                        timeout=TIMEOUT)):
        assert exporter.export(data) is MetricExportResult.SUCCESS
        exporter.shutdown()
    assert env.metrics.get("wt_otel_metric_points_dropped_total") == 6  # 3 points, twice
    assert env.metrics.get("wt_otel_requests_total", transport="grpc", signal="metrics", code="OK") == 1
    assert env.metrics.get("wt_otel_requests_total", transport="http", signal="metrics", code="200") == 1
    assert env.recorder.records == []  # nothing reached the session pipeline
    rendered = env.metrics.render()
    assert "wt_otel_metric_points_dropped_total 6" in rendered


def test_metrics_json_is_dropped_and_a_malformed_metrics_body_is_still_a_400(make_env):
    env = make_env()
    body = json.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "m", "gauge": {"dataPoints": [{"asDouble": 1.0}, {"asDouble": 2.0}]}}]}]}]}).encode()
    assert env.post("/v1/metrics", body, "application/json")[0] == 200
    assert env.metrics.get("wt_otel_metric_points_dropped_total") == 2
    status, _, payload = env.post("/v1/metrics", b"\xff\xfe garbage", PB)
    assert status == 400 and "ExportMetricsServiceRequest" in status_message(payload)
    assert env.post("/v1/metrics", b"[1]", "application/json")[0] == 400
    assert env.post("/v1/metrics", body, "application/json", method="GET")[0] == 405
