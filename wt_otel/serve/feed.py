"""The session core's input when the receivers run in a process of their own: the entries they made durable.

`ReceiverProcess` starts `wt_otel.serve.receiver_process` (its module doc has the protocol), and feeds the
session core from it: for each `("entry", seq, pos)` it reads the entry back from the segment log and hands
its records to the pipeline, as the start-up replay does (`entry_records`: the span index's `SpanRefs` when
serve keeps sessions by reference, else the decoded records). Nothing else crosses: the receiver process
never sees a session, the session core never sees a socket. A status goes back whenever the pipeline has
consumed more (what it consumed, the lowest position it still needs, its writer's backlog, bytes held,
seconds per session, its degraded components), so the receivers admit on the session core's state, and
each side's metrics go to the other every 0.1 s, so /metrics (served by the receiver process) shows both.

If the receiver process exits on its own, `failed` says why and `wt-otel serve` exits 1: a supervisor
restarts it, and the start replays what was acknowledged. So does a live entry that cannot be read back (EIO): it
stays pinned, never skipped (a replayed one that cannot be read is skipped, as before).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from wt_otel.model.spans import Record, SpanRefs, count
from wt_otel.serve.config import ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.segments import SEGMENTS, SIGNALS, read_entry, split

log = logging.getLogger("wt_otel.serve.feed")

START_TIMEOUT = 120.0  # seconds for the receiver process to open (repair, checksum) the log and bind its ports,
# and, while it replays the log, the longest silence (no entry sent, none consumed): a replay of gigabytes takes longer
STATUS_EVERY = 0.005  # at most one status per this many seconds (they coalesce under load)
METRICS_EVERY = 0.1


def entry_records(signal: str, pos: int, data: bytes, screen: Any,
                  metrics: Metrics | None = None) -> list[Record | SpanRefs] | None:
    """The records of one segment-log entry as the pipeline takes them: the span index's `SpanRefs` of the spans
    the GenAI filter keeps when `screen` is given (serve keeps sessions by reference), else the decoded records,
    each carrying `pos`. None when the entry cannot be read as an OTLP request (said by the caller). The spans
    the screen drops are counted in `metrics`, as the pipeline's filter counts those it drops."""
    from wt_otel.serve.receivers.common import Encoding, MalformedRequest, Signal, decode, index_refs

    indexed = index_refs(data, screen, pos) if screen is not None and signal == "traces" else None
    kept: Sequence[Record | SpanRefs]
    if indexed is not None:
        kept = indexed[0]
        if metrics is not None and (dropped := indexed[1] - count(kept)):
            metrics.inc("wt_otel_records_dropped_total", dropped, reason="not_genai")
    else:
        try:
            kept = decode(Signal(signal), data, Encoding.PROTOBUF).records
        except MalformedRequest:
            return None
        if screen is not None:  # as the receivers do: the filter knows a log's GenAI trace before the next entry
            screen.note_decoded(kept)  # is screened here, not once the pipeline consumed this one (it lags)
    for record in kept:
        record.segment_pos = pos
    return list(kept)


class ReceiverProcess:
    """The receiver process, seen from the session core: `open`, `start`, then `stop` and `close` (in that order).

    Has what `Receivers` has for the server (`grpc_port`, `http_port`, `stop(grace)`)."""

    def __init__(self, config: ServeConfig, metrics: Metrics) -> None:
        self.config, self.metrics = config, metrics
        self.grpc_port: int | None = None
        self.http_port: int | None = None
        self.pid: int | None = None
        self.failed: str | None = None  # why the receiver process exited on its own (serve then exits 1)
        self.recovery: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: deque[tuple[int, int | None]] = deque()  # (seq, position or None: nothing to consume)
        self._consumed = 0
        self._changed = threading.Event()
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._closed = threading.Event()
        self._done = False
        self._replay_end = 0
        self._replayed = [0, 0, 0]  # requests, records, unreadable
        self._answer: tuple | None = None
        self._heard = 0.0  # when the receiver process last sent something or the pipeline consumed (monotonic)
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ start

    def open(self) -> tuple[int, int, list[str]]:
        """Start the process; it opens (repairs) the segment log. Returns (checkpoint position, replay end, what
        it repaired). Raises RuntimeError with the process's reason."""
        parent, child = socket.socketpair()
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "wt_otel.serve.receiver_process", str(child.fileno())],
                                          pass_fds=[child.fileno()])
        finally:
            child.close()
        self.pid = self._proc.pid
        self._conn = Connection(parent.detach())
        root = logging.getLogger()
        json_format = any(type(h.formatter).__name__ == "JsonFormatter" for h in root.handlers)
        level = logging.getLogger("wt_otel").getEffectiveLevel()
        self._send(("start", self.config.model_dump_json(), level, json_format))
        answer = self._expect("opened")
        _, checkpoint, replay_end, recovery = answer
        self._replay_end = replay_end
        return checkpoint, replay_end, list(recovery)

    def start(self, queue: Pipeline, screen: Any, by_reference: bool, needed: Callable[[], int],
              state: Callable[[], tuple[float, int, float, dict[str, str]]]) -> None:
        """Feed `queue` from the process (replayed entries first), report to it, and wait until its receivers
        listen. `needed()`: the lowest position the session core holds; `state()`: (writer backlog s, bytes held,
        seconds per session, degraded components). Raises RuntimeError with the process's reason."""
        self._queue, self._screen, self._needed, self._state = queue, screen, needed, state
        queue.on_consumed = self._on_consumed
        self._threads = [threading.Thread(target=self._read, name="wt-otel-feed", daemon=True),
                         threading.Thread(target=self._report, name="wt-otel-status", daemon=True)]
        for t in self._threads:
            t.start()
        self._heard = time.monotonic()
        self._send(("go", by_reference))
        # the replay comes first and takes as long as the log past the checkpoint: only silence is a failure (a
        # deadline on the whole start failed every restart of a long backlog, and no checkpoint moved meanwhile)
        while not self._ready.wait(0.1):
            if self.failed is not None or time.monotonic() - self._heard > START_TIMEOUT:
                self._kill()
                raise RuntimeError(self.failed or f"the receiver process did not start: nothing replayed nor sent "
                                                  f"for {START_TIMEOUT:g}s")
        requests, records, bad = self._replayed
        if requests or bad:
            note = f"replayed {requests} request(s), {records} record(s), from the segment log past its checkpoint"
            self.recovery.append(note + (f"; {bad} unreadable entr(ies) skipped" if bad else ""))

    def _expect(self, kind: str) -> tuple:
        """The next message, which must be `kind` (before the reader thread runs); RuntimeError otherwise."""
        assert self._conn is not None and self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT
        while not self._conn.poll(0.1):
            if self._proc.poll() is not None:
                self._kill()
                raise RuntimeError(f"the receiver process exited with code {self._proc.returncode} while starting")
            if time.monotonic() > deadline:
                self._kill()
                raise RuntimeError(f"the receiver process did not answer within {START_TIMEOUT:g}s")
        try:
            message = self._conn.recv()
        except (EOFError, OSError):
            self._kill()
            raise RuntimeError("the receiver process exited while starting") from None
        if message[0] == "failed":
            self._kill()
            raise RuntimeError(message[1])
        if message[0] != kind:
            self._kill()
            raise RuntimeError(f"the receiver process sent {message[0]!r} where {kind!r} was due (a bug)")
        return message

    # ------------------------------------------------------------------ the feed

    def _read(self) -> None:
        """Every message of the receiver process; an entry goes to the pipeline in the order it was sent."""
        assert self._conn is not None
        directory = Path(self.config.data_dir) / SEGMENTS
        try:
            while True:
                message = self._conn.recv()
                self._heard = time.monotonic()
                kind = message[0]
                if kind == "refs":
                    self._take_refs(message[1], message[2], message[3])
                elif kind == "entry":
                    self._take(message[1], message[2], directory)
                elif kind == "metrics":
                    self.metrics.absorb(message[1])
                elif kind == "ready":
                    self.grpc_port, self.http_port = message[1], message[2]
                    self._ready.set()
                elif kind == "stopped":
                    self._stopped.set()
                elif kind == "closed":
                    self._closed.set()
                elif kind == "failed":
                    self.failed = message[1]
        except (EOFError, OSError):
            pass
        except Exception as e:  # noqa: BLE001 - a bug: without this thread nothing is consumed, serve would hang on
            log.exception("the feed from the receiver process failed")  # (refusing every export); it stops instead
            self.failed = f"the feed from the receiver process failed: {type(e).__name__}: {e}"
            self._kill()  # as kill -9: what it acknowledged is in the log, past the checkpoint
        if not self._done and self.failed is None:
            code = self._proc.wait() if self._proc is not None else None
            self.failed = f"the receiver process exited unexpectedly (exit code {code})"
            log.error("%s: serve stops; a restart replays what was acknowledged", self.failed)
        self._stopped.set()
        self._closed.set()
        self._changed.set()

    def _take_refs(self, seq: int, pos: int, refs: list[SpanRefs]) -> None:
        """A live entry kept by reference: the receiver process's span-index runs of it (its GenAI filter kept
        them). This side's filter learns their traces too, so a log record of one that comes later is kept."""
        screen = self._screen
        if screen is not None:
            screen.keep_traces(dict.fromkeys((r.trace_id for r in refs), True))
        with self._lock:
            self._pending.append((seq, pos))
        self._queue.put(refs, pos)

    def _take(self, seq: int, pos: int, directory: Path) -> None:
        sig = split(pos)[1]
        signal = SIGNALS[sig]
        replayed = pos < self._replay_end
        try:
            records = entry_records(signal, pos, read_entry(directory, pos), self._screen, self.metrics)
            why = "not an OTLP request"
        except ValueError as e:
            records, why = None, str(e)
        if records is None and not replayed:
            # acknowledged and fsynced moments ago: skipping it would let the checkpoint pass it (lost). It stays
            # pending, so pinned; serve stops (exit 1) and the restart replays it (skipped then if it is damaged)
            self.failed = f"segment entry {pos} ({signal}), acknowledged, cannot be read back: {why}"
            log.error("%s: serve stops; a restart replays it", self.failed)
            with self._lock:
                self._pending.append((seq, pos))
            return
        if records is None:
            self._replayed[2] += 1
            log.warning("segment entry %d (%s) cannot be read: %s; skipped", pos, signal, why)
        elif replayed:
            self._replayed[0] += 1
            self._replayed[1] += count(records)
            self.metrics.inc("wt_otel_segment_replayed_requests_total")
        with self._lock:
            if records:
                self._pending.append((seq, pos))
            elif self._pending:
                self._pending.append((seq, None))
            else:
                self._consumed = seq
        if records and not self._queue.put(records, pos):
            return  # stopping: it stays pinned in the log, past the last checkpoint
        if not records:
            self._changed.set()

    def report_now(self) -> None:
        """Send a status at once (the session core's health changed)."""
        self._changed.set()

    def _on_consumed(self, pos: int) -> None:
        """The pipeline consumed the entry at `pos` (entries are consumed in the order they were put)."""
        self._heard = time.monotonic()
        with self._lock:
            if self._pending and self._pending[0][1] == pos:
                self._consumed = self._pending.popleft()[0]
                while self._pending and self._pending[0][1] is None:
                    self._consumed = self._pending.popleft()[0]
        self._changed.set()

    def _status(self) -> tuple:
        consumed = self._consumed  # read first: what the pipeline consumed by now is covered by `needed` below
        needed = self._needed()
        lag, held, per_session, degraded = self._state()
        return ("status", consumed, needed, lag, held, per_session, degraded)

    def _report(self) -> None:
        """Statuses as the pipeline consumes (coalesced), and this side's metrics every `METRICS_EVERY` s."""
        next_metrics = 0.0
        while not self._done:
            self._changed.wait(METRICS_EVERY)
            self._changed.clear()
            try:
                self._send(self._status())
                if (now := time.monotonic()) >= next_metrics:
                    self._send(("metrics", self.metrics.snapshot()))
                    next_metrics = now + METRICS_EVERY
            except OSError:
                return
            except Exception:  # noqa: BLE001 - a status the core cannot compute now is sent with the next one
                log.exception("cannot report to the receiver process")
            time.sleep(STATUS_EVERY)

    def _send(self, message: tuple) -> None:
        assert self._conn is not None
        with self._send_lock:
            self._conn.send(message)

    # ------------------------------------------------------------------ stop

    def stop(self, grace: float | None = 5.0) -> None:
        """Stop the receivers (requests in progress get `grace` seconds); returns once every entry they made durable
        is with the pipeline (or the process is gone)."""
        if not self._ready.is_set():  # its start failed: before "go" it would read any order as that one
            self._kill()
            return
        wait = (grace or 0) + 30.0
        try:
            self._send(("stop", grace or 0))
        except OSError:
            return
        if not self._stopped.wait(wait):
            log.error("the receiver process did not stop within %gs", wait)

    def close(self, needed: int) -> None:
        """The last checkpoint: the receiver process releases what the pipeline consumed, writes it with `needed`
        (the lowest position the session core still holds), and exits. One that never got ready (its start failed)
        is killed instead, as `stop` does: the checkpoint stays where it was, the next start replays past it."""
        if not self._ready.is_set():
            self._kill()
            return
        self._done = True
        try:
            self._send(("close", self._consumed, needed))
            if not self._closed.wait(30.0):
                log.error("the receiver process did not close its segment log within 30s")
        except OSError:
            pass
        self._changed.set()
        if self._proc is not None:
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._kill()
        if self._conn is not None:
            self._conn.close()

    def _kill(self) -> None:
        """The receiver process down, now (what it acknowledged is in the log), and the socket closed."""
        self._done = True
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
