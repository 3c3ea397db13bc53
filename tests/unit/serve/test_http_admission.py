"""Connection admission on OTLP/HTTP (issue 31, item 1): idle connections, from one address or many, used to
fill `http_max_connections` and lock out every exporter and `/healthz` (a liveness probe then restarted a
healthy pod). Real sockets bound to several loopback addresses; the real OTel SDK exporter."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.support.receivers import HttpReceivers, slow_body


@pytest.fixture
def receiver():
    made = HttpReceivers()
    yield made.start
    made.stop()


def _idle_flood(port: int, n: int, addresses: int) -> list[socket.socket]:
    """`n` connections that never send a byte, from 127.0.0.1 .. 127.0.0.`addresses`."""
    held = []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((f"127.0.0.{i % addresses + 1}", 0))
        s.connect(("127.0.0.1", port))
        held.append(s)
    return held


def _healthz(port: int) -> tuple[int, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    return code, time.monotonic() - started


class _Collect(SpanExporter):
    def __init__(self) -> None:
        self.spans: list = []

    def export(self, spans) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _batches(n: int, size: int) -> list[list]:
    """`n` batches of `size` finished SDK spans (ReadableSpan), made by a real TracerProvider."""
    collect = _Collect()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collect))
    tracer = provider.get_tracer("admission-test")
    for i in range(n * size):
        with tracer.start_as_current_span(f"chat {i}", attributes={"gen_ai.operation.name": "chat"}):
            pass
    provider.shutdown()
    return [collect.spans[i * size:(i + 1) * size] for i in range(n)]


def test_a_thousand_idle_connections_from_eight_addresses_lock_out_no_exporter_and_no_probe(receiver):
    receivers, sink, metrics = receiver()
    port = receivers.http_port
    held = _idle_flood(port, 1000, 8)  # 125 an address: under the per-address limit, twice the total one
    try:
        deadline = time.monotonic() + 10
        while (metrics.get("wt_otel_http_connections_closed_total", reason="evicted")  # now: idle ones closed
               + metrics.get("wt_otel_http_connections_refused_total")) < 1000 - 512:  # before: new ones refused
            assert time.monotonic() < deadline, "the server never took the flood in"
            time.sleep(0.02)

        code, took = _healthz(port)
        assert code == 200 and took < 1.0, (code, took)  # was 503: "too many connections"

        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=5)
        batches = _batches(10, 5)
        results = [exporter.export(batch) for batch in batches]
        exporter.shutdown()
        assert results == [SpanExportResult.SUCCESS] * 10  # was 0 of 10 in
        assert metrics.get("wt_otel_requests_total", transport="http", signal="traces", code="200") == 10
        deadline = time.monotonic() + 5
        while sink.records < 50:
            assert time.monotonic() < deadline, sink.records
            time.sleep(0.01)

        code, took = _healthz(port)
        assert code == 200 and took < 1.0, (code, took)
        assert "wt_otel_http_connections_closed_total{reason=\"evicted\"}" in metrics.render()
    finally:
        for s in held:
            s.close()


def test_a_silent_new_connection_is_closed_after_the_first_request_timeout(receiver):
    receivers, _, metrics = receiver(http_first_request_timeout=0.3)
    s = socket.create_connection(("127.0.0.1", receivers.http_port), timeout=10)
    try:
        started = time.monotonic()
        assert s.recv(4096) == b""  # closed by the server, not by this socket's 10 s
        assert time.monotonic() - started < 3
    finally:
        s.close()
    assert metrics.get("wt_otel_http_connections_closed_total", reason="silent") == 1


def test_a_new_connection_from_a_full_address_replaces_its_oldest_idle_one(receiver):
    receivers, _, metrics = receiver(http_max_connections_per_client=4)
    held = _idle_flood(receivers.http_port, 4, 1)
    try:
        time.sleep(0.1)
        code, _ = _healthz(receivers.http_port)  # the same address: one of its idle connections makes room
        assert code == 200
        assert metrics.get("wt_otel_http_connections_closed_total", reason="evicted") == 1
        held[0].settimeout(5)
        assert held[0].recv(10) == b""  # the oldest one was closed
    finally:
        for s in held:
            s.close()


def test_with_every_connection_busy_healthz_is_still_answered_and_exports_get_503(receiver):
    receivers, _, metrics = receiver(http_max_connections=4, http_read_timeout=5)
    port = receivers.http_port
    busy = [slow_body(port) for _ in range(4)]
    try:
        time.sleep(0.2)
        code, took = _healthz(port)
        assert code == 200 and took < 1.0
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=b"",
                                     headers={"Content-Type": "application/x-protobuf"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=5)
        assert info.value.code == 503 and info.value.headers["Retry-After"] == "1"
        assert b"too many connections" in info.value.read()
        assert metrics.get("wt_otel_http_connections_refused_total") == 2
    finally:
        for s in busy:
            s.close()
