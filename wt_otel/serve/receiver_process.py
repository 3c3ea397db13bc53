"""serve's receiver process: receive, make durable, acknowledge; nothing per session.

With `processes.receivers` >= 1 (the default on a machine of two cores or more), `wt-otel serve` runs its
OTLP receivers here, in a process of their own, and keeps the session core (the GenAI filter, the
assembler, the session stages, the store) in its own process: the two no longer share one GIL. This
process does what a receiver must and no more: decode or walk a request with the span index, screen it
with the GenAI filter's receive-time half, check admission, append its bytes to the segment log (group
commit), and acknowledge. The serve process is fed from the segment log (`wt_otel.serve.feed`): for
each entry made durable this process sends its position, `("entry", seq, pos)`, and the serve process
reads the entry back and hands it to its pipeline, exactly as it replays the log at start; an entry
whose spans are kept by reference goes with the span index's runs of it (`SpanRefs`, a few KiB), which
the serve process would otherwise read back and walk again.

The two talk over one socket pair (`multiprocessing.connection`), in messages that are tuples:

    serve -> here   ("start", config_json, log_level, log_json)     once, first
    here -> serve   ("opened", checkpoint, replay_end, recovery)     the log opened and repaired
    serve -> here   ("go", by_reference)                             the assembler knows where replay ends
    here -> serve   ("entry", seq, pos)                              replayed entries first, then live ones
    here -> serve   ("refs", seq, pos, span_refs)                    a live entry kept by reference, its runs
    here -> serve   ("ready", grpc_port, http_port) | ("failed", why, exit_code)
    serve -> here   ("status", consumed, needed, writer_lag, held, per_session, degraded)
    both ways       ("metrics", snapshot)                            each side's own counters, for /metrics
    serve -> here   ("stop", grace) -> ("stopped", last_seq)         receivers closed: nothing more comes
    serve -> here   ("close", consumed, needed) -> ("closed",)       last checkpoint written; this process exits

Durability is kept as before: an entry stays pinned in the segment log (never below the checkpoint)
until the serve process says it consumed it (`consumed`, the highest seq it handed to the assembler,
counted in order), and the checkpoint is the lowest of this process's pins and of what the serve process
still needs (`needed`, its open sessions and deferred writes). `needed` is computed after `consumed`
was read, so an entry released here is always covered by it.

Admission needs the session core's state: the serve process sends it in each `status` (its writer's
backlog, bytes held, seconds per session, a degraded data dir), and this process counts what it sent and
was not consumed yet as its queue. So the receivers still refuse (429 / 503 with retry info) before they
acknowledge when the session core falls behind. If the serve process dies, the socket closes: this process
stops its receivers at once and exits (the next start replays what was acknowledged). It ignores SIGINT and
SIGTERM: the serve process stops it, in order.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from wt_otel._util.tuning import memory_return, tune_for_serve
from wt_otel.model.spans import Record, SpanRefs, count
from wt_otel.serve.budget import AdmissionControl, Verdict
from wt_otel.serve.config import ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import VERDICTS, PipelineAdmission
from wt_otel.serve.segments import SegmentLog

log = logging.getLogger("wt_otel.serve.receiver_process")

TICK = 0.1  # seconds between metrics sent, checkpoints and disk probes
REPLAY_IN_FLIGHT = 64  # replayed entries sent and not yet consumed, at most (bounded memory in the serve process)
_OWN = "segment log"  # the degraded component this process owns; the serve process sends the others


class RemotePipeline:
    """What the receivers see as their pipeline (`wt_otel.serve.pipeline.Pipeline`'s receive-side half), in the
    receiver process: admission from the session core's last status, `put` sends the entry's position."""

    def __init__(self, config: ServeConfig, conn: Connection, segments: SegmentLog, metrics: Metrics,
                 screen: Any) -> None:
        self.max_queued_records = config.queue.max_queued_records
        self.admission = AdmissionControl(config.queue.budget(), held=lambda: self._held)
        self.conn, self.segments, self.metrics = conn, segments, metrics
        self.consumer = screen  # `receivers.common.screen_of` asks the pipeline's head: the GenAI filter
        self.by_reference = False
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._seq = 0
        self._consumed = 0
        # sent, not yet consumed: (seq, position, records, estimated bytes, predicted seconds, when sent)
        self._in_flight: deque[tuple[int, int, int, int, float, float]] = deque()
        self._queued = self._queued_bytes = 0
        self._queued_cost = 0.0
        self._held = 0
        self._writer_lag = 0.0
        self._per_session = 0.0
        self._closed = False
        self.needed = -1  # the session core's lowest needed position (-1: none), as of its last status
        # held by `on_status` and around each checkpoint: a checkpoint never pairs an old `needed` with pins
        # released after it
        self.status_lock = threading.Lock()

    # ------------------------------------------------------------------ what the receivers call

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def predicted_backlog(self) -> float:
        """As `Pipeline.predicted_backlog`: what is sent and not consumed is this side's queue."""
        try:
            oldest = time.monotonic() - self._in_flight[0][5]
        except IndexError:
            oldest = 0.0
        return max(oldest, self._writer_lag + self._queued_cost)

    def _write_cost(self, sessions: int) -> float:
        return sessions * self._per_session

    def precheck(self, estimated_bytes: int, client: str | None = None) -> tuple[PipelineAdmission, str]:
        """As `Pipeline.precheck`, and a full queue is refused here too, before the request is walked: what is in
        flight to the session core (in the socket, in its queue) can fill it before the backlog reaches
        `max_backlog_seconds`, and a request refused only after its walk and check cost the cores that the session
        core needed (goodput at 2x load fell to 0.7 of capacity)."""
        if self._closed:
            return PipelineAdmission.CLOSED, "wt-otel is shutting down"
        if self._queued >= self.max_queued_records:
            return PipelineAdmission.FULL, f"the pipeline queue is full ({self._queued} records)"
        decision = self.admission.gate(estimated_bytes, self._queued_bytes, self.predicted_backlog, client)
        if decision.verdict is not Verdict.ADMIT:
            return VERDICTS[decision.verdict], decision.reason
        return PipelineAdmission.ACCEPTED, ""

    def check(self, records: Sequence[Record | SpanRefs], client: str | None = None) -> tuple[PipelineAdmission, str]:
        if self._closed:
            return PipelineAdmission.CLOSED, "wt-otel is shutting down"
        decision = self.admission.check(records, self._queued_bytes, self._queued, client, self.predicted_backlog,
                                        self._write_cost if self._per_session else None)
        if decision.verdict is not Verdict.ADMIT:
            return VERDICTS[decision.verdict], decision.reason
        return PipelineAdmission.ACCEPTED, ""

    def put(self, records: Sequence[Record | SpanRefs], position: int) -> bool:
        """The entry at `position` is durable: send it to the session core. False when stopping (it stays pinned
        in the log, past the last checkpoint: the next start replays it)."""
        from wt_otel._util.sizeof import record_bytes

        n = count(records)
        nbytes = sum(map(record_bytes, records))
        traces = len({getattr(r, "trace_id", None) for r in records} - {None})
        refs = list(records) if records and all(type(r) is SpanRefs for r in records) else None
        return self._send_entry(position, n, nbytes, self._write_cost(traces), refs)

    def _send_entry(self, position: int, n: int, nbytes: int, cost: float, refs: list | None = None) -> bool:
        """Send one entry: its span index runs when there are (the session core takes them as they are: ~0.05 ms
        to unpickle, against ~0.4 ms to read the entry back and walk it again), else its position alone."""
        # sent in the order of `seq`, under the lock that numbers it: the session core's `consumed` is the seq of the
        # last entry it took in arrival order, and each one up to it is released here (an entry numbered before one
        # sent ahead of it was released unconsumed, and the checkpoint passed it)
        with self._send_lock:
            with self._lock:
                if self._closed:
                    return False
                self._seq += 1
                seq = self._seq
                self._in_flight.append((seq, position, n, nbytes, cost, time.monotonic()))
                self._queued += n
                self._queued_bytes += nbytes
                self._queued_cost += cost
            self.conn.send(("entry", seq, position) if refs is None else ("refs", seq, position, refs))
        return True

    # ------------------------------------------------------------------ what the serve process tells

    def send(self, message: tuple) -> None:
        with self._send_lock:
            self.conn.send(message)

    def on_status(self, consumed: int, needed: int, writer_lag: float, held: int, per_session: float,
                  degraded: dict[str, str]) -> None:
        """The session core's state: release what it consumed (then the checkpoint may pass it), take its
        backlog for admission, mirror its degraded components."""
        with self.status_lock:
            released = []
            with self._lock:
                self._consumed = max(self._consumed, consumed)
                while self._in_flight and self._in_flight[0][0] <= self._consumed:
                    _, pos, n, nbytes, cost, _ = self._in_flight.popleft()
                    self._queued -= n
                    self._queued_bytes -= nbytes
                    self._queued_cost = max(0.0, self._queued_cost - cost)
                    released.append(pos)
                self._held, self._writer_lag, self._per_session = held, writer_lag, per_session
                self.needed = needed
            for pos in released:
                self.segments.release(pos)
        mine = self.admission.degraded
        for component in set(mine) - set(degraded) - {_OWN}:
            self.admission.set_degraded(component, None)
        for component, reason in degraded.items():
            if component != _OWN and mine.get(component) != reason:
                self.admission.set_degraded(component, reason)

    def in_flight(self) -> int:
        return len(self._in_flight)

    def last_seq(self) -> int:
        return self._seq

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def segments_health(self, reason: str | None) -> None:
        self.admission.set_degraded(_OWN, reason)
        if reason:
            log.warning("segment log cannot be written (%s): refusing exports until it can", reason)
        else:
            log.info("segment log writable again: accepting exports")


def _configure_logging(level: int, json_format: bool) -> None:
    from wt_otel.serve.logs import configure

    configure(logging.getLevelName(level).lower(), "json" if json_format else "text")


def main(fd: int) -> int:
    """The receiver process, on the socket `fd` to the serve process. Returns the exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the serve process stops this one, in order
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        kind, config_json, level, json_format = conn.recv()
    except (EOFError, OSError):
        return 1
    assert kind == "start"
    _configure_logging(level, json_format)
    config = ServeConfig.model_validate_json(config_json)
    metrics = Metrics()
    dur = config.durability
    try:
        segments = SegmentLog(config.data_dir, commit_interval=dur.commit_interval, segment_bytes=dur.segment_bytes,
                              segment_max_age=dur.segment_max_age, max_bytes=dur.max_bytes, metrics=metrics,
                              stall_timeout=dur.fsync_stall_timeout)
    except OSError as e:
        conn.send(("failed", f"cannot open the segment log: {e}", 1))
        return 1
    conn.send(("opened", segments.checkpoint_position, segments.replay_end, segments.recovery))
    try:
        kind, by_reference = conn.recv()
    except (EOFError, OSError):
        return 1
    pipeline = RemotePipeline(config, conn, segments, metrics, _screen(config, metrics))
    pipeline.by_reference = bool(by_reference)
    if by_reference:
        segments.retain_age, segments.retain_bytes = dur.retain_age, dur.retain_bytes
    segments.on_health = pipeline.segments_health
    segments.check_writable()
    stop = threading.Event()
    orders: deque[tuple] = deque()
    reader = threading.Thread(target=_read, args=(conn, pipeline, metrics, orders, stop), name="wt-otel-link",
                              daemon=True)
    reader.start()
    for _, pos, _data in segments.replay():  # the serve process reads each entry back, as it reads live ones
        while pipeline.in_flight() >= REPLAY_IN_FLIGHT and not stop.is_set():
            time.sleep(0.005)
        if stop.is_set():
            return 1
        segments.pin(pos)
        pipeline._send_entry(pos, 0, 0, 0.0)
    from wt_otel.serve.receivers import start_receivers

    try:
        receivers = start_receivers(config.receivers, pipeline, metrics)  # type: ignore[arg-type]
    except (OSError, RuntimeError, ValueError) as e:
        pipeline.send(("failed", str(e), 1))
        return 1
    pipeline.send(("metrics", metrics.snapshot()))  # what start-up counted (torn tails...) is there once serve is up
    pipeline.send(("ready", receivers.grpc_port, receivers.http_port))
    tune_for_serve()  # as serve's own process: rare, short GC collections; large buffers back to the OS
    return _serve(pipeline, segments, metrics, receivers, orders, stop)


def _screen(config: ServeConfig, metrics: Metrics) -> Any:
    """The pipeline's head stage, built alone, when it screens requests before decoding (the GenAI filter's
    `keep_traces` / `note_decoded`); None otherwise. Built from the stage plan, as the serve process builds it."""
    from wt_otel.components import StageContext
    from wt_otel.serve.config import stage_plan

    head = stage_plan(config)[0]
    if head.type.kind != "records":
        return None
    ctx = StageContext(serve_config=config, metrics=metrics, emit=log.info, warn=log.warning, quiet=True)
    stage = head.type.create(head.config, ctx, None)
    return stage if callable(getattr(stage, "keep_traces", None)) and callable(getattr(stage, "note_decoded", None)) \
        else None


def _read(conn: Connection, pipeline: RemotePipeline, metrics: Metrics, orders: deque[tuple],
          stop: threading.Event) -> None:
    """Messages from the serve process (`orders` for ("stop", grace), ("close", consumed, needed), ("eof",));
    statuses are applied at once, orders go to the main loop."""
    try:
        while True:
            message = conn.recv()
            kind = message[0]
            if kind == "status":
                pipeline.on_status(*message[1:])
            elif kind == "metrics":
                metrics.absorb(message[1])
            else:
                orders.append(message)
                stop.set()
    except (EOFError, OSError):
        orders.append(("eof",))
        stop.set()
    except Exception:  # a bug: without this thread nothing is released; exit (serve then exits 1) rather than hang
        log.exception("the link to the serve process failed")
        orders.append(("eof",))
        stop.set()


def _serve(pipeline: RemotePipeline, segments: SegmentLog, metrics: Metrics, receivers: Any, orders: deque[tuple],
           stop: threading.Event) -> int:
    """The main loop: orders from the serve process, and every `TICK` the metrics, a disk probe, a checkpoint."""
    next_checkpoint = 0.0
    while True:
        stop.wait(TICK)
        while orders:
            order = orders.popleft()
            if order[0] == "eof":  # the serve process is gone: stop taking data now; the log has what was acked
                pipeline.close()
                receivers.stop(grace=0)
                log.error("the serve process is gone: receivers stopped")
                return 1
            if order[0] == "stop":
                receivers.stop(grace=order[1])
                pipeline.close()
                pipeline.send(("stopped", pipeline.last_seq()))
            elif order[0] == "close":
                pipeline.on_status(order[1], order[2], 0.0, 0, 0.0, {})
                segments.close(order[2])
                pipeline.send(("metrics", metrics.snapshot()))
                pipeline.send(("closed",))
                return 0
        stop.clear()
        try:
            pipeline.send(("metrics", metrics.snapshot()))
        except OSError:
            continue  # the reader sees the socket closed
        now = time.monotonic()
        if now >= next_checkpoint:
            memory_return.maybe()  # the request buffers freed here go back to the OS after large requests
            segments.probe()
            with pipeline.status_lock:
                segments.checkpoint(pipeline.needed)
            next_checkpoint = now + 0.5


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
