"""The span index on serve's receive path writes the same sessions as decoding everything (issue 15 item 3).

Every producer fixture's dump (traces and logs, in file order) plus a few requests that only the receive-time
screen decides differently from a full decode (a non-GenAI span before and after its trace is known, an
unrelated HTTP trace, a request mixing kept and dropped spans, an invalid id) go to a real `wt-otel serve`
over OTLP/HTTP protobuf: once with WT_OTEL_SPANINDEX=off (every request decoded in full, as before the
index), once with the pure-Python index, once with the native one. The data dirs must be identical, and so
must the GenAI filter's drop count; what differs is where the drops happen.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.support.otlp_pb import exports, producer_dumps
from tests.support.spanindex import native_or_skip
from wt_otel.exporters.datadir import read_index
from wt_otel.ingest import spanindex

# nothing completes before the SIGTERM flush; every session rendered, so the decoded sessions compare
CONFIG = "assembler:\n  idle_timeout: 600\n  grace: 600\ndatadir:\n  render: all\n"


def _span(trace: bytes, n: int, name: str, **attrs: str) -> Span:
    return Span(trace_id=trace, span_id=n.to_bytes(8, "big"), name=name, start_time_unix_nano=n,
                end_time_unix_nano=n + 1,
                attributes=[KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()])


def _request(*spans: Span) -> bytes:
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])]
                                     ).SerializeToString()


def traffic() -> list[tuple[str, bytes]]:
    """The fixtures' exports, then the requests the screen decides on its own."""
    out = [e for dump in producer_dumps() for e in exports(dump)]
    known = next(spanindex.scan_python(body)[0].trace_id for s, body in out if s == "traces")
    t_known, t3, t4, t5, t6 = bytes.fromhex(known), *(bytes([n]) * 16 for n in (3, 4, 5, 6))
    out += [
        ("traces", _request(_span(t6, 1, "GET /health", **{"http.request.method": "GET"}))),  # dropped
        ("traces", _request(_span(t_known, 99, "SELECT orders", **{"db.system": "postgresql"}))),  # kept: known
        ("traces", _request(_span(t3, 1, "SELECT early", **{"db.system": "postgresql"}))),  # dropped: not yet known
        ("traces", _request(_span(t3, 2, "chat gpt-x", **{"gen_ai.operation.name": "chat"}))),
        ("traces", _request(_span(t3, 3, "SELECT late", **{"db.system": "postgresql"}))),  # kept
        ("traces", _request(_span(t4, 1, "POST /x"), _span(t5, 2, "POST /y"),  # t4's two kept, t5's dropped
                            _span(t4, 3, "execute_tool lookup", **{"gen_ai.tool.name": "lookup"}))),
        ("traces", _request(_span(b"\0" * 16, 1, "chat zero"), _span(t4, 4, "chat ok"))),  # partial success
    ]
    return out


class Serve:
    def __init__(self, data_dir: Path, mode: str) -> None:
        config = data_dir.parent / f"{mode}.yaml"
        config.write_text(CONFIG)
        env = {**os.environ, spanindex.ENV_VAR: mode}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wt_otel.cli", "serve", "--config", str(config), "--grpc-endpoint", "none",
             "--http-endpoint", "127.0.0.1:0", "--data-dir", str(data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert self.proc.stdout is not None
        self.log: list[str] = []
        self.conn: http.client.HTTPConnection | None = None
        for line in self.proc.stdout:
            self.log.append(line)
            if m := re.search(r"OTLP/HTTP listening on (http://\S+)", line):
                self.url = m.group(1)
                break
        else:
            pytest.fail("serve did not start:\n" + "".join(self.log))

    def post(self, signal_: str, body: bytes) -> int:
        """One keep-alive connection for the whole run (one request at a time: the order is the test's)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(urlsplit(self.url).netloc, timeout=10)
        self.conn.request("POST", f"/v1/{signal_}", body=body, headers={"Content-Type": "application/x-protobuf"})
        response = self.conn.getresponse()
        response.read()
        return response.status

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {k: float(v) for k, v in re.findall(r"^(\S+) (\S+)$", text, re.M)}

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, "".join(self.log) + out
        return "".join(self.log) + out


def run(tmp_path: Path, mode: str) -> tuple[Path, dict[str, float], str]:
    data = tmp_path / mode
    serve = Serve(data, mode)
    try:
        statuses = {serve.post(signal_, body) for signal_, body in traffic()}
        assert statuses == {200}
        deadline = time.monotonic() + 30
        while (metrics := serve.metrics()).get("wt_otel_queue_depth", 0) > 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # with a receiver process, each side's counters reach the other's /metrics every 0.1 s: read until
        # two reads agree
        while (again := (time.sleep(0.25), serve.metrics())[1]) != metrics:
            assert time.monotonic() < deadline
            metrics = again
    finally:
        log = serve.stop()
    return data, metrics, log


def snapshot(data: Path) -> dict[str, object]:
    """Everything written, minus the write times and the segment-log positions (with the index on, the
    screened-out spans are not stored, so the same records sit at other offsets of the log)."""
    files = {str(p.relative_to(data)): p.read_bytes() for p in sorted((data / "sessions").rglob("*")) if p.is_file()}
    index = [{k: v for k, v in e.items() if k not in ("written_at", "segment_pos")} for e in read_index(data).entries]
    return {"files": files, "index": index}


def test_serve_writes_the_same_sessions_with_and_without_the_span_index(tmp_path):
    modes = ["off", "python"]
    if spanindex.native_available() or os.environ.get("WT_OTEL_REQUIRE_NATIVE") == "1":
        native_or_skip()
        modes.append("native")
    runs = {mode: run(tmp_path, mode) for mode in modes}
    before = snapshot(runs["off"][0])
    assert len(before["index"]) >= 30, "the fixtures should make dozens of sessions"
    dropped = 'wt_otel_records_dropped_total{reason="not_genai"}'
    for mode in modes:
        data, metrics, log = runs[mode]
        assert metrics[f'wt_otel_span_index_info{{implementation="{mode}"}}'] == 1
        assert f"span index: {'native' if mode == 'native' else 'off' if mode == 'off' else 'pure Python'}" in log
        # the same spans dropped as not GenAI (at least: the health check, the early SELECT, t5's POST)
        assert metrics[dropped] == runs["off"][1][dropped] >= 3, mode
        assert metrics["wt_otel_spans_received_total"] == runs["off"][1]["wt_otel_spans_received_total"]
        assert metrics['wt_otel_records_rejected_total{reason="invalid_id"}'] == 1
        if mode != "off":
            assert snapshot(data) == before, mode
            # the screen dropped them before the queue: that many fewer records accepted than when decoded
            accepted = "wt_otel_records_accepted_total"
            assert metrics[accepted] == runs["off"][1][accepted] - metrics[dropped], mode
