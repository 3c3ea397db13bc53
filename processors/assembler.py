"""The streaming session assembler: records in, completed Sessions out, in bounded memory.

Grouping is import's (`wt_otel.ingest.sessions.SessionGrouper`), done incrementally:
records join a session by trace id, and traces that share a conversation id
are merged into one session (plain chat instrumentations make every LLM call
its own trace). A session's key is the first trace id it was seen with and
never changes, so every revision of it lands in the same scenario directory.

When is a session complete? Spans are exported when they end, in any order
and in any batch, so "complete" is a judgment on time:
- `idle_timeout` seconds (default 30) with no new record for it; or
- its root agent/workflow span has arrived (a span without a parent whose
  operation is not a bare inference call) and nothing arrived for `grace`
  seconds (default 2). A parentless *chat* span does not trigger this: with
  one-trace-per-call instrumentations every call is a root, and the
  conversation continues in the next trace. Nested `invoke_agent` spans
  (sub-agents, handoffs) do not trigger it either: their parent goes on.

Late records and revisions: a written session's records are kept for
`late_window` seconds (bounded by `max_retained_records`). A record that
belongs to it (same trace or conversation) re-opens it with all its records;
when it completes again the sink gets the same key, and the data-dir store
writes revision N+1, replacing the directory (each revision is a superset of
the previous one). Once a written session's records are gone (window over,
budget, restart), a late record starts a *continuation* session with key
`<key>~2` (then `~3`...), written separately and marked incomplete with a
warning naming the session it continues: nothing is overwritten with less.

Bounds: at most `max_open_sessions` open sessions (the least recently active
one is flushed when a new one would exceed it) and `max_records_per_session`
records per session (that session is flushed when it reaches it). Both
flushes write the session with `complete = False` and count
`wt_otel_sessions_flushed_incomplete_total`; records are never dropped. A
session flushed for size keeps only a tombstone (its ids), so what follows
becomes a continuation rather than re-growing past the bound.

Memory is also bounded in bytes (`max_held_bytes`, estimated by
`wt_otel._util.sizeof`): past it, retained records are dropped first (they are
written already; the session keeps its tombstone), then the least recently
active open session is written early, incomplete (reason `max_held_bytes`).
`held_bytes()` is what the pipeline's admission control adds to its queue;
`write_backlog()` (the root-ended sessions waiting, in seconds of writing) is
how it sees that the writer is behind, to refuse requests before decoding.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from wt_otel._util.sizeof import record_bytes
from wt_otel._util.terminal import shown
from wt_otel._util.throttle import LogThrottle
from wt_otel.components import IndexedSession, StageContext, StageType
from wt_otel.ingest.diagnostics import fresh_diagnostics
from wt_otel.ingest.dialects.common import INFERENCE_OPERATIONS, conversation_id, operation
from wt_otel.ingest.joins import ContinuationIndex, compared, tail_of
from wt_otel.ingest.sessions import attach_logs, build_session
from wt_otel.model.session import Session
from wt_otel.model.spans import LogRecord, Record, SpanRecord, SpanRefs
from wt_otel.serve.config import AssemblerConfig
from wt_otel.serve.metrics import Metrics

log = logging.getLogger("wt_otel.assembler")

SessionSink = Callable[[Session, list[SpanRecord]], None]
"""Receives each completed session and its spans (log records attached as events)."""

_Built = tuple[list[Record], list[SpanRecord], "Session | None"]  # a group's records, spans and session, built once
Held = Record | SpanRefs  # what a group holds: decoded records, or spans kept by reference (serve's segment log)


@dataclass(slots=True)
class _Group:
    """An open session, or (with `retained_at`) a written one kept for late records."""

    key: str
    created: int  # arrival order of the session's first record: merges keep the oldest key
    records: list[Held] | None = field(default_factory=list)  # None: a tombstone
    traces: set[str] = field(default_factory=set)
    convs: set[str] = field(default_factory=set)
    roots: set[str] = field(default_factory=set)  # traces whose parentless span arrived
    last_seen: float = 0.0
    root_ended: bool = False
    continuation_of: str | None = None
    absorbed: tuple[str, ...] = ()  # keys of sessions written on their own, then merged into this one
    retained_at: float = 0.0
    nbytes: int = 0  # estimated bytes of `records`
    count: int = 0  # spans and log records in `records` (a SpanRefs holds several)
    min_pos: int = -1  # lowest segment-log position of `records` (-1: none logged): pins the log's checkpoint
    join_checked: bool = False  # looked up once, at its first write, as a content continuation (ingest.joins)
    notes: list[str] = field(default_factory=list)  # warnings of the join rule (a flagged candidate on a tie)

    @property
    def held(self) -> list[Held]:
        """The records of a group that is not a tombstone (callers know which they hold)."""
        if self.records is None:
            raise RuntimeError(f"session group {self.key} is a tombstone: it holds no records")
        return self.records


def _take(run: list[Held], n: int) -> tuple[list[Held], list[Held]]:
    """The first `n` spans and log records of `run`, and the rest (a `SpanRefs` is split where it must be)."""
    taken = 0
    for i, record in enumerate(run):
        size = len(record.ordinals) if isinstance(record, SpanRefs) else 1
        if taken + size > n:
            if not isinstance(record, SpanRefs) or taken == n:
                return run[:i], run[i:]
            head, tail = record.split(n - taken)
            return [*run[:i], head], [tail, *run[i + 1:]]
        taken += size
    return run, []


def _unmarked_refs(held: list[Held]) -> bool:
    """Whether a group holds only spans kept by reference, none with a flag or feedback key (a loop, not `all()`
    over a generator: asked for every session, most of which hold one run)."""
    for record in held:  # noqa: SIM110 - see above
        if not isinstance(record, SpanRefs) or record.marks:
            return False
    return True


def _copy(record: Record) -> Record:
    """`attach_logs` appends to span.events; a revision rebuilds from the same records."""
    return dataclasses.replace(record, events=list(record.events)) if isinstance(record, SpanRecord) else record


class SessionAssembler:
    """A pipeline `Consumer`: `consume(records, now)`, `tick(now)`, `close()`; thread-safe."""

    def __init__(self, sink: SessionSink, metrics: Metrics | None = None, *, idle_timeout: float = 30.0,
                 grace: float = 2.0, max_open_sessions: int = 10_000, max_records_per_session: int = 20_000,
                 late_window: float = 300.0, max_retained_records: int = 20_000,
                 is_written: Callable[[str], bool] | None = None, max_held_bytes: int = 192 * 1024 * 1024,
                 log_throttle: LogThrottle | None = None) -> None:
        self.sink = sink
        self.max_held_bytes = max_held_bytes
        self._open_bytes = 0
        self._retained_bytes = 0
        self.metrics = metrics or Metrics()
        self.idle_timeout = idle_timeout
        self.grace = grace
        self.max_open_sessions = max_open_sessions
        self.max_records_per_session = max_records_per_session
        self.late_window = late_window
        self.max_retained_records = max_retained_records
        self.max_retained_sessions = 4 * max_open_sessions  # tombstones are small: ids only
        emitted: set[str] = set()
        self._emitted: set[str] | None = None if is_written else emitted  # without a store, remember keys here
        self._is_written = is_written or emitted.__contains__
        self._warned: OrderedDict[str, set[str]] = OrderedDict()  # warnings already logged, per session key
        self._throttle = log_throttle or LogThrottle()  # a sample of each kind in the log; every one in the metrics
        self._lock = threading.RLock()
        self._open: OrderedDict[str, _Group] = OrderedDict()  # least recently active first
        # keys of open sessions whose root span arrived, least recently active first (as `_open`): a tick
        # finds those past their grace at the front, without looking at the others
        self._root_ended: OrderedDict[str, None] = OrderedDict()
        self._retained: OrderedDict[str, _Group] = OrderedDict()  # oldest written first
        self._holding: OrderedDict[str, None] = OrderedDict()  # retained keys still holding records, oldest first
        self._retained_records = 0
        # (min_pos, key) of every group that pinned a segment-log position, as a heap: `needed_position` reads
        # the lowest still true (its group open or holding records, the position unchanged) and drops the
        # stale ones above it, instead of walking every open and retained group at every checkpoint
        self._positions: list[tuple[int, str]] = []
        self._by_trace: dict[str, str] = {}  # trace id -> key, open and retained alike
        self._by_conv: dict[str, str] = {}
        self._counter = 0
        # the writer's speed, measured in tick(); until then a prior slower than measured on a loaded 2-core
        # machine, so the first burst, before any session is due, cannot queue a minute of writing: 3-8 ms
        # to build and render a session; 50-100 µs to keep one by reference (`keep_by_reference`), whose
        # prior must not refuse the first seconds of a burst that is written faster than it arrives
        self._seconds_per_session = 0.010
        self._seconds_per_kept_session = 0.0002
        self._speed_measured = False
        # durable ingest (wt_otel.serve.segments), set by serve: records below `replay_below` are being replayed;
        # a written key whose records are all in the replay (`resumable`) is rebuilt under its own key, so the
        # store sees the same session again (and skips an identical revision) instead of a continuation.
        self.replay_below = -1
        self.resumable: Callable[[str], bool] = lambda key: False
        self.close_deadline: float | None = None  # time.monotonic() by which close() stops writing open sessions
        # serve with its segment log: `decode_refs` reads `SpanRefs` back as SpanRecords (same order); with
        # `keep_by_reference` set, a completed group of refs only, none with a flag or feedback key, goes there
        # instead of being built (True: kept; False: build it after all)
        self.decode_refs: Callable[[list[SpanRefs]], list[SpanRecord]] | None = None
        self.keep_by_reference: Callable[[IndexedSession], bool] | None = None
        # content continuations (wt_otel.ingest.joins, import's rule): a session without a conversation id whose
        # history extends a written one exactly becomes that session's next revision. Candidates are the written
        # sessions whose records are still held (bounded as they are: a tail goes when its records go).
        self.join_continuations = True
        self._tails = ContinuationIndex()

    @classmethod
    def from_config(cls, sink: SessionSink, config, metrics: Metrics | None = None,
                    is_written: Callable[[str], bool] | None = None) -> SessionAssembler:
        """From a `wt_otel.serve.config.AssemblerConfig`."""
        return cls(sink, metrics, idle_timeout=config.idle_timeout, grace=config.grace,
                   max_open_sessions=config.max_open_sessions,
                   max_records_per_session=config.max_records_per_session, late_window=config.late_window,
                   max_retained_records=config.max_retained_records, is_written=is_written,
                   max_held_bytes=config.max_held_bytes)

    # ------------------------------------------------------------------ Consumer

    def consume(self, records: Sequence[Held], now: float) -> None:
        """Records are taken in runs of one trace and conversation (in order of first appearance; each run in
        its own order): a batch holds few sessions of many spans, and the lookups are per run, not per span."""
        with self._lock:
            runs: dict[tuple[str, str | None], list[Held]] = {}
            for record in records:
                trace_id = record.trace_id
                if not trace_id:
                    self.metrics.inc("wt_otel_records_dropped_total", reason="no_trace_id")
                    continue
                conv = record.conversation if isinstance(record, SpanRefs) else conversation_id(record.attributes)
                ids = (trace_id, conv)
                run = runs.get(ids)
                if run is None:
                    runs[ids] = [record]
                else:
                    run.append(record)
            for (trace_id, conv), run in runs.items():
                while run:
                    run = self._add(run, trace_id, conv, now)
            self.metrics.set("wt_otel_sessions_open", len(self._open))

    def tick(self, now: float) -> None:
        """Complete idle sessions and root-ended ones past their grace; forget old retained ones."""
        with self._lock:
            due: list[_Group] = []
            for group in self._open.values():  # least recently active first: stop at the first non-idle
                if now - group.last_seen < self.idle_timeout:
                    break
                due.append(group)
            for key in self._root_ended:
                group = self._open[key]
                if now - group.last_seen < self.grace:
                    break
                if now - group.last_seen < self.idle_timeout:  # else idle: due above
                    due.append(group)
            started = time.perf_counter()
            for n, group in enumerate(due, 1):
                self._emit(group, now, complete=True)
                if n % 50 == 0 or (n == len(due) and n >= 10):  # the writer's speed, for `write_backlog()`
                    self._measured((time.perf_counter() - started) / n)
            while self._retained and now - next(iter(self._retained.values())).retained_at > self.late_window:
                self._forget(next(iter(self._retained)))
            self.metrics.set("wt_otel_sessions_open", len(self._open))

    def flush(self, now: float, deadline: float | None = None) -> int:
        """Write every open session now (force_flush, shutdown); complete if every trace's root arrived.

        With a `deadline` (time.monotonic()), stop there: the sessions left stay open (their records are in
        the segment log past the checkpoint, and the next start completes them)."""
        with self._lock:
            groups = list(self._open.values())
            done = 0
            for group in groups:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                self._emit(group, now, complete=group.traces <= group.roots)
                done += 1
            if done < len(groups):
                log.warning("shutdown deadline: wrote %d open session(s); %d left in the segment log for the next "
                            "start to complete", done, len(groups) - done)
                self.metrics.set("wt_otel_sessions_deferred_to_restart", len(groups) - done)
            self.metrics.set("wt_otel_sessions_open", len(self._open))
            return done

    def close(self) -> None:
        self.flush(time.time(), self.close_deadline)
        for kind, held in self._throttle.held_back().items():
            _say_held_back(kind, held)

    def needed_position(self) -> int:
        """The lowest segment-log position an open session or a written one kept for late records holds; -1: none."""
        with self._lock:
            heap = self._positions
            if len(heap) > 4 * (len(self._open) + len(self._holding)) + 4096:  # stale entries below the top
                heap[:] = [(g.min_pos, g.key) for g in self._pinning() if g.min_pos >= 0]
                heapq.heapify(heap)
            while heap:
                pos, key = heap[0]
                group = self._open.get(key) or (self._retained[key] if key in self._holding else None)
                if group is not None and group.min_pos == pos:
                    return pos
                heapq.heappop(heap)  # written and let go, tombstoned, or its position lowered since
            return -1

    def _pinning(self) -> list[_Group]:
        """The groups whose records pin the segment log: the open ones and the retained ones holding records."""
        return [*self._open.values(), *(self._retained[k] for k in self._holding)]

    @property
    def open_sessions(self) -> int:
        return len(self._open)

    def write_backlog(self) -> float:
        """Seconds of writing behind: the sessions whose root has ended (due within `grace`) at the measured
        seconds per session, less the `grace` they wait anyway. Lock-free: admission control reads it for
        every request, before decoding, to see that the writer is behind."""
        per_session = self._seconds_per_session
        if not self._speed_measured and self.keep_by_reference is not None:
            per_session = self._seconds_per_kept_session
        return max(0.0, len(self._root_ended) * per_session - self.grace)

    def write_cost(self, sessions: int) -> float:
        """Predicted seconds of writing `sessions` more sessions at the measured speed; 0 until it is measured
        (admission control then goes by the backlog alone). Admission predicts the backlog with it (issue 31)."""
        return sessions * self._seconds_per_session if self._speed_measured else 0.0

    def _measured(self, seconds_per_session: float) -> None:
        if not self._speed_measured:
            self._seconds_per_session, self._speed_measured = seconds_per_session, True
        else:
            self._seconds_per_session = 0.7 * self._seconds_per_session + 0.3 * seconds_per_session

    def held_bytes(self) -> int:
        """Estimated bytes of the records held (open sessions and retained ones), for admission control."""
        return self._open_bytes + self._retained_bytes

    # ------------------------------------------------------------------ grouping

    def _add(self, run: list[Held], trace_id: str, conv: str | None, now: float) -> list[Held]:
        """Records of one trace and conversation id, in order; returns those left when the session reached
        `max_records_per_session` (they go to its continuation)."""
        by_trace, by_conv = self._by_trace.get(trace_id), self._by_conv.get(conv) if conv else None
        if by_trace is None and by_conv is None:  # a session not seen before (most runs): nothing to reopen or merge
            group = self._start(trace_id, now, replayed=0 <= run[0].segment_pos < self.replay_below)
        else:
            group = self._joined({k for k in (by_trace, by_conv) if k}, trace_id, run, now)
        run, rest = _take(run, max(1, self.max_records_per_session - group.count))
        self._attach(group, run, trace_id, conv, now)
        if group.count >= self.max_records_per_session:
            self._emit(group, now, complete=False, reason="max_records_per_session")
        if self._open_bytes + self._retained_bytes > self.max_held_bytes:  # rare: not a call per run
            self._enforce_bytes(now)
        while len(self._open) > self.max_open_sessions:  # the one just touched is the most recent: never it
            oldest = next(iter(self._open.values()))
            if oldest.root_ended and oldest.traces <= oldest.roots:
                # only waiting out its grace (a backlog consumed faster than sessions are written): it is
                # complete by the shutdown flush's rule, so written as such, not counted as a bound hit
                self._emit(oldest, now, complete=True)
            else:
                self._emit(oldest, now, complete=False, reason="max_open_sessions")
        return rest

    def _joined(self, keys: set[str], trace_id: str, run: list[Held], now: float) -> _Group:
        """The group a run joins when its trace or conversation id was seen: the oldest live one of `keys`
        (the others merged into it), or a continuation of a tombstone's session."""
        groups = [self._reopen(k, now) for k in sorted(keys)]
        live = [g for g in groups if g is not None]
        if not live:
            tomb = next((self._retained.get(k) for k in keys if k in self._retained), None)
            base = (tomb.continuation_of or tomb.key) if tomb else trace_id
            return self._start(base, now, continuation=tomb is not None,
                               replayed=0 <= run[0].segment_pos < self.replay_below)
        group = min(live, key=lambda g: g.created)
        for other in live:
            if other is not group:
                self._merge(group, other)
        return group

    def _enforce_bytes(self, now: float) -> None:
        """Past `max_held_bytes`: drop retained records (oldest first), then write open sessions early."""
        while self._open_bytes + self._retained_bytes > self.max_held_bytes and self._holding:
            self._tombstone(self._retained[self._holding.popitem(last=False)[0]])
        while self._open_bytes + self._retained_bytes > self.max_held_bytes and self._open:
            self._emit(next(iter(self._open.values())), now, complete=False, reason="max_held_bytes")
            while self._holding:  # the session just written is retained: let it go too
                self._tombstone(self._retained[self._holding.popitem(last=False)[0]])

    def _tombstone(self, group: _Group) -> None:
        self._tails.remove(group.key)
        self._retained_records -= group.count
        self._retained_bytes -= group.nbytes
        group.records, group.nbytes, group.count = None, 0, 0

    def _start(self, base: str, now: float, continuation: bool = False, replayed: bool = False) -> _Group:
        key, n = base, 1
        while key in self._open or key in self._retained or (
                self._is_written(key) and not (replayed and self.resumable(key))):
            n += 1
            key = f"{base}~{n}"
        self._counter += 1
        group = _Group(key=key, created=self._counter, last_seen=now)
        if continuation or n > 1:
            group.continuation_of = base
        self._open[key] = group
        return group

    def _reopen(self, key: str, now: float) -> _Group | None:
        """The open group for `key`; a retained one is moved back to open. None for a tombstone."""
        if key in self._open:
            return self._open[key]
        group = self._retained.get(key)
        if group is None or group.records is None:
            return None
        del self._retained[key]
        del self._holding[key]
        self._retained_records -= group.count
        self._retained_bytes -= group.nbytes
        self._open_bytes += group.nbytes
        group.retained_at = 0.0
        group.last_seen = now
        self._open[key] = group
        if group.root_ended:
            self._root_ended[key] = None  # active now: the newest
        self.metrics.inc("wt_otel_sessions_reopened_total")
        return group

    def _merge(self, into: _Group, other: _Group) -> None:
        """Two sessions turned out to share a conversation: one session, the older key."""
        del self._open[other.key]
        self._root_ended.pop(other.key, None)
        into.held.extend(other.held)
        into.nbytes += other.nbytes
        into.count += other.count
        into.traces |= other.traces
        into.convs |= other.convs
        into.roots |= other.roots
        if other.min_pos >= 0 and (into.min_pos < 0 or other.min_pos < into.min_pos):
            into.min_pos = other.min_pos
            heapq.heappush(self._positions, (into.min_pos, into.key))
        into.root_ended = into.root_ended or other.root_ended  # `_attach` (next) files it under `_root_ended`
        into.absorbed += ((other.key,) if self._is_written(other.key) else ()) + other.absorbed
        for t in other.traces:
            self._by_trace[t] = into.key
        for c in other.convs:
            self._by_conv[c] = into.key

    def _attach(self, group: _Group, run: list[Held], trace_id: str, conv: str | None, now: float) -> None:
        group.held.extend(run)
        pos = min(r.segment_pos for r in run) if len(run) > 1 else run[0].segment_pos
        if pos >= 0 and (group.min_pos < 0 or pos < group.min_pos):
            group.min_pos = pos
            heapq.heappush(self._positions, (pos, group.key))
        size = count = 0
        rooted = ended = False
        for record in run:
            size += record_bytes(record)
            if isinstance(record, SpanRefs):
                count += len(record.ordinals)
                for _, op in record.roots:
                    rooted = True
                    ended = ended or op not in INFERENCE_OPERATIONS
            else:
                count += 1
                if not isinstance(record, LogRecord) and not record.parent_span_id:
                    rooted = True
                    ended = ended or operation(record) not in INFERENCE_OPERATIONS
        group.count += count
        if rooted:
            group.roots.add(trace_id)
            if ended:  # an agent root (not a bare inference call): the session ends
                group.root_ended = True
        group.nbytes += size
        self._open_bytes += size
        group.traces.add(trace_id)
        self._by_trace[trace_id] = group.key
        if conv:
            group.convs.add(conv)
            self._by_conv[conv] = group.key
        group.last_seen = now
        self._open.move_to_end(group.key)
        if group.root_ended:
            self._root_ended[group.key] = None
            self._root_ended.move_to_end(group.key)

    # ------------------------------------------------------------------ completion

    def _emit(self, group: _Group, now: float, complete: bool, reason: str | None = None) -> None:
        """Build the Session, hand it to the sink, keep the records for late arrivals."""
        built: _Built | None = None
        if self.join_continuations and not group.join_checked and not group.convs and group.records is not None:
            group.join_checked = True
            target, built = self._continuation(group, now)
            if target is not None:  # written as the next revision of the session it continues
                self._emit(target, now, complete, reason)
                return
        del self._open[group.key]
        self._open_bytes -= group.nbytes
        self._root_ended.pop(group.key, None)
        if reason:
            self.metrics.inc("wt_otel_sessions_flushed_incomplete_total", reason=reason)
        held = group.held
        try:
            if self.keep_by_reference is not None and _unmarked_refs(held):
                indexed = IndexedSession(group.key, list(held), complete and group.continuation_of is None,  # type: ignore[arg-type]
                                         self._warnings(group))
                if self.keep_by_reference(indexed):
                    if self._emitted is not None:
                        self._emitted.add(group.key)
                    self._retain(group, now, tombstone=reason == "max_records_per_session")
                    return
            if built is None:
                records = self._decoded(held)
                spans = attach_logs(_copy(r) for r in records)
                session = build_session(spans, key=group.key)
            else:
                records, spans, session = built
            if session is None:
                self.metrics.inc("wt_otel_records_dropped_total", len(records), reason="no_genai_session")
            else:
                session.complete = complete and group.continuation_of is None
                session.warnings.extend(self._warnings(group))
                self.report(session)
                self.sink(session, spans)
                if self._emitted is not None:
                    self._emitted.add(group.key)
        except Exception:  # one bad session must not sink the others; its records stay retained
            log.exception("session %s: not written", shown(group.key))
            self.metrics.inc("wt_otel_pipeline_errors_total")
        self._retain(group, now, tombstone=reason == "max_records_per_session")

    def _continuation(self, group: _Group, now: float) -> tuple[_Group | None, _Built | None]:
        """The held session `group` continues (import's rule, `wt_otel.ingest.joins`), merged with it, or None;
        and what was built to tell (reused when `group` is written on its own). A session that continues none
        becomes a candidate itself while its records are held."""
        try:
            records = self._decoded(group.held)
            spans = attach_logs(_copy(r) for r in records)
            session = build_session(spans, key=group.key)
        except Exception:  # the write that follows reports it
            return None, None
        built = (records, spans, session)
        if session is None or session.conversation_id:
            return None, built
        sigs = compared(session.messages)[0]
        decision = self._tails.decide(session, sigs)
        if decision.predecessor is None and decision.refused is None and decision.warning:
            group.notes.append(decision.warning)  # links that fan in: joined to nothing, said
        if decision.refused is not None and decision.warning:
            group.notes.append(decision.warning)
            other = self._reopen(decision.refused.key, now)
            if other is not None and decision.warning not in other.notes:
                other.notes.append(decision.warning)
                self._emit(other, now, complete=other.traces <= other.roots)  # a revision that says so
        target = self._reopen(decision.predecessor.key, now) if decision.predecessor is not None else None
        tail = tail_of(session, sigs)
        if target is None:
            if tail is not None:
                self._tails.add(tail)
            return None, built
        self._tails.remove(target.key)
        self._merge(target, group)
        target.join_checked = True
        target.notes += [n for n in group.notes if n not in target.notes]
        if decision.warning and decision.warning not in target.notes:  # joined to the latest of equals
            target.notes.append(decision.warning)
        if tail is not None:
            tail.key = target.key  # the joined transcript compares as the continuation's
            self._tails.add(tail)
        self.metrics.inc("wt_otel_sessions_joined_total", evidence=decision.evidence)
        return target, None

    @staticmethod
    def _warnings(group: _Group) -> list[str]:
        """What the session's own spans cannot say: it continues an earlier one, or absorbed others."""
        said = list(group.notes)
        if group.continuation_of:
            said.append(f"continuation of session {group.continuation_of}: its earlier records were written "
                        "before and are no longer in memory, so this holds only what arrived later")
        if group.absorbed:
            said.append("merged with session(s) written on their own before the shared conversation id was seen: "
                        + ", ".join(group.absorbed))
        return said

    def _decoded(self, held: list[Held]) -> list[Record]:
        """The group's records with its `SpanRefs` decoded from the segment log (`decode_refs`), in order."""
        refs = [r for r in held if isinstance(r, SpanRefs)]
        if not refs:
            return held  # type: ignore[return-value]
        if self.decode_refs is None:
            raise RuntimeError("spans kept by reference but no segment log to decode them from")
        decoded = iter(self.decode_refs(refs))
        records: list[Record] = []
        for r in held:
            if isinstance(r, SpanRefs):
                records.extend(next(decoded) for _ in r.ordinals)
            else:
                records.append(r)
        return records

    def report(self, session: Session) -> None:
        """Log what the importer did not understand, once per session (revisions repeat it), and count it.
        The log gets the first few of each kind a minute and says how many it left out."""
        for d in fresh_diagnostics(session, self._warned):
            self.metrics.inc("wt_otel_session_warnings_total", kind=d["kind"])
            show, held = self._throttle.admit(d["kind"])
            if held:
                _say_held_back(d["kind"], held)
            if show:
                log.warning("session %s: %s", shown(session.key), shown(d["message"]))

    def _retain(self, group: _Group, now: float, tombstone: bool) -> None:
        if tombstone or self.late_window <= 0:
            group.records, group.nbytes, group.count = None, 0, 0
            self._tails.remove(group.key)
        group.retained_at = now
        self._retained[group.key] = group
        if group.records is not None:
            self._holding[group.key] = None
            self._retained_records += group.count
            self._retained_bytes += group.nbytes
        while self._retained_records > self.max_retained_records or (
                self._holding and self._open_bytes + self._retained_bytes > self.max_held_bytes):
            # over the record budget: the oldest keeps its ids, so a late record becomes a continuation.
            # `_holding` skips the tombstones in O(1); scanning `_retained` for them made this quadratic.
            self._tombstone(self._retained[self._holding.popitem(last=False)[0]])
        while len(self._retained) > self.max_retained_sessions:
            self._forget(next(iter(self._retained)))

    def _forget(self, key: str) -> None:
        self._tails.remove(key)
        group = self._retained.pop(key)
        self._holding.pop(key, None)
        self._retained_records -= group.count
        self._retained_bytes -= group.nbytes
        for t in group.traces:
            if self._by_trace.get(t) == key:
                del self._by_trace[t]
        for c in group.convs:
            if self._by_conv.get(c) == key:
                del self._by_conv[c]


def _create(config: AssemblerConfig, ctx: StageContext, sink: SessionSink) -> SessionAssembler:
    """The assembler asks the store (if a session stage made one) whether a key was written before."""
    store = ctx.store
    return SessionAssembler.from_config(sink, config, ctx.metrics, is_written=store.has_key if store else None)


STAGE = StageType("assembler", "assembler", _create, AssemblerConfig,
                  description="group records into sessions and say when each is complete")


def _say_held_back(kind: str, held: int) -> None:
    log.warning("%d more session warning(s) of kind %r were not logged (counted in wt_otel_session_warnings_total)",
                held, kind)
