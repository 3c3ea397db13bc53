"""Acknowledged means durable (issue 15, item 1), against a real `wt-otel serve` subprocess.

- kill -9 in the middle of acknowledged ingest from the SDK's real OTLP/gRPC exporter, restart on the same
  data dir: every span the exporter was told was accepted is in a written session;
- SIGTERM with 10,000 open sessions: serve exits (0) within docker's 10 s grace, every session written or
  left in the segment log past the checkpoint for the next start.
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
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.hostile import genai_session, tid
from tests.support.kept import render_kept
from tests.support.livehelpers import run_agent
from wt_otel.exporters.datadir import read_index
from wt_otel.ingest.otlp import spans_from_request
from wt_otel.ingest.otlp_encode import traces_request
from wt_otel.serve.segments import past_checkpoint


class Serve:
    """`wt-otel serve` on free loopback ports; its log read by a thread."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint",
             "127.0.0.1:0", "--data-dir", str(data_dir), "--quiet", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.grpc = self.http = None
        deadline = time.monotonic() + 30
        while self.grpc is None or self.http is None:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if m := re.search(r"OTLP/gRPC listening on (\S+)", line):
                self.grpc = m.group(1)
            if m := re.search(r"OTLP/HTTP listening on (http://\S+)", line):
                self.http = m.group(1)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line)


def written_traces(data_dir: Path) -> set[str]:
    return {t for e in read_index(data_dir).entries for t in e.get("trace_ids") or ()}


def llm_span_ids(data_dir: Path) -> set[str]:
    out: set[str] = set()
    for e in read_index(data_dir).latest().values():
        env = json.loads((data_dir / e["path"] / "incident.wtin.json").read_text(encoding="utf-8"))
        out |= set(env["provenance"]["llm_span_ids"])
    return out


@pytest.mark.parametrize("incidents", [True, False], ids=["decoded", "by-reference"])
def test_kill_9_mid_ingest_loses_no_acknowledged_span(tmp_path: Path, incidents: bool) -> None:
    """Flagged sessions are decoded and rendered; unflagged ones (serve's default render: flagged) are kept by
    reference into the segment log and rendered here, after the restart, as a user would."""
    serve = Serve(tmp_path, "--session-idle-timeout", "1")
    exporter = OTLPSpanExporter(endpoint=serve.grpc, insecure=True, timeout=3)
    seen = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "durable-test"}))
    provider.add_span_processor(SimpleSpanProcessor(seen))
    tracer = provider.get_tracer("t")
    acknowledged: list = []  # the spans of every export the exporter reported SUCCESS for
    failed = threading.Event()

    def send() -> None:
        for i in range(10_000):
            seen.clear()
            run_agent(tracer, incident=f"INC-{i}" if incidents else None)
            spans = seen.get_finished_spans()
            if exporter.export(spans) is not SpanExportResult.SUCCESS:
                failed.set()
                return
            acknowledged.extend(spans)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    deadline = time.monotonic() + 60
    while len(acknowledged) < 40 * 5 or not (tmp_path / "sessions.ndjsonl").exists():
        assert time.monotonic() < deadline and not failed.is_set(), serve.out[-20:]
        time.sleep(0.01)
    os.kill(serve.proc.pid, signal.SIGKILL)  # mid-stream: exports in flight, sessions open and being written
    serve.proc.wait(timeout=10)
    sender.join(timeout=30)
    assert failed.is_set()  # the export after the kill was not acknowledged
    exporter.shutdown()
    provider.shutdown()
    acked_traces = {format(s.context.trace_id, "032x") for s in acknowledged if s.name != "GET /health"}
    acked_chats = {format(s.context.span_id, "016x") for s in acknowledged if s.name.startswith("chat")}
    lost_before = acked_traces - written_traces(tmp_path)
    assert lost_before, "every session was written before the kill: nothing tested"

    again = Serve(tmp_path, "--session-idle-timeout", "0.2")
    try:
        deadline = time.monotonic() + 120
        while not acked_traces <= written_traces(tmp_path):
            assert time.monotonic() < deadline, (len(acked_traces - written_traces(tmp_path)), again.out[-20:])
            time.sleep(0.1)
    finally:
        again.proc.send_signal(signal.SIGTERM)
        rc = again.proc.wait(timeout=30)
    assert rc == 0, again.out[-20:]
    if not incidents:
        render_kept(tmp_path)
    assert acked_chats <= llm_span_ids(tmp_path)  # every acknowledged span, not just its trace
    assert any("replayed" in line for line in again.out), again.out[:20]
    keys = [e["key"] for e in read_index(tmp_path).entries]
    assert not [k for k in keys if "~" in k], "a replayed session became a continuation of itself"


def _post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status


def test_sigterm_with_10k_open_sessions_exits_in_time_and_loses_nothing(tmp_path: Path) -> None:
    """Nothing lost = every session is written, or in the segment log past the checkpoint (what the next start
    replays and completes: tests/unit/serve/test_segments.py shows that part; 10,000 session writes would take
    minutes on a shared 2-core machine)."""
    serve = Serve(tmp_path, "--session-idle-timeout", "600")  # nothing completes by time
    traces = [tid(n) for n in range(10_000)]
    for i in range(0, len(traces), 500):  # each session: one chat span (no root: it stays open)
        spans = [genai_session(t)[0] for t in traces[i:i + 500]]
        assert _post(serve.http, traces_request(spans).SerializeToString()) == 200
    serve.proc.send_signal(signal.SIGTERM)
    rc = serve.proc.wait(timeout=10)  # docker's default grace; the assertion is the exit, not a duration
    assert rc == 0, serve.out[-20:]
    written = written_traces(tmp_path)
    pending = {s.trace_id for _, _, data in past_checkpoint(tmp_path)
               for s in spans_from_request(ExportTraceServiceRequest.FromString(data))}
    assert written | pending == set(traces)
    if pending - written:  # what the shutdown deadline left is said in the log
        assert any("left in the segment log" in line for line in serve.out), serve.out[-20:]
    keys = [e["key"] for e in read_index(tmp_path).entries]
    assert len(keys) == len(set(keys))
