"""Admission control: whether a batch may enter the pipeline, in one place.

Every refusal here is decided before anything is acknowledged, so a refused
client keeps its data and retries; once admitted, nothing is dropped. The
rules, in order:

1. the store is degraded (the data dir cannot be written, e.g. a full disk):
   refuse everything (UNAVAILABLE -> 503 / UNAVAILABLE + retry info) until a
   write succeeds again, so nothing more is acknowledged than can be kept;
2. a batch larger than its share of the budget (`max_batch_bytes`,
   `max_batch_records`, `max_batch_sessions`) can never fit fairly: refused
   as TOO_LARGE (413 / RESOURCE_EXHAUSTED without retry info: split it);
3. memory, in bytes, across the queue and what the processors hold (open
   sessions, records retained for late spans): beyond `max_bytes`, FULL
   (429 / RESOURCE_EXHAUSTED + retry info);
4. fairness under pressure: each client (peer address) is counted the traces
   it starts per `session_window` seconds (the distinct trace ids of each
   batch). Once the budgets are `fair_share_pressure` full, a client past
   `max_sessions_per_client` gets FULL, so the heavy exporter backs off while
   the others still get in; without pressure nobody is throttled, nor is a
   client that is alone in the window (one collector forwarding everything is
   a single client and must not be capped below serve's capacity).

5. the writer's backlog, predicted (issue 31): a request's cost is its traces x
   the writer's measured seconds per session (`write_cost`). One that would
   take the backlog (what the writer has, what is queued, plus this) past
   `max_backlog_seconds` is FULL -- unless its client holds less than its fair
   share of the backlog (`max_backlog_seconds` / clients holding some), up to
   twice the limit: so one client's burst does not get every other client 429
   for seconds. Each client is charged what it was admitted; the charges
   drain with the backlog (scaled down to it). A request costing more than
   `max_backlog_seconds` alone is TOO_LARGE (split it) when other clients
   sent within `session_window`, as it would hold them all behind it; a lone
   client's goes in once the backlog is under half the limit.

`gate()` runs the cheap part of these rules *before* a request is decoded,
on its size on the wire: decoding is most of a receiver's cost and holds the
GIL, so a request that will be refused must be refused before it is decoded,
or at overload the receivers starve the one thread that writes sessions and
goodput collapses. It refuses (FULL, with retry info) when the writer is more
than `max_backlog_seconds` behind (the oldest queued batch has waited that
long, or writing the sessions waiting would take that long) and the client
holds its fair share of that (rule 5), or when the request's estimated decoded size
(`DECODED_PER_WIRE_BYTE` x its bytes) would not fit the memory budget; the
exact checks run again after decoding.

Kept free of transport and processor types so the ingest redesign can reuse it.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wt_otel._util.sizeof import record_bytes

MiB = 1024 * 1024

# Decoded records (SpanRecords with attribute dicts) per byte of request, as `record_bytes` estimates
# them and tracemalloc confirms (bench requests of chat spans: 2.06 estimated, 1.99 measured for
# protobuf; OTLP/JSON is about twice as long on the wire, 1.1). Used only by `gate()`.
DECODED_PER_WIRE_BYTE = {"protobuf": 2.0, "json": 1.1}


class Verdict(enum.Enum):
    ADMIT = "admit"
    FULL = "full"  # retry later
    TOO_LARGE = "too_large"  # never fits: split the batch
    UNAVAILABLE = "unavailable"  # the store cannot write; retry later


@dataclass(slots=True)
class Decision:
    verdict: Verdict
    reason: str = ""
    nbytes: int = 0
    cost: float = 0.0  # predicted seconds of writing (rule 5)


@dataclass
class BudgetConfig:
    max_bytes: int = 256 * MiB  # queue + open sessions + retained records
    max_batch_fraction: float = 0.25  # one batch may take at most this share of each budget
    max_records: int = 100_000  # queued records (the old record bound)
    max_sessions_per_client: int = 2_500
    session_window: float = 30.0
    fair_share_pressure: float = 0.5  # the per-client quota bites once the budgets are this full
    max_clients: int = 1024  # tracked peers (LRU)
    max_backlog_seconds: float = 2.0  # the writer's backlog beyond which requests are refused undecoded

    @property
    def max_batch_bytes(self) -> int:
        return max(1, int(self.max_bytes * self.max_batch_fraction))

    @property
    def max_batch_records(self) -> int:
        # a small queue (tests, tiny deployments) still takes a batch that fits it whole
        return max(min(self.max_records, 1000), int(self.max_records * self.max_batch_fraction))


class AdmissionControl:
    """Thread-safe; `held()` reports the bytes the processors hold (0 when they do not say)."""

    def __init__(self, config: BudgetConfig | None = None, held: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or BudgetConfig()
        self.held = held or (lambda: 0)
        self.clock = clock
        self._lock = threading.Lock()
        self._degraded: dict[str, str] = {}
        self._clients: OrderedDict[str, deque[tuple[float, int]]] = OrderedDict()
        self._client_counts: dict[str, int] = {}
        self._debts: dict[str, float] = {}  # client -> predicted seconds of the backlog it was admitted (rule 5)

    # ------------------------------------------------------------------ health

    def set_degraded(self, component: str, reason: str | None) -> None:
        """`reason` None clears it. While any component is degraded, nothing is admitted."""
        with self._lock:
            if reason is None:
                self._degraded.pop(component, None)
            else:
                self._degraded[component] = reason

    @property
    def degraded(self) -> dict[str, str]:
        with self._lock:
            return dict(self._degraded)

    # ------------------------------------------------------------------ admission

    def gate(self, estimated_bytes: int, queued_bytes: int, backlog_seconds: float,
             client: str | None = None) -> Decision:
        """Before decoding: whether a request of ~`estimated_bytes` decoded may be decoded at all.

        Cheap (no walk over records): the store's health, the writer's backlog (with `client`'s share of it,
        rule 5), the memory budget. The estimate is capped at one batch's share, so a request the exact check
        would admit on an empty queue is never refused here for an over-estimate."""
        cfg = self.config
        with self._lock:
            if self._degraded:
                name, reason = next(iter(self._degraded.items()))
                return Decision(Verdict.UNAVAILABLE, f"{name}: {reason}")
            behind = backlog_seconds > cfg.max_backlog_seconds and not self._fair_locked(client, backlog_seconds, 0)
        if behind:
            return Decision(Verdict.FULL, self._behind(backlog_seconds, client))
        held = self.held()
        if queued_bytes + held + min(estimated_bytes, cfg.max_batch_bytes) > cfg.max_bytes:
            return Decision(Verdict.FULL, f"the memory budget is spent ({queued_bytes + held} of {cfg.max_bytes} "
                                          "bytes held by the queue and open sessions)")
        return Decision(Verdict.ADMIT)

    def check(self, records: Sequence[object], queued_bytes: int, queued_records: int,
              client: str | None = None, backlog_seconds: float = 0.0,
              write_cost: Callable[[int], float] | None = None) -> Decision:
        """Whether `records` may be queued now; does not reserve (the caller does, under its lock).

        `backlog_seconds`: the writer's work now (what it has and what is queued); `write_cost(traces)`: the
        predicted seconds of writing that many more sessions (rule 5; None or 0: not predicted). An admitted
        request is charged to `client`."""
        cfg = self.config
        with self._lock:
            if self._degraded:
                name, reason = next(iter(self._degraded.items()))
                return Decision(Verdict.UNAVAILABLE, f"{name}: {reason}")
        n = len(records)
        if n > cfg.max_batch_records:
            return Decision(Verdict.TOO_LARGE, f"a batch of {n} records is more than one client may send at once "
                                               f"({cfg.max_batch_records}); split it into smaller batches")
        nbytes = sum(record_bytes(r) for r in records)
        if nbytes > cfg.max_batch_bytes:
            return Decision(Verdict.TOO_LARGE, f"a batch holding ~{nbytes} bytes is more than one client may send "
                                               f"at once ({cfg.max_batch_bytes} bytes); split it", nbytes)
        traces = len({getattr(r, "trace_id", None) for r in records} - {None})
        if traces > cfg.max_sessions_per_client:
            return Decision(Verdict.TOO_LARGE, f"a batch of {traces} traces is more than one client may open "
                                               f"({cfg.max_sessions_per_client} per {cfg.session_window:g}s); "
                                               "split it", nbytes)
        cost = write_cost(traces) if write_cost is not None and traces else 0.0
        if cost and backlog_seconds + cost > cfg.max_backlog_seconds:
            with self._lock:
                if cost > cfg.max_backlog_seconds:  # never fits: it would hold everyone else behind it
                    others = client is None or self._others_active(client, self.clock())
                    fair = not others and backlog_seconds <= cfg.max_backlog_seconds / 2
                else:
                    others, fair = False, self._fair_locked(client, backlog_seconds, cost)
            if others:
                return Decision(Verdict.TOO_LARGE, f"a batch of {traces} traces would take the writer ~{cost:.1f}s, "
                                                   f"more than max_backlog_seconds ({cfg.max_backlog_seconds:g}s), "
                                                   "and hold every other client behind it; split it", nbytes)
            if not fair:
                return Decision(Verdict.FULL, self._behind(backlog_seconds + cost, client), nbytes)
        if queued_records and queued_records + n > cfg.max_records:
            return Decision(Verdict.FULL, f"the pipeline queue is full ({queued_records} records)", nbytes)
        held = self.held()
        if queued_bytes + held + nbytes > cfg.max_bytes:
            return Decision(Verdict.FULL, f"the memory budget is spent ({queued_bytes + held} of {cfg.max_bytes} "
                                          "bytes held by the queue and open sessions)", nbytes)
        pressure = max(queued_records / cfg.max_records, (queued_bytes + held) / cfg.max_bytes)
        if client is not None and traces and not self._take_sessions(client, traces,
                                                                     pressure >= cfg.fair_share_pressure):
            return Decision(Verdict.FULL, f"wt-otel is busy and this client started more than "
                                          f"{cfg.max_sessions_per_client} traces in {cfg.session_window:g}s",
                            nbytes)
        if cost and client is not None:
            with self._lock:
                self._drain_locked(backlog_seconds)
                self._debts[client] = self._debts.get(client, 0.0) + cost
        return Decision(Verdict.ADMIT, "", nbytes, cost)

    # ------------------------------------------------------------------ the backlog, per client (rule 5)

    def _fair_locked(self, client: str | None, backlog: float, cost: float) -> bool:
        """Past max_backlog_seconds: whether `client` may still add `cost` seconds because it holds less than its
        fair share of the backlog (up to twice the limit). Drains the charges to the backlog first."""
        cfg = self.config
        self._drain_locked(backlog)
        if client is None or not self._debts or backlog + cost > 2 * cfg.max_backlog_seconds:
            return False  # (no charges: the backlog's cost is not predicted, so nobody's share is known)
        holders = len(self._debts) + (client not in self._debts)
        return self._debts.get(client, 0.0) + cost <= cfg.max_backlog_seconds / holders

    def _drain_locked(self, backlog: float) -> None:
        """The charges are never more than the backlog: what the writer did meanwhile shrinks each alike (and
        an empty backlog clears them, so the map holds only clients with work waiting)."""
        total = sum(self._debts.values())
        if total > backlog:
            scale = backlog / total if total else 0.0
            self._debts = {c: d * scale for c, d in self._debts.items() if d * scale > 1e-4}

    def _behind(self, backlog: float, client: str | None) -> str:
        with self._lock:
            held = self._debts.get(client, 0.0) if client is not None else 0.0
        share = f"; this client's requests hold ~{held:.1f}s of it" if held >= 0.05 else ""
        return (f"wt-otel's writer is behind ({backlog:.1f}s of work waiting, more than max_backlog_seconds "
                f"{self.config.max_backlog_seconds:g}s{share})")

    def _take_sessions(self, client: str, traces: int, enforce: bool) -> bool:
        cfg = self.config
        now = self.clock()
        with self._lock:
            window = self._clients.get(client)
            if window is None:
                window = self._clients[client] = deque()
                self._client_counts[client] = 0
                while len(self._clients) > cfg.max_clients:
                    old, _ = self._clients.popitem(last=False)
                    self._client_counts.pop(old, None)
            self._clients.move_to_end(client)
            while window and now - window[0][0] >= cfg.session_window:
                self._client_counts[client] -= window.popleft()[1]
            if enforce and self._client_counts[client] + traces > cfg.max_sessions_per_client \
                    and self._others_active(client, now):
                return False
            window.append((now, traces))
            self._client_counts[client] += traces
            return True

    def _others_active(self, client: str, now: float) -> bool:
        """Whether another client sent within the window (under the lock). A lone client is never held to
        its quota: there is nobody to be fair to, and the quota would cap serve below its capacity (the
        memory budget and the backlog gate still bound it). The most recent other is next to the end."""
        for other in reversed(self._clients):
            if other != client:
                window = self._clients[other]
                return bool(window) and now - window[-1][0] < self.config.session_window
        return False
