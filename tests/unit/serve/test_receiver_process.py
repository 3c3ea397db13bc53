"""serve's receivers in a process of their own (issue 32): the session core fed from the segment log.

Real processes throughout: `Server` and `wt-otel serve` start `wt_otel.serve.receiver_process`; requests go
over real OTLP/HTTP; kills are real SIGKILLs. What must hold in this layout: the receivers are not in the
session core's process, /metrics shows both processes' counters, the receivers refuse when the session core
is behind or degraded, and a kill of either process loses nothing that was acknowledged.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path

from tests.support.hostile import genai_session, tid, to_otlp_json, to_request
from tests.support.receivers import post_traces
from wt_otel.exporters.datadir import read_index
from wt_otel.model.spans import SpanRecord, SpanRefs
from wt_otel.serve.config import AssemblerConfig, DataDirConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import PipelineAdmission
from wt_otel.serve.receiver_process import RemotePipeline
from wt_otel.serve.segments import SegmentLog
from wt_otel.serve.server import Server


def _config(data_dir: Path, **kw) -> ServeConfig:
    return ServeConfig(data_dir=data_dir, receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                       assembler=AssemblerConfig(idle_timeout=0.3, grace=0.05), processes={"receivers": 1}, **kw)


def _metrics(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def _written(data_dir: Path) -> set[str]:
    return {t for e in read_index(data_dir).entries for t in e.get("trace_ids") or ()}


def _wait(predicate, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _receiver_pids(serve_pid: int) -> list[int]:
    """`serve_pid`'s live receiver processes."""
    return [c for c in _children(serve_pid) if _alive(c)
            and b"wt_otel.serve.receiver_process" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _receiver_pid(serve_pid: int) -> int:
    [pid] = _receiver_pids(serve_pid)
    return pid


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_the_receivers_run_apart_from_the_session_core_and_metrics_show_both(tmp_path: Path) -> None:
    server = Server(_config(tmp_path / "data"), quiet=True).start()
    try:
        assert server.feed is not None and server.feed.pid != os.getpid() and _alive(server.feed.pid)
        assert server.feed.pid in _receiver_pids(os.getpid())  # (other tests' Servers may run in this process)
        assert server.segments is None  # the log is the receiver process's; this one only reads it
        body = to_request(genai_session(tid(1)) + genai_session(tid(2))).SerializeToString()
        assert post_traces(server.http_url, body) == 200
        _wait(lambda: {tid(1), tid(2)} <= _written(tmp_path / "data"))
        # spans are counted where they are received, sessions where they are written: each side shows both
        _wait(lambda: server.metrics.get("wt_otel_spans_received_total") > 0)
        _wait(lambda: "wt_otel_sessions_written_total 2" in _metrics(server.http_url))

        def received() -> float:  # as the receiver process's /metrics says
            return float(re.search(r"^wt_otel_spans_received_total (\S+)$", _metrics(server.http_url), re.M).group(1))

        # the same count on both sides once the last snapshot crossed (every 0.1 s)
        _wait(lambda: received() == server.metrics.get("wt_otel_spans_received_total") == 8)
    finally:
        server.stop()
    assert not _alive(server.feed.pid)


def test_a_late_span_and_a_log_record_reach_the_session_through_the_receiver_process(tmp_path: Path) -> None:
    """A span of a written session arriving later revises it (the feed keeps the order of the log)."""
    server = Server(_config(tmp_path / "data", datadir=DataDirConfig(render="all")), quiet=True).start()
    try:
        first = genai_session(tid(3))
        assert post_traces(server.http_url, to_request(first[:-1]).SerializeToString()) == 200
        _wait(lambda: tid(3) in _written(tmp_path / "data"))
        assert post_traces(server.http_url, to_request(first[-1:]).SerializeToString()) == 200
        _wait(lambda: max(e.get("revision", 0) for e in read_index(tmp_path / "data").entries
                          if tid(3) in (e.get("trace_ids") or ())) >= 2)
    finally:
        server.stop()


def test_spans_the_session_core_screens_out_are_counted(tmp_path: Path) -> None:
    """OTLP/JSON is decoded by the receivers and screened again by the session core as it reads the entry back: a
    span of a trace with nothing GenAI is dropped there, and counted as the pipeline's filter would count it."""
    server = Server(_config(tmp_path / "data"), quiet=True).start()
    try:
        other = [SpanRecord(trace_id=tid(8), span_id="00000000000000a1", name="GET /health", start_ns=1, end_ns=2,
                            resource={"service.name": "web"})]
        body = json.dumps(to_otlp_json(genai_session(tid(9)) + other)).encode()
        req = urllib.request.Request(server.http_url + "/v1/traces", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        _wait(lambda: tid(9) in _written(tmp_path / "data"))
        _wait(lambda: server.metrics.get("wt_otel_records_dropped_total", reason="not_genai") == 1)
    finally:
        server.stop()
    assert tid(8) not in _written(tmp_path / "data")


def _remote(tmp_path: Path, **queue) -> tuple[RemotePipeline, SegmentLog, Connection]:
    here, there = socket.socketpair()
    config = _config(tmp_path / "data", queue=queue) if queue else _config(tmp_path / "data")
    segments = SegmentLog(tmp_path / "data")
    remote = RemotePipeline(config, Connection(here.detach()), segments, Metrics(), None)
    return remote, segments, Connection(there.detach())


def test_the_receivers_refuse_while_the_session_core_is_behind_or_degraded(tmp_path: Path) -> None:
    remote, segments, core = _remote(tmp_path, max_backlog_seconds=1.0)
    assert remote.precheck(1000, "a")[0] is PipelineAdmission.ACCEPTED
    remote.on_status(0, -1, 5.0, 0, 0.0, {})  # its writer is 5 s behind
    verdict, reason = remote.precheck(1000, "a")
    assert verdict is PipelineAdmission.FULL and "behind" in reason
    remote.on_status(0, -1, 0.0, 0, 0.0, {"data dir": "No space left on device"})
    verdict, reason = remote.precheck(1000, "a")
    assert verdict is PipelineAdmission.UNAVAILABLE and "No space left" in reason
    remote.on_status(0, -1, 0.0, 0, 0.0, {})  # space returned: the receivers accept again
    assert remote.precheck(1000, "a")[0] is PipelineAdmission.ACCEPTED
    segments.close(-1)


def test_a_full_queue_is_refused_before_the_request_is_walked(tmp_path: Path) -> None:
    """What is sent and not consumed is the receivers' queue: full, the next request is refused by the gate that
    runs before decoding (a refusal after the walk spent the cores the session core needed at overload)."""
    remote, segments, core = _remote(tmp_path, max_queued_records=1000)
    assert remote.put([SpanRefs(tid(7), None, 1, list(range(1000)))], 1)
    verdict, reason = remote.precheck(1000, "a")
    assert verdict is PipelineAdmission.FULL and "queue is full" in reason
    _, seq, _, _ = core.recv()
    remote.on_status(seq, -1, 0.0, 0, 0.0, {})  # consumed: room again
    assert remote.precheck(1000, "a")[0] is PipelineAdmission.ACCEPTED
    segments.close(-1)


def test_an_entry_stays_pinned_until_the_session_core_consumed_it(tmp_path: Path) -> None:
    """The checkpoint never passes an entry the session core has not taken, nor one it says it still needs."""
    remote, segments, core = _remote(tmp_path)
    body = to_request(genai_session(tid(4))).SerializeToString()
    ticket = segments.append("traces", body)
    segments.wait(ticket)
    assert remote.put([], ticket.pos)
    kind, seq, pos = core.recv()
    assert (kind, pos) == ("entry", ticket.pos)
    assert segments.checkpoint(-1) <= ticket.pos  # sent, not consumed: pinned
    remote.on_status(seq, ticket.pos, 0.0, 0, 0.0, {})  # consumed, and an open session still holds it
    assert segments.checkpoint(remote.needed) == ticket.pos
    remote.on_status(seq, -1, 0.0, 0, 0.0, {})  # written: nothing holds it any more
    assert segments.checkpoint(remote.needed) > ticket.pos
    segments.close(-1)


class _Serve:
    def __init__(self, data_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "none", "--http-endpoint", "127.0.0.1:0",
             "--data-dir", str(data_dir), "--session-idle-timeout", "0.5"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if m := re.search(r"OTLP/HTTP listening on (http://\S+)", line):
                self.url = m.group(1)
                return
        raise AssertionError("serve did not start:\n" + "".join(self.lines))

    def rest(self, timeout: float = 30) -> str:
        out, _ = self.proc.communicate(timeout=timeout)
        return "".join(self.lines) + out


def _restart_writes(data: Path, trace_id: str) -> None:
    """A new `wt-otel serve` on `data` writes `trace_id`'s session (replayed from the log), then stops cleanly."""
    again = _Serve(data)
    try:
        _wait(lambda: trace_id in _written(data))
    finally:
        again.proc.send_signal(signal.SIGTERM)
        again.rest()
    assert again.proc.returncode == 0


def test_a_receiver_process_killed_stops_serve_with_exit_1_and_the_next_start_writes_what_it_acked(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = _Serve(data)
    try:
        assert post_traces(serve.url, to_request(genai_session(tid(5))).SerializeToString()) == 200
        os.kill(_receiver_pid(serve.proc.pid), signal.SIGKILL)
        out = serve.rest()
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert serve.proc.returncode == 1
    assert "receiver process exited unexpectedly" in out and "Traceback" not in out
    _restart_writes(data, tid(5))


def test_serve_killed_takes_its_receiver_process_down_and_loses_nothing_acked(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = _Serve(data)
    receiver = _receiver_pid(serve.proc.pid)
    assert post_traces(serve.url, to_request(genai_session(tid(6))).SerializeToString()) == 200
    serve.proc.kill()
    serve.rest()
    _wait(lambda: not _alive(receiver), timeout=10)  # no orphan left holding the port or the log
    _restart_writes(data, tid(6))
