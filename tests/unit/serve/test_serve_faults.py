"""`wt-otel serve` in-process under fault injection (issue 13, items 1-4 and 7), over real OTLP/HTTP and gRPC.

Each test is bounded: small budgets, a handful of sessions, no sleeps beyond polling for the writer."""

from __future__ import annotations

import errno
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2 as grpc_health_pb2
from grpc_health.v1 import health_pb2_grpc as grpc_health_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from tests.support.hostile import HUGE_INT_ARGS, genai_session, tid, to_request
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import AssemblerConfig, DataDirConfig, QueueConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.server import Server


def _server(tmp_path: Path, **kw) -> Server:
    """render: all unless told: these faults are those of decoded, rendered sessions."""
    kw.setdefault("datadir", DataDirConfig(render="all"))
    config = ServeConfig(data_dir=tmp_path / "data",
                         receivers=ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint="127.0.0.1:0"),
                         assembler=kw.pop("assembler", AssemblerConfig(idle_timeout=0.3, grace=0.05)), **kw)
    return Server(config, quiet=True).start()


def _post(server: Server, body: bytes, path: str = "/v1/traces") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(server.http_url + path, data=body, headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _get(server: Server, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(server.http_url + path, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _keys(server: Server) -> set[str]:
    return {e["key"] for e in read_index(server.config.data_dir).entries}


def _wait(predicate, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_item1_huge_int_over_http_and_grpc_is_written_and_shares_no_fate(tmp_path):
    """A tool call with an integer beyond 2**64 used to drop its session and every session sharing its
    conversation id, after a 200."""
    server = _server(tmp_path)
    try:
        victim = genai_session(tid(1), conversation="c-1")
        hostile = genai_session(tid(2), args=HUGE_INT_ARGS, conversation="c-1", start=20_000)
        grpc_hostile = genai_session(tid(3), args=HUGE_INT_ARGS)
        assert _post(server, to_request(victim + hostile).SerializeToString())[0] == 200
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            TraceServiceStub(channel).Export(to_request(grpc_hostile), timeout=10)
        _wait(lambda: {tid(1), tid(3)} <= _keys(server))
    finally:
        server.stop()
    env = json.loads((server.config.data_dir / "sessions" / "c-1" / "incident.wtin.json").read_text())
    assert {"account": "12345678901234567890123"} in [c["args"] for c in env["witnessed_calls"]]


def test_item2_one_huge_request_is_refused_and_does_not_lock_out_others(tmp_path):
    """100,000 one-span traces in one request used to be admitted whole and lock every client out."""
    server = _server(tmp_path, queue=QueueConfig(max_queued_records=2_000, max_sessions_per_client=200))
    try:
        flood = [genai_session(tid(i))[3] for i in range(1, 1_001)]  # 1,000 one-span traces (root spans)
        status, headers, body = _post(server, to_request(flood).SerializeToString())
        assert status == 413 and "Retry-After" not in headers and b"split" in body
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            with pytest.raises(grpc.RpcError) as info:
                TraceServiceStub(channel).Export(to_request(flood), timeout=10)
            assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        # nobody is locked out: the next export (HTTP or gRPC) goes straight in
        assert _post(server, to_request(genai_session(tid(5_000))).SerializeToString())[0] == 200
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            TraceServiceStub(channel).Export(to_request(genai_session(tid(5_001))), timeout=10)
    finally:
        server.stop()


def test_item3_memory_is_budgeted_in_bytes(tmp_path):
    """Requests carrying a large attribute each used to be held for the whole 300 s late window:
    20 x 500 kB stayed in memory. With a 3 MB budget, what stays is bounded by it (measured with tracemalloc)."""
    import gc
    import tracemalloc

    server = _server(tmp_path, queue=QueueConfig(max_bytes=3_000_000),
                     assembler=AssemblerConfig(idle_timeout=0.05, grace=0.05, max_held_bytes=2_000_000))
    tracemalloc.start()
    try:
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        codes = []
        for i in range(20):
            spans = genai_session(tid(i + 1))
            spans[0].attributes["app.blob"] = f"{i:03d}" + "x" * 500_000
            codes.append(_post(server, to_request(spans).SerializeToString())[0])
            _wait(lambda: server.pipeline.queued == 0)
        _wait(lambda: server.pipeline.consumer is not None and len(_keys(server)) >= codes.count(200))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
        assert codes.count(200) >= 10  # the budget refuses only what does not fit, and frees as it writes
        assert held < 4_000_000, held  # 20 x 500 kB = 10 MB were held before
        assert server.admission.held() <= 2_000_000
        too_big = genai_session(tid(100))
        too_big[0].attributes["app.blob"] = "y" * 800_000  # more than a quarter of the 3 MB budget
        status, headers, body = _post(server, to_request(too_big).SerializeToString())
        assert status == 413 and b"split" in body
    finally:
        tracemalloc.stop()
        server.stop()


def test_item3_budget_full_answers_429_with_retry_info(tmp_path):
    server = _server(tmp_path, queue=QueueConfig(max_bytes=1_000_000),
                     assembler=AssemblerConfig(idle_timeout=30, grace=30, max_held_bytes=10_000_000))
    try:
        codes = []
        for i in range(8):
            spans = genai_session(tid(i + 1))
            spans[0].attributes["app.blob"] = "z" * 200_000
            codes.append(_post(server, to_request(spans[:1]).SerializeToString()))
            time.sleep(0.05)  # let the worker move the batch from the queue to the assembler
        refused = [c for c in codes if c[0] == 429]
        assert refused and refused[0][1]["Retry-After"] == "1" and b"memory budget" in refused[0][2]
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            spans = genai_session(tid(50))
            spans[0].attributes["app.blob"] = "z" * 200_000
            with pytest.raises(grpc.RpcError) as info:
                TraceServiceStub(channel).Export(to_request(spans[:1]), timeout=10)
            assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert dict(info.value.trailing_metadata()).get("google.rpc.retryinfo-bin")
    finally:
        server.stop()


def test_item4_full_disk_stops_acknowledging_keeps_data_and_writes_it_later(tmp_path):
    """With a full data dir, acknowledged sessions used to be lost while /healthz said ok."""
    # the `write_dir` seam is the pipeline thread's; render workers meet a real full disk in test_full_disk_tmpfs
    server = _server(tmp_path, datadir=DataDirConfig(workers=0, render="all"))
    store = server.store
    real = store.write_dir
    full = {"on": True}

    def disk(dest, files, **kw):
        if full["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
        return real(dest, files, **kw)

    store.write_dir = disk
    try:
        assert _post(server, to_request(genai_session(tid(1))).SerializeToString())[0] == 200  # acknowledged
        _wait(lambda: store.deferred == 1)
        _wait(lambda: _get(server, "/healthz")[0] == 503)  # with a receiver process: its next status, within ms
        status, headers, body = _post(server, to_request(genai_session(tid(2))).SerializeToString())
        assert status == 503 and headers["Retry-After"] == "1" and b"No space left" in body
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            with pytest.raises(grpc.RpcError) as info:
                TraceServiceStub(channel).Export(to_request(genai_session(tid(3))), timeout=10)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        code, health = _get(server, "/healthz")
        assert code == 503 and json.loads(health)["status"] == "degraded"
        assert "wt_otel_datadir_degraded 1" in _get(server, "/metrics")[1].decode()
        full["on"] = False  # space returns: the next tick writes what was kept
        _wait(lambda: tid(1) in _keys(server))
        _wait(lambda: _get(server, "/healthz")[0] == 200)
        assert _post(server, to_request(genai_session(tid(2))).SerializeToString())[0] == 200
        _wait(lambda: tid(2) in _keys(server))
    finally:
        server.stop()


def test_item4_shutdown_on_a_full_disk_tries_once_more(tmp_path):
    # the `write_dir` seam is the pipeline thread's; render workers meet a real full disk in test_full_disk_tmpfs
    server = _server(tmp_path, datadir=DataDirConfig(workers=0, render="all"))
    store = server.store
    real, full = store.write_dir, {"on": True}
    store.write_dir = lambda dest, files, **kw: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")) if full[
        "on"] else real(dest, files, **kw)
    assert _post(server, to_request(genai_session(tid(1))).SerializeToString())[0] == 200
    _wait(lambda: store.deferred == 1)
    full["on"] = False
    server.stop()
    assert tid(1) in {e["key"] for e in read_index(server.config.data_dir).entries}


def test_item7_serve_starts_on_a_damaged_data_dir(tmp_path):
    data = tmp_path / "data"
    (data / "sessions" / "stray").mkdir(parents=True)
    (data / "sessions" / "stray" / "incident.wtin.json").write_text("[1,2]")
    (data / "sessions.ndjsonl").write_text(json.dumps({"v": 1, "key": "k", "slug": "s", "revision": "x"}) + "\n")
    server = _server(tmp_path)
    try:
        assert _post(server, to_request(genai_session(tid(1))).SerializeToString())[0] == 200
        _wait(lambda: tid(1) in _keys(server))
    finally:
        server.stop()
    notes = "\n".join(server.recovery)
    assert "revision 'x'" in notes and "sessions/stray" in notes


def test_item7_cli_reports_and_starts(tmp_path):
    """The exact reproduction: `wt-otel serve` on the damaged dir must not end in a traceback."""
    import subprocess
    import sys

    data = tmp_path / "D"
    (data / "sessions" / "stray").mkdir(parents=True)
    (data / "sessions" / "stray" / "incident.wtin.json").write_text("[1,2]\n")
    proc = subprocess.Popen([sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "127.0.0.1:0",
                             "--http-endpoint", "127.0.0.1:0", "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "OTLP/HTTP listening" in line or len(lines) > 50:
                break
        assert any("OTLP/HTTP listening" in line for line in lines), "".join(lines)
        assert "Traceback" not in "".join(lines)
    finally:
        proc.terminate()
        proc.communicate(timeout=90)  # drains the pipe too: a full pipe would stall serve's shutdown logging


def test_started_on_a_full_disk_healthz_is_degraded_from_the_start(tmp_path, monkeypatch):
    """Issue 31: started on a full disk, /healthz said ok until an export failed (the tmpfs test does it for real)."""
    real = os.writev

    def full(fd, buffers):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "writev", full)  # the segment log's seam takes it at start (in this process)
    server = _server(tmp_path, processes={"receivers": 0})
    try:
        code, health = _get(server, "/healthz")
        assert code == 503 and "No space left" in json.loads(health)["reasons"]["segment log"]
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            check = grpc_health_pb2_grpc.HealthStub(channel).Check(grpc_health_pb2.HealthCheckRequest(), timeout=10)
        assert check.status == grpc_health_pb2.HealthCheckResponse.NOT_SERVING
        assert server.segments is not None
        server.segments.writev = real  # space returns: the next tick's probe says so
        _wait(lambda: _get(server, "/healthz")[0] == 200)
        assert _post(server, to_request(genai_session(tid(1))).SerializeToString())[0] == 200
    finally:
        server.stop()
