"""The backlog gate on the predicted backlog, fair per client (issue 31, item 6): it admitted on the backlog
already there, so under overload `backlog_seconds` ran at 5-12 s against a limit of 2, and one client's
2,400-session request got every other client 429 for seconds. Real OTLP/HTTP requests from two loopback
addresses; a writer whose backlog and speed the test sets (5 ms a session)."""

from __future__ import annotations

import http.client
import time
from collections.abc import Sequence

import pytest
from google.rpc import status_pb2

from tests.support.hostile import genai_session, tid, to_request
from wt_otel.serve.budget import AdmissionControl, BudgetConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers import ReceiversConfig, start_receivers

PER_SESSION = 0.005
A, B = "127.0.0.2", "127.0.0.3"


class _Writer:
    """Takes records at once; says it has `lag` seconds of writing waiting, at PER_SESSION a session."""

    def __init__(self) -> None:
        self.lag = 0.0
        self.records = 0

    def consume(self, records: Sequence, now: float) -> None:
        self.records += len(records)

    def tick(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass

    def write_backlog(self) -> float:
        return self.lag

    def write_cost(self, sessions: int) -> float:
        return sessions * PER_SESSION


@pytest.fixture
def env():
    writer, metrics = _Writer(), Metrics()
    pipeline = Pipeline(writer, metrics, admission=AdmissionControl(BudgetConfig(max_backlog_seconds=0.5)),
                        writer_lag=writer.write_backlog, write_cost=writer.write_cost).start()
    receivers = start_receivers(ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"), pipeline, metrics)
    yield writer, pipeline, receivers
    receivers.stop(grace=1)
    pipeline.stop()


_first = [1]


def _post(port: int, source: str, traces: int) -> tuple[int, str]:
    """`traces` fresh GenAI sessions in one request from `source`: (status, the error message or "")."""
    first = _first[0]
    _first[0] += traces
    body = to_request([s for i in range(first, first + traces) for s in genai_session(tid(i))]).SerializeToString()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
        response = conn.getresponse()
        payload = response.read()
    finally:
        conn.close()
    return response.status, "" if response.status == 200 else status_pb2.Status.FromString(payload).message


def _drained(pipeline: Pipeline) -> None:
    deadline = time.monotonic() + 10
    while pipeline.queued:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_request_is_admitted_on_the_backlog_it_would_make(env):
    writer, pipeline, receivers = env
    writer.lag = 0.3  # under the 0.5 s limit: the old gate let anything in
    status, message = _post(receivers.http_port, A, 90)  # +0.45 s: 0.75 s predicted
    assert status == 429 and "writer is behind" in message, message
    assert _post(receivers.http_port, A, 30) == (200, "")  # +0.15 s: 0.45 s predicted
    writer.lag = 0.0
    _drained(pipeline)
    assert _post(receivers.http_port, A, 90) == (200, "")


def test_one_clients_burst_does_not_lock_out_the_others(env):
    writer, pipeline, receivers = env
    port = receivers.http_port
    assert _post(port, B, 5)[0] == 200  # B is an active client

    status, message = _post(port, A, 200)  # 1 s of writing alone, twice the limit: would hold B behind it
    assert status == 413 and "split it" in message and "max_backlog_seconds" in message, message

    assert _post(port, A, 90)[0] == 200  # 0.45 s: fits
    _drained(pipeline)
    writer.lag = 0.6  # the writer is behind now, mostly with A's sessions
    status, message = _post(port, A, 20)
    assert status == 429 and "this client's requests hold" in message, message
    assert _post(port, B, 20) == (200, "")  # B holds nothing of the backlog: still gets in (was 429)

    writer.lag = 1.2  # beyond twice the limit nobody gets in: the gate holds
    assert _post(port, B, 5)[0] == 429
    writer.lag = 0.0
    assert _post(port, A, 20) == (200, "")
