"""The hand-off between receivers and processing: a bounded queue and one worker.

Receivers call `offer(records)`, which never blocks: the records are queued
(ACCEPTED), or the queue is full (FULL -> HTTP 429 / gRPC RESOURCE_EXHAUSTED,
the client retries later), or the pipeline is shutting down (CLOSED -> 503 /
UNAVAILABLE). Nothing is buffered beyond `max_queued_records`, nor beyond the
byte budget of `wt_otel.serve.budget.AdmissionControl` (which also refuses a
batch too large to be fair, TOO_LARGE, and everything while the data dir cannot
be written, UNAVAILABLE).

Receivers call `precheck(estimated_bytes)` first, before decoding a request:
it refuses (same verdicts) while the worker is more than
`max_backlog_seconds` behind: the oldest queued batch has waited that long,
or the sessions waiting to be written would take that long (`writer_lag`,
the assembler's `write_backlog`: consuming records is cheap, writing sessions
is not, so the backlog builds up in the assembler more than in the queue). So at
overload the receivers decode only what the worker can take, and the worker
keeps its share of the GIL. Once decoded, a request is admitted on the
backlog it would make (`write_cost`, the writer's measured seconds per
session: what is queued counts too), not the one already there, with a fair
share per client (`wt_otel.serve.budget`, rule 5).

One worker thread feeds queued batches to the `Consumer` (the processors) and
calls its `tick(now)` at least every `tick_interval` seconds so time-based
work (idle sessions) happens without traffic. `stop()` refuses new work,
drains what was accepted, then closes the consumer: every record acknowledged
to a client is processed on a clean shutdown.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from wt_otel._util.sizeof import record_bytes
from wt_otel.model.spans import Record, SpanRefs, count
from wt_otel.serve.budget import AdmissionControl, BudgetConfig, Verdict
from wt_otel.serve.metrics import Metrics

if TYPE_CHECKING:
    from wt_otel.serve.segments import SegmentLog

log = logging.getLogger("wt_otel.serve.pipeline")


class PipelineAdmission(enum.Enum):
    ACCEPTED = "accepted"
    FULL = "full"
    CLOSED = "closed"
    TOO_LARGE = "too_large"  # the batch alone exceeds a client's share: split it (not retryable as is)
    UNAVAILABLE = "unavailable"  # the data dir cannot be written (full disk): retry later


# admission control's refusals as the receivers answer them
VERDICTS = {Verdict.FULL: PipelineAdmission.FULL, Verdict.TOO_LARGE: PipelineAdmission.TOO_LARGE,
            Verdict.UNAVAILABLE: PipelineAdmission.UNAVAILABLE}


class Consumer(Protocol):
    def consume(self, records: Sequence[Record | SpanRefs], now: float) -> None: ...

    def tick(self, now: float) -> None: ...

    def close(self) -> None: ...


class Pipeline:
    def __init__(self, consumer: Consumer, metrics: Metrics | None = None, max_queued_records: int = 100_000,
                 tick_interval: float = 0.5, admission: AdmissionControl | None = None,
                 housekeeping: Sequence[Callable[[], object]] = (),
                 writer_lag: Callable[[], float] | None = None,
                 write_cost: Callable[[int], float] | None = None) -> None:
        self.consumer = consumer
        self.metrics = metrics or Metrics()
        self.max_queued_records = max_queued_records
        self.tick_interval = tick_interval
        held = getattr(consumer, "held_bytes", None)
        self.admission = admission or AdmissionControl(
            BudgetConfig(max_records=max_queued_records), held=held if callable(held) else None)
        self.housekeeping = list(housekeeping)  # run on the worker at every tick (retry deferred writes)
        # (records, estimated bytes, segment position or -1, predicted seconds of writing them)
        self._queue: queue.Queue[tuple[Sequence[Record | SpanRefs], int, int, float] | None] = queue.Queue()
        self.on_consumed: Callable[[int], None] | None = None  # the segment log's release (durable ingest)
        self.segments: SegmentLog | None = None  # set by serve: export() then appends before acknowledging
        # set by serve when the pipeline can keep sessions by reference (`SpanRefs`): export() then queues the
        # span index's entries of a protobuf traces request instead of decoding it
        self.by_reference = False
        self.drain_deadline: float | None = None  # stopping: past it (monotonic), logged batches are not drained
        self.left_in_log = 0
        self._queued = 0
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self._closed = False
        self._writer_lag = writer_lag or (lambda: 0.0)
        self._write_cost = write_cost  # traces -> predicted seconds of writing them (None: not predicted)
        self._queued_cost = 0.0  # predicted seconds of writing what is queued
        self._enqueued: deque[float] = deque()  # when each queued batch was queued, oldest first
        self._worker = threading.Thread(target=self._run, name="wt-otel-pipeline", daemon=True)

    def start(self) -> Pipeline:
        self._worker.start()
        return self

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    @property
    def backlog_seconds(self) -> float:
        """How far behind the worker is: the wait of the oldest queued batch, or the time to write the
        sessions waiting in the assembler, whichever is more."""
        return max(self._oldest_wait(), self._writer_lag())

    @property
    def predicted_backlog(self) -> float:
        """The writer's work now, in seconds: what it has (`writer_lag`) and what is queued at its predicted cost,
        or the oldest queued batch's wait if that is more."""
        return max(self._oldest_wait(), self._writer_lag() + self._queued_cost)

    def _oldest_wait(self) -> float:
        """How long the oldest queued batch has waited (0: none queued)."""
        try:
            return time.monotonic() - self._enqueued[0]  # read without the lock: the worker may pop it
        except IndexError:
            return 0.0

    def precheck(self, estimated_bytes: int, client: str | None = None) -> tuple[PipelineAdmission, str]:
        """Before decoding a request of ~`estimated_bytes` decoded: refuse it now if it cannot be admitted
        (shutting down, the store degraded, the worker behind and `client` holding its share of that, the
        memory budget spent)."""
        if self._closed:
            return PipelineAdmission.CLOSED, "wt-otel is shutting down"
        decision = self.admission.gate(estimated_bytes, self._queued_bytes, self.predicted_backlog, client)
        if decision.verdict is not Verdict.ADMIT:
            return VERDICTS[decision.verdict], decision.reason
        return PipelineAdmission.ACCEPTED, ""

    def offer(self, records: Sequence[Record | SpanRefs], client: str | None = None) -> PipelineAdmission:
        """Queue a batch without blocking; all or nothing."""
        return self.admit(records, client)[0]

    def admit(self, records: Sequence[Record | SpanRefs], client: str | None = None) -> tuple[PipelineAdmission, str]:
        """`offer`, with the reason for a refusal (for the client's error message)."""
        with self._lock:
            verdict, reason, nbytes, cost = self._decide_locked(records, client)
            if verdict is PipelineAdmission.ACCEPTED:
                self._enqueue_locked(records, nbytes, -1, cost)
        return verdict, reason

    # Durable ingest (wt_otel.serve.segments): check, make the request durable, then `put` it regardless of the
    # budget (a request in the segment log is acknowledged; refusing it then would only duplicate it on retry).

    def check(self, records: Sequence[Record | SpanRefs], client: str | None = None) -> tuple[PipelineAdmission, str]:
        """`admit`'s verdict without queuing anything."""
        with self._lock:
            verdict, reason, _, _ = self._decide_locked(records, client)
        return verdict, reason

    def put(self, records: Sequence[Record | SpanRefs], position: int) -> bool:
        """Queue records already in the segment log at `position`; `on_consumed(position)` once the consumer has
        them. False when shutting down (they stay in the log for the next start)."""
        with self._lock:
            if self._closed:
                return False
            self._enqueue_locked(records, sum(map(record_bytes, records)), position, self._cost(records))
        return True

    def _cost(self, records: Sequence[Record | SpanRefs]) -> float:
        if self._write_cost is None:
            return 0.0
        return self._write_cost(len({getattr(r, "trace_id", None) for r in records} - {None}))

    def _decide_locked(self, records: Sequence[Record | SpanRefs],
                       client: str | None) -> tuple[PipelineAdmission, str, int, float]:
        """(verdict, reason for a refusal, estimated bytes, predicted seconds of writing) of the admission
        control, under `_lock`."""
        if self._closed:
            return PipelineAdmission.CLOSED, "wt-otel is shutting down", 0, 0.0
        decision = self.admission.check(records, self._queued_bytes, self._queued, client,
                                        self.predicted_backlog, self._write_cost)
        if decision.verdict is not Verdict.ADMIT:
            return VERDICTS[decision.verdict], decision.reason, 0, 0.0
        return PipelineAdmission.ACCEPTED, "", decision.nbytes, decision.cost

    def _enqueue_locked(self, records: Sequence[Record | SpanRefs], nbytes: int, position: int,
                        cost: float = 0.0) -> None:
        self._queued += count(records)
        self._queued_bytes += nbytes
        self._queued_cost += cost
        self.metrics.set("wt_otel_queue_depth", self._queued)
        self.metrics.set("wt_otel_queue_bytes", self._queued_bytes)
        self._queue.put((records, nbytes, position, cost))
        self._enqueued.append(time.monotonic())

    def _run(self) -> None:
        next_tick = time.monotonic() + self.tick_interval
        while True:
            batch: tuple[Sequence[Record | SpanRefs], int, int, float] | None
            try:
                batch = self._queue.get(timeout=max(0.0, next_tick - time.monotonic()))
            except queue.Empty:
                batch = ((), 0, -1, 0.0)
            if batch is None:
                break
            now = time.time()
            if batch[0]:
                records, nbytes, position, cost = batch
                if position >= 0 and self.drain_deadline is not None and time.monotonic() >= self.drain_deadline:
                    self.left_in_log += 1  # stopping, past the deadline: it stays in the segment log (pinned)
                else:
                    self._safely(self.consumer.consume, records, now)
                    if position >= 0 and self.on_consumed is not None:
                        self.on_consumed(position)
                with self._lock:
                    self._enqueued.popleft()
                    self._queued -= count(records)
                    self._queued_bytes -= nbytes
                    self._queued_cost = max(0.0, self._queued_cost - cost)  # with the writer now (writer_lag)
                    self.metrics.set("wt_otel_queue_depth", self._queued)
                    self.metrics.set("wt_otel_queue_bytes", self._queued_bytes)
            if time.monotonic() >= next_tick:
                for job in self.housekeeping:
                    self._safely(job)
                self._safely(self.consumer.tick, now)
                self.metrics.set("wt_otel_memory_held_bytes", self._queued_bytes + self.admission.held())
                self.metrics.set("wt_otel_backlog_seconds", round(self.backlog_seconds, 3))
                next_tick = time.monotonic() + self.tick_interval

    def _safely(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # a bug in one batch must not stop the pipeline; it is logged and counted
            log.exception("pipeline consumer failed")
            self.metrics.inc("wt_otel_pipeline_errors_total")

    def stop(self, timeout: float | None = None) -> None:
        """Refuse new work, process everything accepted, close the consumer (flushes sessions)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        if self._worker.is_alive():
            self._worker.join(timeout)
        if self.left_in_log:
            log.warning("shutdown deadline: %d queued request(s) left in the segment log for the next start",
                        self.left_in_log)
        self._safely(self.consumer.close)
        for job in self.housekeeping:  # a last try at writes deferred by a full disk
            self._safely(job)
