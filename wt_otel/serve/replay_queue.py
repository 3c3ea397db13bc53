"""The automatic-replay queue of `wt-otel serve`: persistent, bounded, deduplicated, and never retrying.

One append-only file in the data dir, `replay-queue.ndjsonl`, one JSON line per event:

    {"v": 1, "event": "enqueued", "job", "ref", "scenario", "session", "at", ...}   an incident to replay
    {"v": 1, "event": "started",  "job", "at"}                                      the worker took it
    {"v": 1, "event": "done",     "job", "at", "verdict", "detail", ...}            its result (ERROR included)
    {"v": 1, "event": "refused",  "ref", "at", "reason"}                            not queued (queue full)

The state is the replay of those lines, so a restart resumes where the last
process stopped: `enqueued` jobs run, `done` ones never run again. A job found
`started` but not `done` was cut short (kill -9, or SIGTERM's bounded wait ran
out); it is reported in `interrupted` for the owner to close as ERROR: nothing
is retried behind anyone's back (a replay drives a real agent endpoint, and an
invisible retry loop on a broken endpoint is how a queue melts down).

Why these rules:

- dedupe by origin ref (the envelope's `source.ref`: the incident id, else the
  first trace id). A late span rewrites a session as revision N+1; that is the
  same incident, not a new one, so it does not queue again. A `refused` ref is
  not remembered: a later revision, once there is room, gets in.
- bounded: `max_pending` jobs not yet done; beyond that `admit` says FULL and
  the caller logs and counts it. Unbounded work queued by telemetry volume
  would let one noisy flag rule fill the disk and the agent's day.
- each line is one write(2), flushed and fsynced, like the data-dir index (one
  journal, `wt_otel._util.journal`); a torn last line (a crash mid-write) is
  dropped at start with a note.
"""

from __future__ import annotations

import enum
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wt_otel._util.clock import utc_now_iso
from wt_otel._util.journal import Journal

QUEUE_FILE = "replay-queue.ndjsonl"

__all__ = ["QUEUE_FILE", "QueueAdmission", "Job", "ReplayQueue", "read_events"]


class QueueAdmission(enum.Enum):
    OK = "ok"
    DUPLICATE = "duplicate"
    FULL = "full"


@dataclass
class Job:
    """One incident's replay, as the queue file tells it."""

    id: str
    ref: str
    scenario: str  # the scenario directory, relative to the data dir
    enqueued_at: str
    state: str = "pending"  # pending | running | done
    started_at: str | None = None
    done_at: str | None = None
    verdict: str | None = None
    detail: str | None = None
    info: dict[str, Any] = field(default_factory=dict)  # the enqueued line's other fields (session, timings)


def read_events(path: Path) -> tuple[list[dict[str, Any]], list[str], bool]:
    """(events, problems, torn_tail): every parseable line; a bad line is a problem, never fatal."""
    read = Journal(path).read(_event, keep_torn=False, what="not a queue event")
    return read.records, read.problems, read.torn


def _event(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise ValueError("needs an object with `event`")
    return obj


class ReplayQueue:
    """The queue over `<data_dir>/replay-queue.ndjsonl`; thread-safe (the pipeline adds, a worker takes).

    One process per data dir (the data-dir store holds its lock), so there is no cross-process locking here.
    """

    def __init__(self, data_dir: Path | str, max_pending: int = 100) -> None:
        self.path = Path(data_dir) / QUEUE_FILE
        self.max_pending = max_pending
        self.recovery: list[str] = []  # what start-up found and repaired, for the log
        self.jobs: dict[str, Job] = {}
        self._by_ref: dict[str, Job] = {}
        self._cond = threading.Condition()
        self._closed = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        events, problems, torn = read_events(self.path)
        self.recovery += problems
        self._journal = Journal(self.path)  # its descriptor is held for the queue's lifetime
        if torn:
            self._journal.repair()
        self._apply(events)

    # ---------------------------------------------------------------- state from events

    def _apply(self, events: Iterable[dict[str, Any]]) -> None:
        for e in events:
            kind, job = e["event"], self.jobs.get(str(e.get("job")))
            if kind == "enqueued" and isinstance(e.get("ref"), str) and e.get("job"):
                info = {k: v for k, v in e.items() if k not in ("v", "event", "job", "ref", "scenario", "at")}
                job = Job(str(e["job"]), e["ref"], str(e.get("scenario") or ""), str(e.get("at")), info=info)
                self.jobs[job.id] = job
                self._by_ref.setdefault(job.ref, job)
            elif kind == "started" and job is not None and job.state == "pending":
                job.state, job.started_at = "running", e.get("at")
            elif kind == "done" and job is not None:
                job.state, job.done_at, job.verdict, job.detail = "done", e.get("at"), e.get("verdict"), e.get("detail")

    def _append(self, event: dict[str, Any]) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: the queue is closed")
        self._journal.append({"v": 1, **event})

    # ---------------------------------------------------------------- the producer side

    @property
    def pending(self) -> int:
        """Jobs not done yet (waiting or running): what the bound counts."""
        with self._cond:
            return sum(1 for j in self.jobs.values() if j.state != "done")

    def known(self, ref: str) -> Job | None:
        """The job already queued (or replayed) for this origin ref, if any."""
        with self._cond:
            return self._by_ref.get(ref)

    def admit(self, ref: str) -> QueueAdmission:
        """May an incident with this ref be queued? Ask before importing it (an import is not free)."""
        with self._cond:
            if ref in self._by_ref:
                return QueueAdmission.DUPLICATE
            if sum(1 for j in self.jobs.values() if j.state != "done") >= self.max_pending:
                return QueueAdmission.FULL
            return QueueAdmission.OK

    def enqueue(self, ref: str, scenario: str, **info: Any) -> Job:
        """Queue a replay of `scenario` (relative to the data dir); raises ValueError for a known ref."""
        with self._cond:
            if ref in self._by_ref:
                raise ValueError(f"incident {ref!r} is already queued or replayed (job {self._by_ref[ref].id})")
            job = Job(uuid.uuid4().hex[:12], ref, scenario, utc_now_iso(), info=dict(info))
            self._append({"event": "enqueued", "job": job.id, "ref": ref, "scenario": scenario,
                          "at": job.enqueued_at, **info})
            self.jobs[job.id] = job
            self._by_ref[ref] = job
            self._cond.notify_all()
            return job

    def refuse(self, ref: str, reason: str) -> None:
        """Record that an incident was not queued; the ref is not remembered (a later revision may get in)."""
        with self._cond:
            self._append({"event": "refused", "ref": ref, "at": utc_now_iso(), "reason": reason})

    # ---------------------------------------------------------------- the worker side

    def interrupted(self) -> list[Job]:
        """Jobs a previous process started and never finished (for the owner to close as ERROR)."""
        with self._cond:
            return [j for j in self.jobs.values() if j.state == "running"]

    def take(self, timeout: float | None = None) -> Job | None:
        """The oldest waiting job, marked started (a `started` line); None when none came within `timeout`."""
        with self._cond:
            job = self._next()
            if job is None:
                self._cond.wait(timeout)
                job = self._next()
            if job is None:
                return None
            job.state, job.started_at = "running", utc_now_iso()
            self._append({"event": "started", "job": job.id, "at": job.started_at})
            return job

    def _next(self) -> Job | None:
        return next((j for j in self.jobs.values() if j.state == "pending"), None)

    def finish(self, job: Job, verdict: str, detail: str | None = None, **info: Any) -> bool:
        """Record a job's result; False (and nothing written) when it is already done."""
        with self._cond:
            if job.state == "done" or self._closed:
                return False
            job.state, job.done_at, job.verdict, job.detail = "done", utc_now_iso(), verdict, detail
            self._append({"event": "done", "job": job.id, "at": job.done_at, "verdict": verdict, "detail": detail,
                          **info})
            self._cond.notify_all()
            return True

    def wake(self) -> None:
        """Wake a worker blocked in `take` (it is stopping)."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._journal.close()
