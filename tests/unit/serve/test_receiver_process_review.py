"""Review of the receiver process split (issue 32): what the split could lose or hang on, with real processes.

`Server` runs the session core in this process and starts `wt_otel.serve.receiver_process`; requests go over real
OTLP/HTTP. Where a test needs the session core slow or a disk read to fail, it patches this process only (the
session core's side), never the receiver process.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from tests.support.hostile import genai_session, tid, to_otlp_json, to_request
from tests.support.importdump import logs_request
from tests.support.livehelpers import http_span, log_event
from tests.support.receivers import post_traces as _post
from tests.unit.serve.test_receiver_process import _config, _wait, _written
from wt_otel.model.spans import LogRecord
from wt_otel.processors.genai_filter import GenAIFilter
from wt_otel.serve import feed
from wt_otel.serve.config import DataDirConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.receiver_process import REPLAY_IN_FLIGHT, RemotePipeline
from wt_otel.serve.segments import SegmentLog
from wt_otel.serve.server import Server


def test_a_replay_longer_than_the_start_timeout_still_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up replay runs before the receivers listen and takes as long as the log past the checkpoint: a
    deadline on the whole start killed every restart of a long backlog (no checkpoint moves meanwhile, so the next
    start replayed it all again). Only silence fails the start."""
    data = tmp_path / "data"
    log = SegmentLog(data)
    entries = REPLAY_IN_FLIGHT + 40  # the receiver process sends this many ahead, then waits for the session core
    tickets = [log.append("traces", to_request(genai_session(tid(100 + n))).SerializeToString())
               for n in range(entries)]
    log.wait(tickets[-1])
    log.close()  # every entry still pinned: all of them past the checkpoint

    consume = GenAIFilter.consume
    calls = []

    def slow(self, records, now):  # ~0.03 s an entry: the receiver process waits ~1.2 s to send the last 40
        calls.append(1)
        time.sleep(0.03 if len(calls) <= 40 else 0.001)
        consume(self, records, now)

    monkeypatch.setattr(GenAIFilter, "consume", slow)
    opened = feed.ReceiverProcess.open

    def open_then_short(self):  # the receiver process's own start (imports, repair) keeps the full timeout
        answer = opened(self)
        monkeypatch.setattr(feed, "START_TIMEOUT", 0.8)
        return answer

    monkeypatch.setattr(feed.ReceiverProcess, "open", open_then_short)
    server = Server(_config(data), quiet=True).start()
    try:
        assert server.failed is None
        _wait(lambda: {tid(100 + n) for n in range(entries)} <= _written(data))
    finally:
        server.stop()


def test_a_live_entry_that_cannot_be_read_back_stops_serve_and_the_restart_writes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An acknowledged entry the session core fails to read back (EIO) was skipped and counted consumed: the
    checkpoint passed it and the request was lost. It stays pinned now, serve fails (exit 1 from the CLI), and the
    next start replays it."""
    data = tmp_path / "data"
    read_entry = feed.read_entry
    failures = []

    def flaky(directory, pos):
        if not failures:
            failures.append(pos)
            raise ValueError("cannot read segments/x: Input/output error")
        return read_entry(directory, pos)

    monkeypatch.setattr(feed, "read_entry", flaky)
    config = _config(data, datadir=DataDirConfig(render="all"))  # every live entry is read back (no span refs)
    server = Server(config, quiet=True).start()
    try:
        assert _post(server.http_url, to_request(genai_session(tid(40))).SerializeToString()) == 200
        _wait(lambda: server.failed is not None, timeout=10)
        assert "cannot be read back" in server.failed and "Input/output error" in server.failed
    finally:
        server.stop()
    assert tid(40) not in _written(data)
    monkeypatch.setattr(feed, "read_entry", read_entry)
    again = Server(config, quiet=True).start()
    try:
        _wait(lambda: tid(40) in _written(data))
        assert again.failed is None
    finally:
        again.stop()


def _post_to(url: str, path: str, body: bytes, content_type: str) -> int:
    req = urllib.request.Request(url + path, data=body, headers={"Content-Type": content_type})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def test_a_span_of_a_trace_a_log_record_made_genai_is_kept_while_the_session_core_lags(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GenAI log event makes its trace GenAI at once for the receivers (`note_decoded`); the session core read the
    next entry (an OTLP/JSON span of that trace, not GenAI itself) and screened it before its pipeline consumed the
    log entry, so it dropped a span the receivers acknowledged and one process kept."""
    trace = tid(50)
    consume = GenAIFilter.consume
    reached: list[str] = []

    def busy(self, records, now):  # a session core busy with the log entry while the feed reads on
        if any(isinstance(r, LogRecord) for r in records):
            time.sleep(0.5)
        reached.extend(r.trace_id for r in records if not isinstance(r, LogRecord))
        consume(self, records, now)

    monkeypatch.setattr(GenAIFilter, "consume", busy)
    server = Server(_config(tmp_path / "data"), quiet=True).start()
    try:
        span = http_span(trace)
        logs = logs_request([log_event(trace, span.span_id)]).SerializeToString()
        assert _post_to(server.http_url, "/v1/logs", logs, "application/x-protobuf") == 200
        assert _post_to(server.http_url, "/v1/traces", json.dumps(to_otlp_json([span])).encode(),
                        "application/json") == 200
        _wait(lambda: trace in reached, timeout=5)
    finally:
        server.stop()


def test_a_bug_in_the_feed_stops_serve_instead_of_hanging_it_and_the_restart_writes_the_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The feed thread died on any error but EOF: nothing was consumed any more, the receivers refused every export
    (their queue never drained) and serve never exited. Now serve fails (exit 1) and the next start replays."""
    data = tmp_path / "data"
    entry_records = feed.entry_records

    def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(feed, "entry_records", broken)
    config = _config(data, datadir=DataDirConfig(render="all"))
    server = Server(config, quiet=True).start()
    try:
        # fsynced before it reaches the feed; the kill may beat the 200 out (the client then retries)
        with contextlib.suppress(ConnectionError, http.client.HTTPException):
            assert _post(server.http_url, to_request(genai_session(tid(60))).SerializeToString()) == 200
        _wait(lambda: server.failed is not None, timeout=10)
        assert "RuntimeError: a bug" in server.failed
    finally:
        server.stop()
    monkeypatch.setattr(feed, "entry_records", entry_records)
    again = Server(config, quiet=True).start()
    try:
        _wait(lambda: tid(60) in _written(data))
    finally:
        again.stop()


def test_entries_reach_the_session_core_in_the_order_they_are_numbered(tmp_path: Path) -> None:
    """Two receiver threads: the one numbered first was sent second, the session core consumed the first to
    arrive and said so (`consumed`: that seq), and both were released: the checkpoint passed an entry nothing had
    consumed (lost on a kill -9)."""
    here, there = socket.socketpair()
    segments = SegmentLog(tmp_path / "data")
    remote = RemotePipeline(_config(tmp_path / "data"), Connection(here.detach()), segments, Metrics(), None)
    core = Connection(there.detach())
    send, sends = remote.send, []

    def preempted(message: tuple) -> None:  # the first sender is descheduled between numbering its entry and sending
        sends.append(message)
        if len(sends) == 1:
            time.sleep(0.3)
        send(message)

    remote.send = preempted  # type: ignore[method-assign]
    tickets = [segments.append("traces", to_request(genai_session(tid(70 + n))).SerializeToString()) for n in (0, 1)]
    segments.wait(tickets[-1])
    first = threading.Thread(target=remote.put, args=([], tickets[0].pos))
    first.start()
    time.sleep(0.1)  # numbered, not sent yet
    second = threading.Thread(target=remote.put, args=([], tickets[1].pos))
    second.start()
    _, seq, pos = core.recv()  # the session core takes the first to arrive, and reports it consumed
    remote.on_status(seq, -1, 0.0, 0, 0.0, {})
    first.join()
    second.join()
    other = ({t.pos for t in tickets} - {pos}).pop()
    assert segments.checkpoint(remote.needed) <= other, "an entry the session core never consumed was released"
    segments.close()
