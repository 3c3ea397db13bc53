"""Refusal before decoding (issue 15, overload items): the backlog gate and the memory gate on real OTLP
requests through the real receivers, and that nothing acknowledged is lost while they refuse."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from processors.assembler import SessionAssembler
from tests.support.hostile import genai_session, tid, to_request
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.budget import AdmissionControl, BudgetConfig, Verdict
from wt_otel.serve.config import AssemblerConfig, QueueConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers import start_receivers
from wt_otel.serve.server import Server

TIMEOUT = 10.0


class _Held:
    """A consumer that records what reaches it and holds the worker in `consume` until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.records: list = []

    def consume(self, records: Sequence, now: float) -> None:
        self.entered.set()
        self.release.wait(TIMEOUT)
        self.records.extend(records)

    def tick(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass


def _until(predicate, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def held_env():
    consumer, metrics = _Held(), Metrics()
    pipeline = Pipeline(consumer, metrics, tick_interval=60,
                        admission=AdmissionControl(BudgetConfig(max_backlog_seconds=0.2, max_bytes=50_000_000)))
    pipeline.start()
    receivers = start_receivers(ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint="127.0.0.1:0"),
                                pipeline, metrics)
    yield consumer, pipeline, metrics, receivers
    receivers.stop(grace=1)
    consumer.release.set()
    pipeline.stop(timeout=TIMEOUT)


def _post(port: int, body: bytes) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_while_the_writer_is_behind_requests_are_refused_before_decoding_and_nothing_accepted_is_lost(held_env):
    consumer, pipeline, metrics, receivers = held_env
    first, second = genai_session(tid(1)), genai_session(tid(2))
    with grpc.insecure_channel(f"127.0.0.1:{receivers.grpc_port}") as channel:
        TraceServiceStub(channel).Export(to_request(first), timeout=TIMEOUT)  # the worker takes it and is held
        consumer.entered.wait(TIMEOUT)
        TraceServiceStub(channel).Export(to_request(second), timeout=TIMEOUT)  # queued behind it
        _until(lambda: pipeline.backlog_seconds > 0.2)  # the queued batch has waited past max_backlog_seconds

        with pytest.raises(grpc.RpcError) as err:
            TraceServiceStub(channel).Export(to_request(genai_session(tid(3))), timeout=TIMEOUT)
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "writer is behind" in err.value.details()
    trailers = dict(err.value.trailing_metadata())
    assert error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds == 1

    # Not decoded: a body that is not protobuf at all gets the same 429, not a 400.
    status, headers, payload = _post(receivers.http_port, b"\xff not a protobuf request")
    assert status == 429 and headers["Retry-After"] == "1"
    assert "writer is behind" in status_pb2.Status.FromString(payload).message
    assert metrics.get("wt_otel_requests_shed_total", reason="queue_full") == 2
    assert metrics.get("wt_otel_spans_received_total") == len(first) + len(second)  # the refused: never decoded

    consumer.release.set()  # the writer catches up: everything acknowledged reaches it, and the gate opens
    _until(lambda: len(consumer.records) == len(first) + len(second))
    assert {r.span_id for r in consumer.records} == {s.span_id for s in first + second}
    _until(lambda: pipeline.backlog_seconds == 0)
    assert _post(receivers.http_port, to_request(genai_session(tid(4))).SerializeToString())[0] == 200


def test_a_request_that_would_not_fit_the_memory_budget_is_refused_before_decoding():
    held = {"n": 0}
    control = AdmissionControl(BudgetConfig(max_bytes=1_000_000), held=lambda: held["n"])
    consumer, metrics = _Held(), Metrics()
    pipeline = Pipeline(consumer, metrics, tick_interval=60, admission=control).start()
    receivers = start_receivers(ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint="127.0.0.1:0"),
                                pipeline, metrics)
    consumer.release.set()
    try:
        held["n"] = 900_000  # open sessions and retained records hold 90% of the budget
        garbage = b"\xff" * 60_000  # ~120 kB once decoded, by its size: does not fit; never decoded (no 400)
        status, headers, payload = _post(receivers.http_port, garbage)
        assert status == 429 and headers["Retry-After"] == "1"
        assert "memory budget" in status_pb2.Status.FromString(payload).message
        assert _post(receivers.http_port, b"\xff" * 100)[0] == 400  # a small one fits, is decoded, is malformed
        held["n"] = 0
        assert _post(receivers.http_port, to_request(genai_session(tid(1))).SerializeToString())[0] == 200
        assert metrics.get("wt_otel_requests_shed_total", reason="queue_full") == 1
    finally:
        receivers.stop(grace=1)
        pipeline.stop(timeout=TIMEOUT)


def test_gate_rules():
    control = AdmissionControl(BudgetConfig(max_bytes=1_000_000, max_backlog_seconds=2))
    assert control.gate(10_000, 0, 1.9).verdict is Verdict.ADMIT
    assert control.gate(10_000, 0, 2.1).verdict is Verdict.FULL
    # an over-estimate counts at most one batch's share: an empty pipeline never refuses on a guess
    assert control.gate(50_000_000, 0, 0).verdict is Verdict.ADMIT
    assert control.gate(100_000, 950_000, 0).verdict is Verdict.FULL
    control.set_degraded("data dir", "No space left on device")
    decision = control.gate(10, 0, 0)
    assert decision.verdict is Verdict.UNAVAILABLE and "No space left" in decision.reason


def test_the_assembler_reports_its_writing_backlog_in_seconds():
    written: list = []
    assembler = SessionAssembler(lambda session, spans: written.append(session.key), idle_timeout=30, grace=0.5)
    assert assembler.write_backlog() == 0  # nothing waiting
    t = 1_000.0
    assembler.consume([s for i in range(20) for s in genai_session(tid(i + 1))], t)
    assembler.tick(t + 1)  # writes the 20 (their roots ended, grace over) and measures the speed
    assert len(written) == 20 and assembler.write_backlog() == 0
    per_session = assembler._seconds_per_session
    assert per_session > 0
    waiting = max(50, int(2 * assembler.grace / per_session))  # enough to be past the grace they wait anyway
    assembler.consume([s for i in range(waiting) for s in genai_session(tid(100 + i))], t + 2)
    assert assembler.write_backlog() == pytest.approx(waiting * per_session - assembler.grace)
    assembler.tick(t + 3)
    assert assembler.write_backlog() == 0


def test_under_a_tight_backlog_gate_every_acknowledged_session_is_written_and_no_refused_one(tmp_path: Path):
    """Real serve, real gRPC clients in parallel, a gate that trips easily: what was acknowledged is exactly
    what is in the data dir after a clean stop."""
    config = ServeConfig(data_dir=tmp_path / "data",
                         receivers=ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint=None),
                         assembler=AssemblerConfig(idle_timeout=5, grace=0.05),
                         queue=QueueConfig(max_backlog_seconds=0.01))
    server = Server(config, quiet=True).start()
    accepted: set[str] = set()
    refused: set[str] = set()
    lock = threading.Lock()

    def client(first: int) -> None:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = TraceServiceStub(channel)
            for i in range(first, first + 15):
                traces = [tid(10 * i + k) for k in range(5)]
                try:
                    stub.Export(to_request([s for t in traces for s in genai_session(t)]), timeout=TIMEOUT)
                    bucket = accepted
                except grpc.RpcError as e:
                    assert e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, e
                    bucket = refused
                with lock:
                    bucket.update(traces)

    try:
        clients = [threading.Thread(target=client, args=(1 + 100 * c,)) for c in range(4)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
    finally:
        server.stop()
    assert accepted
    assert {e["key"] for e in read_index(config.data_dir).entries} == accepted
