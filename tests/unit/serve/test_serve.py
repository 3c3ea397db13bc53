"""`wt-otel serve` as a subprocess: SIGTERM writes every acknowledged session; kill -9 leaves a consistent data dir."""

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
import urllib.error
import urllib.request
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.livehelpers import run_agent
from wt_otel.exporters.datadir import read_index

FILES = ["IMPORTED.md", "fixture.universe.json", "incident.wtin.json", "llm.cassette.json", "scenario.yaml",
         "scorer.py"]


class Serve:
    """A `wt-otel serve` subprocess on free loopback ports, its stdout read by a thread."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint",
             "127.0.0.1:0", "--data-dir", str(data_dir), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.url = None
        deadline = time.monotonic() + 20
        while self.url is None:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            m = re.search(r"OTLP/HTTP listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line)

    def post(self, body: bytes) -> int:
        req = urllib.request.Request(self.url + "/v1/traces", data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def wait_written(self, n: int, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while sum(" wrote " in line for line in self.out) < n:
            assert time.monotonic() < deadline, self.out
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=30)
        return rc, self.proc.stderr.read()


def agent_requests(n: int, prefix: str = "INC") -> list[bytes]:
    """`n` agent runs made with the real SDK, one OTLP protobuf request each."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "serve-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    out = []
    for i in range(n):
        exporter.clear()
        run_agent(tracer, incident=f"{prefix}-{i}")
        out.append(encode_spans(exporter.get_finished_spans()).SerializeToString())
    provider.shutdown()
    return out


def check_consistent(data_dir: Path) -> list[dict]:
    """Only whole scenario dirs, no temp dirs, every dir indexed and every indexed slug present."""
    sessions = data_dir / "sessions"
    names = sorted(p.name for p in sessions.iterdir())
    assert not [n for n in names if n.startswith(".")], names
    for name in names:
        assert sorted(p.name for p in (sessions / name).iterdir()) == FILES, name
        for f in ("incident.wtin.json", "fixture.universe.json", "llm.cassette.json"):
            json.loads((sessions / name / f).read_text())
    index = read_index(data_dir)
    assert index.problems == [], index.problems
    assert {e["slug"] for e in index.entries} == set(names)
    return index.entries


def test_sigterm_writes_every_acknowledged_session(tmp_path):
    serve = Serve(tmp_path, "--session-idle-timeout", "60")  # nothing completes by time: SIGTERM must flush
    for body in agent_requests(3):
        assert serve.post(body) == 200
    rc, err = serve.stop(signal.SIGTERM)
    assert rc == 0, err
    entries = check_consistent(tmp_path)
    assert sorted(e["flag_ref"] for e in entries) == ["INC-0", "INC-1", "INC-2"]
    assert all(e["complete"] for e in entries)  # every trace's root had arrived
    assert sum(" wrote " in line for line in serve.out) == 3
    assert "protobuf backend:" in "".join(serve.out)


def test_kill_9_mid_stream_then_restart_leaves_a_consistent_data_dir(tmp_path):
    serve = Serve(tmp_path, "--session-idle-timeout", "0.2", "--quiet")
    bodies = agent_requests(60)
    stop = threading.Event()

    def send() -> None:
        for body in bodies:
            if stop.is_set():
                return
            try:
                serve.post(body)
            except OSError:
                return

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 15
    while not (tmp_path / "sessions.ndjsonl").exists() or len(read_index(tmp_path).entries) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(serve.proc.pid, signal.SIGKILL)  # mid-stream: requests in flight, sessions being written
    serve.proc.wait(timeout=10)
    stop.set()
    sender.join()
    before = read_index(tmp_path)  # a torn last line is reported, never fatal
    assert all("torn" in p or "no newline" in p for p in before.problems)

    again = Serve(tmp_path, "--session-idle-timeout", "0.2")  # restart: repairs what the kill left
    rc, err = again.stop(signal.SIGTERM)
    assert rc == 0, err
    entries = check_consistent(tmp_path)
    assert len(entries) >= len(before.entries) >= 3


def test_grpc_endpoint_none_runs_serve_with_http_only(tmp_path):
    """`--grpc-endpoint none` (issue 12: was `must be host:port`): no gRPC receiver, HTTP still works."""
    serve = Serve(tmp_path / "data", "--grpc-endpoint", "none")
    try:
        assert serve.post(agent_requests(1)[0]) == 200
        serve.wait_written(1)
    finally:
        rc, err = serve.stop()
    assert rc == 0, err
    assert not any("OTLP/gRPC" in line for line in serve.out)
