"""Render and write sessions in worker processes, off serve's pipeline thread.

Why: rendering the six files and writing them durably cost about as much CPU as everything else in the
pipeline, and in the pipeline thread they hold the GIL the receivers need. A small pool of worker processes
(`datadir.workers`, default 2) takes that off: the pipeline thread assembles a session, the data-dir store
hands it off (`RenderJob`, pickled over a pipe) and goes on; a worker renders (`write_job`, the very function
the in-process mode calls, so both write the same bytes), writes the directory durably and reports the files.
The store (the parent) owns the index and appends the lines of every finished job in order, one fsync per
batch (exporters/datadir.py).

Workers start from a forkserver (never a fork of serve, a threaded process): each worker is a fork of a
clean server process that preloaded this module. Each worker takes one job at a time, so the parent always
knows which session a worker held when it died: that session is quarantined, the worker replaced, nothing
else is lost. `close()` asks every worker to exit after its job, then terminates what does not.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import multiprocessing.connection
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

from wt_otel._util import safejson
from wt_otel._util.fsutil import write_directory
from wt_otel.exporters.rawfile import RAW_FILE, encode_records
from wt_otel.exporters.scenario_dir import render
from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord

log = logging.getLogger("wt_otel.render_pool")

META_FILE = "session.json"
DEFAULT_TARGET = "wt_otel.exporters.render_pool:write_job"


@dataclass
class RenderJob:
    """One session revision to write into `dest`: rendered (`session`), or kept raw (`spans` + `meta`)."""

    dest: str
    slug: str
    session: Session | None = None
    spans: list[SpanRecord] | None = None
    meta: dict[str, Any] | None = None

    @property
    def raw(self) -> bool:
        return self.session is None


def job_files(job: RenderJob, render_fn: Callable[[Session, str], dict[str, str | bytes]] | None = None
              ) -> dict[str, str | bytes]:
    """The files of one job: the six of `wt-otel import`, or the records and the session's own fields."""
    if job.session is not None:
        return (render_fn or render)(job.session, job.slug)
    return {RAW_FILE: encode_records(job.spans or []), META_FILE: safejson.dumps(job.meta or {})}


def write_job(job: RenderJob, write_dir: Callable[..., None] = write_directory) -> list[str]:
    """Render (or encode) and write one job durably; returns the file names. Raises what went wrong."""
    files = job_files(job)
    write_dir(Path(job.dest), files, force=True, durable=True)
    return sorted(files)


# --------------------------------------------------------------------------------------------- the worker


def _load(target: str) -> Callable[[RenderJob], list[str]]:
    module, _, attr = target.partition(":")
    fn: Callable[[RenderJob], list[str]] = getattr(importlib.import_module(module), attr)
    return fn


def _worker(conn: multiprocessing.connection.Connection, target: str) -> None:
    """One job at a time: (seq, job) in, (seq, outcome, detail) out; None or a closed pipe ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C drains through the parent, not here
    fn = _load(target)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        seq, job = msg
        try:
            reply: tuple[Any, ...] = (seq, "ok", fn(job), None)
        except OSError as e:
            reply = (seq, "oserror", e.errno, f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - reported to the parent, which quarantines the session
            reply = (seq, "error", type(e).__name__, f"{type(e).__name__}: {e}"[:2000])
        try:
            conn.send(reply)
        except (OSError, ValueError):
            return


@dataclass
class Outcome:
    """What came back for job `seq`: `ok` (files), `oserror` (errno, message), `error` (class name, message),
    `died` (the worker's exit code, message), or `requeue` (its worker died before taking it)."""

    seq: int
    kind: str
    detail: Any
    message: str | None = None


@dataclass
class _Slot:
    process: Any
    conn: multiprocessing.connection.Connection
    inbox: queue.SimpleQueue[tuple[int, bytes] | None] = field(default_factory=queue.SimpleQueue)
    busy: int | None = None  # the seq of the job it holds
    since: float = 0.0  # when it got that job (monotonic)
    hung: bool = False


def _io(slot: _Slot, outbox: queue.SimpleQueue[tuple[str, _Slot, Any]]) -> None:
    """One thread per worker does its pipe I/O, without the GIL while it waits: the pipeline thread only
    pickles a job and queues it (a busy 2-core machine makes each pipe round trip cost milliseconds)."""
    while True:
        item = slot.inbox.get()
        if item is None:
            return
        seq, data = item
        try:
            slot.conn.send_bytes(data)
        except (OSError, ValueError):  # died before it took the job: not the job's fault
            outbox.put(("requeue", slot, seq))
            return
        try:
            outbox.put(("reply", slot, slot.conn.recv()))
        except (EOFError, OSError, ValueError):
            outbox.put(("died", slot, seq))
            return


class RenderPool:
    """`workers` processes; `idle()`, `send(seq, job)`, `poll(timeout)` -> outcomes, `close()`. The data-dir
    store calls it under its lock (one caller at a time); each worker's pipe is served by its own thread."""

    def __init__(self, workers: int, target: str = DEFAULT_TARGET, on_restart: Callable[[], None] | None = None,
                 job_timeout: float = 120.0) -> None:
        if workers < 1:
            raise ValueError("a render pool needs at least one worker (datadir.workers: 0 renders in-process)")
        self.target = target
        self.on_restart = on_restart
        self.job_timeout = job_timeout  # a session that hangs its worker (a pathological regex, say) is poison too
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["wt_otel.exporters.render_pool", target.partition(":")[0]])
        self._outbox: queue.SimpleQueue[tuple[str, _Slot, Any]] = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        try:
            for _ in range(workers):
                self._slots.append(self._start())
        except BaseException:
            self.close(0)
            raise

    def _start(self) -> _Slot:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker, args=(child, self.target), name="wt-otel-render", daemon=True)
        process.start()
        child.close()
        slot = _Slot(process, parent)
        threading.Thread(target=_io, args=(slot, self._outbox), name="wt-otel-render-io", daemon=True).start()
        return slot

    @property
    def size(self) -> int:
        return len(self._slots)

    @property
    def busy(self) -> int:
        return sum(1 for s in self._slots if s.busy is not None)

    def idle(self) -> bool:
        return any(s.busy is None for s in self._slots)

    def send(self, seq: int, job: RenderJob) -> None:
        """Hand `job` to an idle worker. Raises what pickling the job raised (the caller quarantines it)."""
        data = bytes(ForkingPickler.dumps((seq, job)))
        slot = next(s for s in self._slots if s.busy is None)
        slot.busy, slot.since = seq, time.monotonic()
        slot.inbox.put((seq, data))

    def poll(self, timeout: float = 0.0) -> list[Outcome]:
        """Outcomes ready within `timeout` seconds; a dead worker yields `died` for its job and is replaced
        (`requeue` when it died before taking the job), a worker past `job_timeout` is killed first."""
        out: list[Outcome] = []
        now = time.monotonic()
        for slot in self._slots:
            if slot.busy is not None and not slot.hung and now - slot.since > self.job_timeout:
                slot.hung = True
                slot.process.kill()  # its I/O thread then reads EOF and reports it
        if not any(s.busy is not None for s in self._slots):
            return out
        items: list[tuple[str, _Slot, Any]] = []
        try:
            items.append(self._outbox.get(timeout=timeout) if timeout > 0 else self._outbox.get_nowait())
            while True:
                items.append(self._outbox.get_nowait())
        except queue.Empty:
            pass
        for what, slot, detail in items:
            if slot not in self._slots:
                continue  # a slot already replaced
            if what == "reply":
                seq, kind, result, message = detail
                slot.busy = None
                out.append(Outcome(seq, kind, result, message))
                continue
            slot.process.join(1)
            code = slot.process.exitcode
            why = f"did not finish within {self.job_timeout:g} s" if slot.hung else f"died with {_exit_text(code)}"
            if what == "requeue":
                out.append(Outcome(detail, "requeue", code, f"render worker {why} before it took this session"))
            else:
                out.append(Outcome(detail, "died", code,
                                   f"render worker (pid {slot.process.pid}) {why} while writing this session"))
            self._replace(slot, why)
        return out

    def _replace(self, slot: _Slot, why: str) -> None:
        slot.inbox.put(None)
        slot.conn.close()
        fresh = self._start()
        self._slots[self._slots.index(slot)] = fresh
        log.warning("render worker %s %s: replaced by %s", slot.process.pid, why, fresh.process.pid)
        if self.on_restart:
            self.on_restart()

    def close(self, timeout: float = 10.0) -> None:
        """Ask each worker to exit after its job; kill the ones still running after `timeout`."""
        for slot in self._slots:
            with contextlib.suppress(OSError, ValueError):
                slot.conn.send(None)
        for slot in self._slots:
            slot.process.join(timeout)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join(1)
            slot.inbox.put(None)
            slot.conn.close()
        self._slots = []


def _exit_text(code: int | None) -> str:
    if code is None:
        return "an unknown status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"

