"""serve's durable segment log (issue 15, item 1): acknowledged means fsynced, replayed after a restart.

In process, on real OTLP/HTTP requests (protobuf and JSON, traces and logs); the kill -9 of a real
`wt-otel serve` subprocess is in tests/e2e/test_durable_ingest.py."""

from __future__ import annotations

import errno
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.hostile import genai_session, span_ids, tid, to_otlp_json
from tests.support.livehelpers import log_event
from wt_otel.exporters.datadir import read_index
from wt_otel.ingest.dumps import read_dump
from wt_otel.ingest.otlp_encode import logs_request, traces_request
from wt_otel.model.spans import SpanRecord, SpanRefs
from wt_otel.serve.config import AssemblerConfig, DurabilityConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.segments import (
    CHECKPOINT,
    HEADER_FRAME,
    SEGMENTS,
    TRAILER,
    SegmentFull,
    SegmentLog,
    SegmentUnavailable,
    SpanReader,
    Ticket,
    spans_of,
    split,
)
from wt_otel.serve.server import Server


def config(data_dir: Path, idle: float = 60.0, late_window: float = 300.0, receiver_processes: int | str = "auto",
           **durability) -> ServeConfig:
    """render: all: these are the decoded sessions' durability; test_by_reference.py has the kept ones'.
    `receiver_processes=0` where a test injects faults into the segment log (`server.segments`'s seams)
    in this process."""
    return ServeConfig(data_dir=data_dir, receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                       assembler=AssemblerConfig(idle_timeout=idle, grace=idle, late_window=late_window),
                       datadir={"render": "all"}, processes={"receivers": receiver_processes},
                       durability=DurabilityConfig(**durability))


def post(server: Server, body: bytes, path: str = "/v1/traces",
         content_type: str = "application/x-protobuf") -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(f"{server.http_url}{path}", data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def session(n: int) -> bytes:
    return traces_request(genai_session(tid(n))).SerializeToString()


def written(data_dir: Path) -> dict[str, dict]:
    return read_index(data_dir).latest()


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def crash(server: Server) -> None:
    """Leave the data dir as a kill -9 would as far as the log goes: no final checkpoint, no shutdown flush.
    (The receivers stop and the store's lock is released so a second Server can open the dir in-process; a
    receiver process is killed, as it exits when serve dies, with no last checkpoint.)"""
    server.receivers.stop(grace=0)
    if server.feed is not None:
        server.feed._kill()  # noqa: SLF001
    pipeline = server.pipeline
    assert pipeline is not None and server.stages is not None
    pipeline._closed = True  # noqa: SLF001 - nothing more is consumed, flushed or checkpointed
    pipeline._queue.put(None)  # noqa: SLF001
    pipeline._worker.join()  # noqa: SLF001
    server.stages.store._lockfile.close()  # noqa: SLF001


def segment_files(data_dir: Path, signal: str = "traces") -> list[Path]:
    return sorted((data_dir / SEGMENTS).glob(f"*.{signal}.pb"))


def test_an_acknowledged_request_is_in_a_segment_that_import_reads(tmp_path: Path) -> None:
    server = Server(config(tmp_path), quiet=True).start()
    try:
        assert post(server, session(1))[0] == 200
        spans = genai_session(tid(2))
        json_body = json.dumps(to_otlp_json(spans)).encode()
        assert post(server, json_body, content_type="application/json")[0] == 200
        logs = [log_event(tid(1), span_ids(tid(1))[1])]
        assert post(server, logs_request(logs).SerializeToString(), "/v1/logs")[0] == 200
        # acknowledged = already on disk, before any session is written
        assert written(tmp_path) == {}
        [traces] = segment_files(tmp_path)
        [logfile] = segment_files(tmp_path, "logs")
        read = list(read_dump(traces))
        assert {r.trace_id for r in read} == {tid(1), tid(2)}
        assert {r.span_id for r in read if r.trace_id == tid(2)} == {s.span_id for s in spans}
        assert [r.event_name for r in read_dump(logfile)] == ["gen_ai.user.message"]
        # the OTLP/JSON request was stored as protobuf: one format in the log
        frames = traces.read_bytes()
        assert frames.startswith(HEADER_FRAME)  # format 2: a header frame (an empty request to any reader) first
        n = int.from_bytes(frames[len(HEADER_FRAME):len(HEADER_FRAME) + 4], "big")
        second = frames[len(HEADER_FRAME) + 4 + n:]
        request = ExportTraceServiceRequest.FromString(second[4:4 + int.from_bytes(second[:4], "big")])
        assert {s.span_id.hex() for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans} == \
            {s.span_id for s in spans}
    finally:
        server.stop()
    assert set(written(tmp_path)) == {tid(1), tid(2)}


def test_a_crash_is_replayed_at_start_and_every_acknowledged_session_written(tmp_path: Path) -> None:
    first = Server(config(tmp_path), quiet=True).start()
    for n in range(4):
        assert post(first, session(n))[0] == 200
    json_body = json.dumps(to_otlp_json(genai_session(tid(4)))).encode()  # OTLP/HTTP JSON is durable too
    assert post(first, json_body, content_type="application/json")[0] == 200
    logs = [log_event(tid(0), span_ids(tid(0))[1], body={"content": "weather in Oslo?"})]
    assert post(first, logs_request(logs).SerializeToString(), "/v1/logs")[0] == 200
    crash(first)
    assert written(tmp_path) == {}

    again = Server(config(tmp_path, idle=0.2), quiet=True).start()
    try:
        assert any("replayed 6 request(s)" in note for note in again.recovery), again.recovery
        wait_for(lambda: len(written(tmp_path)) == 5)
    finally:
        again.stop()
    assert set(written(tmp_path)) == {tid(n) for n in range(5)}
    assert again.metrics.get("wt_otel_segment_replayed_requests_total") == 6


def test_a_torn_segment_tail_is_cut_counted_and_reported(tmp_path: Path) -> None:
    first = Server(config(tmp_path), quiet=True).start()
    assert post(first, session(1))[0] == 200
    crash(first)
    [path] = segment_files(tmp_path)
    whole = path.stat().st_size
    with open(path, "ab") as f:  # killed in the middle of the next append: a length prefix and half a message
        f.write(len(session(2)).to_bytes(4, "big") + session(2)[:40])

    again = Server(config(tmp_path, idle=0.2), quiet=True).start()
    try:
        assert any("torn last frame" in note and "44 bytes" in note for note in again.recovery), again.recovery
        assert path.stat().st_size == whole
        assert again.metrics.get("wt_otel_segment_torn_tails_total") == 1
        wait_for(lambda: set(written(tmp_path)) == {tid(1)})
    finally:
        again.stop()


@pytest.mark.parametrize("tail", [b"", b"\x00", b"\x00\x00\x01", b"\x00\x00\x00\x09half", b"\xff\xff\xff\xffjunk",
                                  b"\x00\x00\x00\x00"])
def test_the_tail_repair_reads_headers_only_and_finds_what_the_reader_finds(tmp_path: Path, tail: bytes) -> None:
    """Start-up finds each segment's last whole frame from the 4-byte headers (a start must not read every
    retained byte); it must agree with `_frames`, the walk replay and `sessions render` read with."""
    from wt_otel.serve.segments import _frames, _whole_end

    path = tmp_path / "000000000001.traces.pb"
    frames = [session(n) for n in range(3)] + [b""]  # an empty message is a whole frame too
    path.write_bytes(b"".join(len(f).to_bytes(4, "big") + f for f in frames) + tail)
    end = max((offset + 4 + len(data) for offset, data in _frames(path)), default=0)
    assert _whole_end(path) == (end, path.stat().st_size)
    assert end == path.stat().st_size - len(tail) + (4 if tail == b"\x00\x00\x00\x00" else 0)


def test_a_failed_append_is_refused_and_never_acknowledged(tmp_path: Path) -> None:
    server = Server(config(tmp_path, idle=0.2, receiver_processes=0), quiet=True).start()
    try:
        segments = server.segments

        def full(fd: int, buffers: list[bytes]) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        segments.writev = full
        status, headers = post(server, session(1))
        assert status == 503 and headers.get("Retry-After")
        assert server.pipeline.queued == 0
        assert all(p.stat().st_size == 0 for p in segment_files(tmp_path))
        assert post(server, session(2))[0] == 503  # refused before decoding until the log is writable again
        segments.writev = __import__("os").writev  # space returns: the next tick's probe finds it
        wait_for(lambda: post(server, session(2))[0] == 200)
        wait_for(lambda: tid(2) in written(tmp_path))
    finally:
        server.stop()
    assert set(written(tmp_path)) == {tid(2)}  # the refused request was not kept either
    assert server.metrics.get("wt_otel_segment_write_errors_total") == 1


def test_a_failed_fsync_refuses_the_requests_it_covered_and_cuts_them_off(tmp_path: Path) -> None:
    server = Server(config(tmp_path, receiver_processes=0), quiet=True).start()
    segments = server.segments
    assert post(server, session(1))[0] == 200
    [path] = segment_files(tmp_path)
    good = path.stat().st_size

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    segments.fsync = eio
    status, headers = post(server, session(2))
    assert status == 503 and headers.get("Retry-After")
    assert path.stat().st_size == good  # nothing unacknowledged left to replay
    segments.fsync = __import__("os").fsync
    crash(server)
    again = Server(config(tmp_path, idle=0.2), quiet=True).start()
    try:
        wait_for(lambda: tid(1) in written(tmp_path))
        time.sleep(0.3)
    finally:
        again.stop()
    assert set(written(tmp_path)) == {tid(1)}


def test_past_the_byte_cap_new_data_is_refused_with_retry_info(tmp_path: Path) -> None:
    body = session(1)
    # two frames (length, request, checksum) and the file's header frame, and a little room
    cap = 2 * (len(body) + 4 + TRAILER) + len(HEADER_FRAME) + 2
    server = Server(config(tmp_path, max_bytes=cap), quiet=True).start()
    try:
        assert post(server, body)[0] == 200
        assert post(server, session(2))[0] == 200
        status, headers = post(server, session(3))  # open sessions pin both: the cap is reached
        assert status == 429 and headers.get("Retry-After")
    finally:
        server.stop()
    assert set(written(tmp_path)) == {tid(1), tid(2)}
    assert server.metrics.get("wt_otel_records_rejected_total", reason="segment_log_full") == 4


def test_retention_deletes_only_generations_whose_sessions_are_written(tmp_path: Path) -> None:
    # one request per generation; late_window 0: a written session pins nothing
    server = Server(config(tmp_path, idle=0.3, late_window=0, segment_bytes=1), quiet=True).start()
    try:
        assert post(server, session(1))[0] == 200
        wait_for(lambda: tid(1) in written(tmp_path))
        server.stages.assembler.idle_timeout = server.stages.assembler.grace = 60
        assert post(server, session(2))[0] == 200  # stays open
        assert post(server, session(3))[0] == 200  # stays open; a third generation
        wait_for(lambda: len(segment_files(tmp_path)) == 2)
        checkpoint = json.loads((tmp_path / SEGMENTS / CHECKPOINT).read_text())
        kept = [split(checkpoint["position"])[0] <= int(p.name[:12]) for p in segment_files(tmp_path)]
        assert all(kept)
        remaining = {r.trace_id for p in segment_files(tmp_path) for r in read_dump(p)}
        assert remaining == {tid(2), tid(3)}  # the written one's generation went, the open ones' stayed
    finally:
        server.stop()
    assert server.metrics.get("wt_otel_segments_deleted_total") >= 1


def test_a_restart_does_not_write_a_written_session_again_and_late_spans_still_revise_it(tmp_path: Path) -> None:
    spans = genai_session(tid(1))
    early, late = spans[:2], spans[2:]  # the tool span and the second chat arrive after the first write
    first = Server(config(tmp_path, idle=0.3), quiet=True).start()
    try:
        assert post(first, traces_request(early).SerializeToString())[0] == 200
        wait_for(lambda: tid(1) in written(tmp_path))
    finally:
        first.stop()
    assert [e["revision"] for e in read_index(tmp_path).entries] == [1]

    again = Server(config(tmp_path, idle=0.3), quiet=True).start()  # the written session is replayed (late window)
    try:
        wait_for(lambda: again.metrics.get("wt_otel_sessions_unchanged_total") == 1)
        assert [e["revision"] for e in read_index(tmp_path).entries] == [1]  # not written twice
        assert post(again, traces_request(late).SerializeToString())[0] == 200
        wait_for(lambda: written(tmp_path)[tid(1)]["revision"] == 2)
    finally:
        again.stop()
    entries = read_index(tmp_path).entries
    assert [e["key"] for e in entries] == [tid(1), tid(1)]  # one session, revised: no continuation key
    envelope = json.loads((tmp_path / entries[-1]["path"] / "incident.wtin.json").read_text())
    assert set(envelope["provenance"]["llm_span_ids"]) == {s.span_id for s in spans if s.name.startswith("chat")}


def test_sigterm_leaves_what_the_deadline_did_not_write_for_the_next_start(tmp_path: Path) -> None:
    server = Server(config(tmp_path, shutdown_deadline=0), quiet=True).start()
    for n in range(3):
        assert post(server, session(n))[0] == 200
    server.stop()
    assert written(tmp_path) == {}  # a zero deadline writes nothing at shutdown...
    assert server.metrics.get("wt_otel_sessions_deferred_to_restart") == 3
    again = Server(config(tmp_path, idle=0.2), quiet=True).start()
    try:
        wait_for(lambda: len(written(tmp_path)) == 3)  # ...and loses nothing
    finally:
        again.stop()


def test_the_log_alone_pins_fsyncs_in_groups_and_deletes_below_the_checkpoint(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, commit_interval=0.05, segment_bytes=1)
    try:
        tickets = [log.append("traces", b"\x0a\x00") for _ in range(3)]  # three generations (segment_bytes=1)
        for t in tickets:
            log.wait(t)
        assert [split(t.pos)[0] for t in tickets] == [1, 2, 3]
        log.release(tickets[1].pos)
        log.release(tickets[2].pos)
        assert log.checkpoint(None) == tickets[0].pos  # the first is still pinned: nothing goes
        assert len(segment_files(tmp_path)) == 3
        log.release(tickets[0].pos)
        log.checkpoint(None)
        assert [p.name for p in segment_files(tmp_path)] == ["000000000003.traces.pb"]  # the open one stays
    finally:
        log.close()


def test_one_fsync_acknowledges_many_appends(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, commit_interval=0.2)
    try:
        log.wait(log.append("logs", b"\x0a\x00"))  # the first commit is at once; the next waits its interval
        many = [log.append("logs", b"\x0a\x00") for _ in range(20)]
        for t in many:
            log.wait(t)
        for t in [many[0], *many]:
            log.release(t.pos)
        assert log.metrics.get("wt_otel_segment_commit_entries_total") == 21
        assert log.metrics.get("wt_otel_segment_commit_batches_total") < 10
    finally:
        log.close()


def test_the_log_refuses_past_its_cap_and_after_close(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path, max_bytes=len(HEADER_FRAME) + 4 + 5 + TRAILER + 10)  # room for one frame, not two
    log.wait(log.append("traces", b"12345"))
    with pytest.raises(SegmentFull, match="max_bytes"):
        log.append("traces", b"12345")
    log.close()
    with pytest.raises(SegmentUnavailable, match="closed"):
        log.append("traces", b"1")


def test_the_core_reads_a_request_once_for_all_its_sessions_and_returns_what_spans_of_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building 50 sessions of one request one by one (log records, flags, content joins) read, checked and
    parsed the whole request 50 times; `SpanReader` keeps the last few parsed (entries never change)."""
    log = SegmentLog(tmp_path, commit_interval=0.01)
    try:
        sessions = [genai_session(tid(n)) for n in range(6)]
        tickets = [log.append("traces", traces_request([s for group in pair for s in group]).SerializeToString())
                   for pair in (sessions[:3], sessions[3:])]
        for t in tickets:
            log.wait(t)
    finally:
        log.close()
    refs = [SpanRefs(tid(n), None, tickets[n // 3].pos, [4 * (n % 3) + k for k in range(4)]) for n in range(6)]
    from wt_otel.serve import segments
    reads: list[int] = []
    real = segments.read_entry
    monkeypatch.setattr(segments, "read_entry", lambda d, pos: reads.append(pos) or real(d, pos))

    reader = SpanReader(tmp_path / SEGMENTS, entries=1)
    got = [reader([ref]) for ref in refs]  # one session at a time, as the assembler builds them
    assert reads == [tickets[0].pos, tickets[1].pos]  # each request read once while its sessions are built
    assert [[s.span_id for s in spans] for spans in got] == [[s.span_id for s in group] for group in sessions]
    assert got == [spans_of(tmp_path / SEGMENTS, [ref]) for ref in refs]
    reads.clear()
    assert spans_of(tmp_path / SEGMENTS, refs[:3]) == [s for spans in got[:3] for s in spans]
    assert reads == [tickets[0].pos]  # three refs into one request: read once for the call
    reads.clear()
    reader([refs[0]])  # past `entries`: the first request left the cache, so it is read again
    assert reads == [tickets[0].pos]
    with pytest.raises(ValueError, match="not span 99"):
        reader([SpanRefs(tid(0), None, tickets[0].pos, [99])])


def test_records_carry_no_position_outside_serve() -> None:
    assert SpanRecord(trace_id=tid(1), span_id="1" * 16, name="x").segment_pos == -1


def test_past_the_shutdown_deadline_logged_batches_stay_queued_in_the_log_not_drained() -> None:
    from wt_otel.serve.pipeline import Pipeline

    class Consumer:
        def __init__(self) -> None:
            self.got: list = []

        def consume(self, records, now) -> None:
            self.got.extend(records)

        def tick(self, now) -> None: ...

        def close(self) -> None: ...

    consumer, released = Consumer(), []
    pipeline = Pipeline(consumer)
    pipeline.on_consumed = released.append
    pipeline.drain_deadline = 0.0  # long past
    pipeline.start()
    span = SpanRecord(trace_id=tid(1), span_id="1" * 16, name="x")
    assert pipeline.put([span], 7)
    assert pipeline.offer([SpanRecord(trace_id=tid(2), span_id="2" * 16, name="y")]).value == "accepted"
    pipeline.stop()
    assert [r.trace_id for r in consumer.got] == [tid(2)]  # only in memory: drained; logged: left for the restart
    assert released == [] and pipeline.left_in_log == 1


def test_after_a_clean_stop_that_deleted_every_segment_new_appends_still_land_past_the_checkpoint(
        tmp_path: Path) -> None:
    first = Server(config(tmp_path, late_window=0), quiet=True).start()
    assert post(first, session(1))[0] == 200
    first.stop()  # written at shutdown; nothing pinned: every generation is deleted, the checkpoint moves on
    assert segment_files(tmp_path) == []
    second = Server(config(tmp_path), quiet=True).start()
    assert post(second, session(2))[0] == 200
    crash(second)
    third = Server(config(tmp_path, idle=0.2), quiet=True).start()
    try:
        wait_for(lambda: tid(2) in written(tmp_path))
    finally:
        third.stop()


def test_a_hung_fsync_holds_the_export_that_runs_it_and_the_others_are_refused_in_time(tmp_path: Path) -> None:
    """The first waiter runs the group commit; while its fsync hangs, the next waiter neither runs another
    on the same file nor waits forever: its timeout refuses it (never acknowledged). Once the fsync returns,
    the leader's request is durable and a new commit covers what was appended meanwhile."""
    log = SegmentLog(tmp_path, commit_interval=0)
    entered, go = threading.Event(), threading.Event()
    real = log.fsync

    def slow_fsync(fd: int) -> None:
        entered.set()
        go.wait(10)
        real(fd)

    log.fsync = slow_fsync
    try:
        first = log.append("traces", b"\x0a\x00")
        leader = threading.Thread(target=log.wait, args=(first,))
        leader.start()
        assert entered.wait(5)
        second = log.append("traces", b"\x0a\x00")
        with pytest.raises(SegmentUnavailable, match="fsync did not complete within 0.2s"):
            log.wait(second, timeout=0.2)
        go.set()
        leader.join(5)
        assert not leader.is_alive() and first.segment.committed >= first.end
        log.fsync = real
        log.wait(log.append("traces", b"\x0a\x00"))
        assert log.metrics.get("wt_otel_segment_commit_batches_total") == 2
    finally:
        go.set()
        log.close()


class _StuckDisk:
    """An fsync that blocks until `go` is set (a dead network disk), counting its calls."""

    def __init__(self, real) -> None:  # noqa: ANN001
        self.real, self.calls, self.since = real, 0, 0.0
        self.entered, self.go = threading.Event(), threading.Event()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.since = time.monotonic()
        self.entered.set()
        self.go.wait(30)
        self.real(fd)


def test_a_stalled_fsync_refuses_new_appends_at_once_and_clears_when_it_returns(tmp_path: Path) -> None:
    """Past `stall_timeout`, an fsync that has not returned makes the log unhealthy: appends are refused before
    they are written, waiters give up with the reason (never acknowledged) instead of their 30 s, and the tick's
    probe does not fsync (it would hang too). When the fsync returns, the log is healthy again by itself."""
    log = SegmentLog(tmp_path, commit_interval=0, stall_timeout=0.2)
    health: list[str | None] = []
    log.on_health = health.append
    disk = log.fsync = _StuckDisk(log.fsync)
    try:
        first = log.append("traces", b"\x0a\x00")
        leader = threading.Thread(target=log.wait, args=(first,))
        leader.start()
        assert disk.entered.wait(5)
        second = log.append("traces", b"\x0a\x00")  # within the stall timeout: appended, waits for a commit
        with pytest.raises(SegmentUnavailable, match="has not returned for 0.2s"):
            log.wait(second, timeout=30)  # gives up at the stall, not at its own timeout
        log.release(second.pos)
        with pytest.raises(SegmentUnavailable, match="stalled disk"):
            log.append("traces", b"\x0a\x00")
        assert log.metrics.get("wt_otel_segment_refusals_total", reason="fsync_stalled") == 1
        assert log.metrics.get("wt_otel_segment_fsync_stalled") == 1
        assert len(health) == 1 and "has not returned" in str(health[0])
        log.probe()
        log._born -= 3600  # noqa: SLF001 - the generation is old: a checkpoint would rotate it (and fsync)
        assert log.checkpoint(None) == log.checkpoint_position
        assert disk.calls == 1  # the probe and the checkpoint left the stalled disk alone

        disk.go.set()
        leader.join(10)
        assert not leader.is_alive() and first.segment.committed >= first.end  # the leader's request is durable
        assert health[-1] is None and log.failing is None and log.metrics.get("wt_otel_segment_fsync_stalled") == 0
        log.wait(log.append("traces", b"\x0a\x00"))
    finally:
        disk.go.set()
        log.close()


def test_a_rotation_whose_fsync_stalls_refuses_appends_instead_of_holding_them_on_the_lock(tmp_path: Path) -> None:
    """Closing a generation fsyncs its files. That fsync runs as a commit, with the log's lock let go: when the
    disk hangs there, other appends are refused once it counts as stalled (they used to wait on the lock for
    as long as the fsync hung, every receiver thread with them). When it returns, the rotation completes and
    the next generation takes the appends; what was appended before is durable."""
    log = SegmentLog(tmp_path, commit_interval=0, stall_timeout=0.2, segment_bytes=64)
    entry = b"\x0a\x00" * 20  # 44 bytes framed: the second one crosses segment_bytes
    try:
        log.wait(log.append("traces", entry))
        unsynced = log.append("traces", entry[:10])  # no wait: the rotation's fsync is the one to sync it
        disk = log.fsync = _StuckDisk(log.fsync)
        rotated: list[Ticket] = []
        rotating = threading.Thread(target=lambda: rotated.append(log.append("traces", entry)))
        rotating.start()
        assert disk.entered.wait(5)
        started = time.monotonic()
        with pytest.raises(SegmentUnavailable, match="has not returned for 0.2s"):
            log.append("traces", entry)
        assert time.monotonic() - started < 5  # refused at the stall, not when the disk comes back
        with pytest.raises(SegmentUnavailable, match="has not returned"):
            log.wait(unsynced, timeout=30)
        disk.go.set()
        rotating.join(10)
        assert not rotating.is_alive() and len(rotated) == 1
        assert unsynced.segment.closed and unsynced.segment.committed >= unsynced.end  # durable, whole
        assert split(rotated[0].pos)[0] == split(unsynced.pos)[0] + 1  # the next generation took it
        log.wait(rotated[0])
        assert log.failing is None
        log.wait(log.append("traces", entry))
    finally:
        if isinstance(log.fsync, _StuckDisk):
            log.fsync.go.set()
        log.close()


def test_a_stalled_fsync_at_a_failed_return_leaves_the_log_unhealthy(tmp_path: Path) -> None:
    """A stalled fsync that returns an error is a failed write, not a recovery: the log stays unhealthy."""
    log = SegmentLog(tmp_path, commit_interval=0, stall_timeout=0.1)
    health: list[str | None] = []
    log.on_health = health.append
    entered, go = threading.Event(), threading.Event()

    def stuck_then_eio(fd: int) -> None:
        entered.set()
        go.wait(30)
        raise OSError(errno.EIO, "Input/output error")

    log.fsync = stuck_then_eio
    try:
        first = log.append("traces", b"\x0a\x00")
        errors: list[BaseException] = []
        leader = threading.Thread(target=lambda: _catch(errors, log.wait, first))
        leader.start()
        assert entered.wait(5)
        wait_for(lambda: log._stall_locked() is not None)  # noqa: SLF001 - read as an append would
        go.set()
        leader.join(10)
        assert len(errors) == 1 and isinstance(errors[0], SegmentUnavailable)
        assert log.failing is not None and "Input/output error" in log.failing and health[-1] is not None
    finally:
        go.set()
        log.fsync = __import__("os").fsync
        log.close()


def _catch(errors: list[BaseException], fn, *args) -> None:  # noqa: ANN001
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001 - handed to the test
        errors.append(e)


def test_close_does_not_hang_on_a_stalled_fsync(tmp_path: Path) -> None:
    """SIGTERM with a dead disk: close gives up on the stalled commit after `stall_timeout` without closing the
    file under it or writing a checkpoint (whose fsync would hang too); the next start replays from the last."""
    log = SegmentLog(tmp_path, commit_interval=0, stall_timeout=0.1)
    disk = log.fsync = _StuckDisk(log.fsync)
    first = log.append("traces", b"\x0a\x00")
    leader = threading.Thread(target=log.wait, args=(first,))
    leader.start()
    try:
        assert disk.entered.wait(5)
        closer = threading.Thread(target=log.close)
        closer.start()
        closer.join(10)
        assert not closer.is_alive() and disk.calls == 1
        assert not (tmp_path / SEGMENTS / CHECKPOINT).exists()
    finally:
        disk.go.set()
        leader.join(10)


def test_serve_with_a_stalled_disk_answers_503_at_once_and_recovers_without_losing_the_stalled_request(
        tmp_path: Path) -> None:
    """End to end over OTLP/HTTP: the export whose commit stalls waits; the next ones are refused with retry
    info and /healthz says degraded, within the stall timeout rather than 30 s each; once the fsync returns,
    the stalled export is acknowledged and written, and new ones are accepted again."""
    server = Server(config(tmp_path, idle=0.2, receiver_processes=0, commit_interval=0, fsync_stall_timeout=0.3),
                    quiet=True).start()
    disk = server.segments.fsync = _StuckDisk(server.segments.fsync)
    try:
        results: list[int] = []
        stalled = threading.Thread(target=lambda: results.append(post(server, session(1))[0]))
        stalled.start()
        assert disk.entered.wait(5)
        time.sleep(max(0.0, disk.since + 0.35 - time.monotonic()))  # past the stall timeout
        status, headers = post(server, session(2))  # the tick's checkpoint or this append finds the stall
        assert status == 503 and headers.get("Retry-After")
        assert server.metrics.get("wt_otel_segment_fsync_stalled") == 1
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(f"{server.http_url}/healthz", timeout=10)
        assert health.value.code == 503
        disk.go.set()
        stalled.join(10)
        assert results == [200]
        wait_for(lambda: post(server, session(3))[0] == 200)
        wait_for(lambda: set(written(tmp_path)) == {tid(1), tid(3)})
        assert server.metrics.get("wt_otel_segment_fsync_stalled") == 0
    finally:
        disk.go.set()
        server.stop()


def test_only_the_newest_generation_is_cut_and_damage_in_an_older_one_is_reported_not_cut(tmp_path: Path) -> None:
    """A kill can tear only the generation being written; older ones were fsynced whole as they closed. So a bad
    frame length in an older file (the disk, a hand edit) is reported and the file left as it is, while the
    newest generation's torn tail is cut as before."""
    directory = tmp_path / SEGMENTS
    directory.mkdir()
    frames = [session(n) for n in range(3)]
    whole = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    older = directory / "000000000001.traces.pb"
    damaged = bytearray(whole)
    second = 4 + len(frames[0])
    damaged[second:second + 4] = (2**32 - 1).to_bytes(4, "big")  # the second frame's length, past MAX_FRAME
    older.write_bytes(bytes(damaged))
    newest = directory / "000000000002.traces.pb"
    newest.write_bytes(whole + b"\x00\x00\x01\x00half")  # a kill mid-append
    log = SegmentLog(tmp_path)
    try:
        assert older.read_bytes() == bytes(damaged)  # not cut
        assert newest.stat().st_size == len(whole)  # cut
        [note] = [n for n in log.recovery if "000000000001" in n]
        assert f"unreadable from byte {second} of {len(damaged)}" in note and "left in place" in note
        assert any("000000000002.traces.pb: cut 8 bytes" in n for n in log.recovery), log.recovery
        assert log.metrics.get("wt_otel_segment_torn_tails_total") == 1
    finally:
        log.close()
