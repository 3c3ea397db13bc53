"""serve's durable segment log: a request is acknowledged only once its bytes are fsynced here.

Layout, in `<data-dir>/segments/`:

    000000000007.traces.pb     OTLP ExportTraceServiceRequest messages
    000000000007.logs.pb       OTLP ExportLogsServiceRequest messages
    checkpoint.json            {"v": 1, "position": P, "generation": G, "written_at": ...}

Each file is the collector file exporter's `format: proto` stream (a 4-byte
big-endian length, then the message), so `wt-otel import` reads a segment as
it is. Format 2 adds a header frame and a CRC-32 after each message, both as
protobuf fields no OTLP message has (`HEADER_FRAME`, `TRAILER`): any reader
still parses every frame; files without the header are read as before. One
file per signal and generation: a reader tells traces from logs by
the file name (`.traces.pb` / `.logs.pb`), never by guessing. OTLP/JSON
requests (and requests with rejected records) are stored as the protobuf of the
records serve accepted (`wt_otel.ingest.otlp_encode`), so segments hold one
format.

Positions. A generation's files are opened together and closed together (when
one reaches `segment_bytes`, or the generation is `segment_max_age` old), so a
position `(generation, signal, offset)`, packed into one int, grows with time
across files. Each decoded record carries the position of its request
(`SpanRecord.segment_pos`). The checkpoint is the lowest position still needed:
requests appended but not yet handed to the assembler (the pins here), records
the assembler holds (open sessions and written ones kept for late spans), and
the head of the open generation (anything appended later lies above it).
Generations wholly below the checkpoint are deleted, except, newest first, those within `retain_age` and
`retain_bytes` when serve keeps sessions by reference into them (`SpanRefs`, `datadir.render: flagged`):
`spans_of` reads such a session's spans back (`wt-otel sessions render`). Those retained generations do not
count against `max_bytes`, which caps only what the checkpoint still needs.

Group commit. Writers `append` (one write(2) under a lock) and `wait`. The first
waiter to find no commit under way runs one (the leader): it fsyncs every dirty
file, at most every `commit_interval` seconds, and wakes every waiter it
covered; whoever arrives during it waits for it, or leads the next. No thread of
its own: a committer thread cost two GIL hand-offs per request (wake it, then be
woken by it). Closing a generation is a commit too: its files are fsynced with
the lock let go while appends wait, and only then does the next generation
take appends (so only the newest can be torn by a kill); an fsync that hangs
there is a stall like any other. A failed write or fsync (full disk, EIO) truncates the file back
to what was fsynced and raises `SegmentUnavailable` in every affected waiter:
the request is refused (503 / UNAVAILABLE + retry info), never acknowledged.
Past `max_bytes` on disk, `SegmentFull` (429 / RESOURCE_EXHAUSTED + retry
info): the open sessions pin more than the cap.

Start-up. The newest generation's torn tails (a kill mid-write) are cut back to
their last whole frame, counted and reported; its every checksum is checked, so
a frame in the middle whose length or checksum is wrong (damage: whole frames
follow it) is reported and skipped, never taken for a torn tail; an older file is never cut (it was fsynced
whole as it closed): damage there is reported and left in place. New appends
go to a new generation; `replay()` yields the entries at or past the checkpoint
for serve to feed its pipeline before the receivers open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import BaseModel, ConfigDict, ValidationError

from wt_otel._util import fsutil
from wt_otel._util.clock import utc_now_iso
from wt_otel.ingest.otlp import pb_attrs, span_record
from wt_otel.model.spans import SpanRecord, SpanRefs
from wt_otel.serve.metrics import Metrics

log = logging.getLogger("wt_otel.serve.segments")

SEGMENTS = "segments"
CHECKPOINT = "checkpoint.json"
SIGNALS = ("traces", "logs")  # index in this tuple = the signal bits of a position
MAX_FRAME = 64 * 1024 * 1024  # as `wt_otel.ingest.dumps.MAX_RECORD_BYTES`
_OFFSET_BITS = 40  # a segment never reaches 1 TiB
_GEN_SHIFT = _OFFSET_BITS + 1
_NAME = re.compile(r"^(\d{12})\.(traces|logs)\.pb$")
# Format 2 (issue 31): a file opens with a header frame, and each frame's message is followed by a CRC-32 of it.
# Both are protobuf fields no OTLP message has (1000: bytes, 1001: fixed32), so every frame still parses as the
# request (an empty one for the header) and `wt-otel import` reads a segment as before. Files without the header
# (format 1, written before) are read as before, without checksums.
_HEADER_MESSAGE = b"\xc2\x3e\x12wt-otel segment v2"  # field 1000 (length-delimited), 18 bytes
HEADER_FRAME = len(_HEADER_MESSAGE).to_bytes(4, "big") + _HEADER_MESSAGE
_CRC_TAG = b"\xcd\x3e"  # field 1001, fixed32 (little-endian)
TRAILER = len(_CRC_TAG) + 4


PROBE_BYTES = 64 * 1024  # what `probe()` writes: room for a few requests, not just one byte
# Each open segment file is allocated this far ahead of its writes (`fsutil.reserve`, the size unchanged): an
# append into allocated space costs a tenth of one that allocates (0.12 against 1.5 ms of CPU for a 570 KB
# request, tmpfs and ext4), most of the receivers' cost after gRPC's own. Given back when the file closes.
RESERVE_BYTES = 8 * 1024 * 1024

def position(generation: int, signal: int, offset: int) -> int:
    """One int ordered as (generation, signal, offset)."""
    return generation << _GEN_SHIFT | signal << _OFFSET_BITS | offset


def split(pos: int) -> tuple[int, int, int]:
    return pos >> _GEN_SHIFT, (pos >> _OFFSET_BITS) & 1, pos & ((1 << _OFFSET_BITS) - 1)


def segment_name(generation: int, signal: str) -> str:
    return f"{generation:012d}.{signal}.pb"


class SegmentUnavailable(Exception):
    """The bytes could not be written or fsynced: refuse the request (503 / UNAVAILABLE, retry)."""


class SegmentFull(Exception):
    """The log is at its byte cap (open sessions pin it): refuse the request (429, retry)."""


class Checkpoint(BaseModel):
    """`segments/checkpoint.json`: replay starts at `position`; generations below `generation` are gone."""

    model_config = ConfigDict(extra="ignore")
    v: int = 1
    position: int = 0
    generation: int = 0
    written_at: str = ""


@dataclass
class _Open:
    """One open segment file of the current generation."""

    signal: int
    generation: int
    fd: int
    size: int = 0  # bytes written
    committed: int = 0  # bytes fsynced
    epoch: int = 0  # bumped when a failed fsync cut the file back: every waiter past `committed` fails
    error: str = ""
    closed: bool = False
    reserved: int = 0  # bytes allocated ahead of the writes (`fsutil.reserve`); given back as the file closes


@dataclass(slots=True)
class Ticket:
    """What `append` returns and `wait` takes."""

    pos: int
    end: int
    segment: _Open
    epoch: int


@dataclass
class Opened:
    """What start-up found in the segment directory."""

    checkpoint: Checkpoint
    generations: list[int] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)  # "<file>: cut N bytes of a torn last frame"
    problems: list[str] = field(default_factory=list)


class SegmentLog:
    """Thread-safe. `append` + `wait` from the receivers; `checkpoint` on the pipeline's tick."""

    def __init__(self, data_dir: Path | str, *, commit_interval: float = 0.001, segment_bytes: int = 64 << 20,
                 segment_max_age: float = 60.0, max_bytes: int = 4 << 30, metrics: Metrics | None = None,
                 retain_age: float = 0.0, retain_bytes: int = 0, stall_timeout: float = 5.0) -> None:
        self.dir = Path(data_dir) / SEGMENTS
        self.dir.mkdir(parents=True, exist_ok=True)
        self.commit_interval = commit_interval
        self.segment_bytes = segment_bytes
        self.segment_max_age = segment_max_age
        self.max_bytes = max_bytes
        # generations below the checkpoint are kept this long / up to this many bytes (newest first) when serve
        # keeps sessions by reference into them (rendered on demand); 0: deleted as soon as they are below it
        self.retain_age = retain_age
        self.retain_bytes = retain_bytes
        self._retained_bytes = 0  # of generations below the checkpoint kept for that; not counted in max_bytes
        self.metrics = metrics or Metrics()
        self.fsync = os.fsync  # the seam fault-injection tests replace (EIO)
        self.writev = os.writev  # ... and this one (ENOSPC)
        # serve: told the reason when appends start failing (the receivers then refuse before decoding and
        # /healthz says degraded), and None once `probe()` finds the disk writable again
        self.on_health: Callable[[str | None], None] | None = None
        self.failing: str | None = None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # receivers wait here for their entry's group commit
        self._pins: dict[int, int] = {}  # position -> count: appended, not yet with the assembler
        # its own lock: the pipeline releases pins while a receiver holds `_lock` writing a request
        self._pins_lock = threading.Lock()
        self._dirty: set[int] = set()  # signals with unsynced bytes
        self._committing = False  # a waiter is running a group commit, or a rotation (the others wait for it)
        self._rotating = False  # ... a rotation: appends wait for it (they go to the next generation)
        self._rotation_wanted = False  # one waits for the commit under way: the next is the rotation's
        # when that commit's fsyncs began (monotonic; None: not in an fsync). Past `stall_timeout` the disk is
        # stalled: appends are refused at once and waiters give up, rather than each holding a receiver 30 s
        self.stall_timeout = stall_timeout
        self._fsync_since: float | None = None
        self._stalled = False  # `failing` is a stall: it clears when that fsync returns, not by `probe()`
        self._closing = False
        self.opened = self._scan()
        self.recovery: list[str] = self.opened.torn + self.opened.problems
        self._sizes: dict[int, int] = {g: self._gen_bytes(g) for g in self.opened.generations}
        self._closed_at = {g: self._gen_mtime(g) for g in self.opened.generations}
        self._total = sum(self._sizes.values())
        # the first new position: above every file left, and above the checkpoint even when every file is gone
        first = max(max(self.opened.generations, default=0), self.opened.checkpoint.generation) + 1
        self.replay_end = position(first, 0, 0)
        self._generation = split(self.replay_end)[0]
        self._born = time.monotonic()
        self._open: dict[int, _Open] = {}
        self._checkpoint = self.opened.checkpoint
        self._last_sync = 0.0
        self._pending = 0  # entries appended since the last commit
        self._gauges()

    # ------------------------------------------------------------------ start-up

    def _scan(self) -> Opened:
        checkpoint, problems = self._read_checkpoint()
        files: list[tuple[Path, int]] = []
        torn: list[str] = []
        for p in sorted(self.dir.iterdir()):
            m = _NAME.match(p.name)
            if m is None:
                if p.name != CHECKPOINT and not p.name.startswith("."):
                    problems.append(f"{SEGMENTS}/{p.name}: not a segment file; left alone")
                continue
            files.append((p, int(m.group(1))))
        gens = {g for _, g in files}
        newest = max(gens, default=-1)
        for p, generation in files:
            if generation == newest:  # the only one a kill can leave torn: older ones were fsynced as they closed
                cut, why, corrupt = _repair_tail(p)
                if cut:
                    torn.append(f"{SEGMENTS}/{p.name}: cut {cut} bytes of {why}")
                    self.metrics.inc("wt_otel_segment_torn_tails_total")
                for start, end, after in corrupt:
                    problems.append(f"{SEGMENTS}/{p.name}: bytes {start}-{end} are not a whole frame with a matching "
                                    f"checksum (damaged on disk, not a kill: what came after was written); that "
                                    f"stretch is skipped, the {after} frame(s) after it are kept")
                    self.metrics.inc("wt_otel_segment_corrupt_frames_total")
                continue
            end, size = _whole_end(p)
            if end < size:  # a closed file cut short or with a bad length (the disk): its bytes are not ours to cut
                problems.append(f"{SEGMENTS}/{p.name}: unreadable from byte {end} of {size} (a frame length that "
                                "does not fit; the file was closed whole, so this is damage, not a torn write); left "
                                "in place, and nothing after that byte is replayed")
        for t in torn:
            log.warning("%s", t)
        return Opened(checkpoint=checkpoint, generations=sorted(gens), torn=torn, problems=problems)

    def _read_checkpoint(self) -> tuple[Checkpoint, list[str]]:
        path = self.dir / CHECKPOINT
        if not path.exists():
            return Checkpoint(), []
        try:
            return Checkpoint.model_validate_json(path.read_bytes()), []
        except (OSError, ValidationError) as e:
            return Checkpoint(), [f"{SEGMENTS}/{CHECKPOINT}: unreadable ({str(e).splitlines()[0]}); "
                                  "replaying every segment"]

    def _gen_bytes(self, generation: int) -> int:
        total = 0
        for signal in SIGNALS:
            with contextlib.suppress(OSError):
                total += (self.dir / segment_name(generation, signal)).stat().st_size
        return total

    def _gen_mtime(self, generation: int) -> float:
        latest = 0.0
        for signal in SIGNALS:
            with contextlib.suppress(OSError):
                latest = max(latest, (self.dir / segment_name(generation, signal)).stat().st_mtime)
        return latest

    def replay(self) -> Iterator[tuple[str, int, bytes]]:
        """(signal, position, request bytes) of every entry at or past the checkpoint, oldest generation first.

        Only what the previous run left (generations before this run's first); the caller decodes."""
        yield from _entries(self.dir, self.opened.generations, self._checkpoint.position)

    # ------------------------------------------------------------------ appending

    def append(self, signal: str, data: bytes) -> Ticket:
        """Write one request; pinned until `release(ticket.pos)`. Raises SegmentFull / SegmentUnavailable."""
        sig = SIGNALS.index(signal)
        header = (len(data) + TRAILER).to_bytes(4, "big")
        trailer = _CRC_TAG + zlib.crc32(data).to_bytes(4, "little")  # outside the lock: ~1 ms for 4 MB
        size = len(header) + len(data) + TRAILER
        seg: _Open | None = None
        with self._lock:
            while True:
                if self._closing:
                    raise SegmentUnavailable("the segment log is closed (shutting down)")
                if (stall := self._stall_locked()) is not None:
                    self.metrics.inc("wt_otel_segment_refusals_total", reason="fsync_stalled")
                    raise SegmentUnavailable(stall)
                if self._rotating:  # the files are being closed: what is written next goes to the next generation
                    self._wait_locked()
                    continue
                pinned = self._total - self._retained_bytes
                if pinned + size > self.max_bytes:
                    self.metrics.inc("wt_otel_segment_refusals_total", reason="max_bytes")
                    raise SegmentFull(f"the segment log holds {pinned} bytes past its checkpoint, its cap is "
                                      f"{self.max_bytes} (durability.max_bytes): open sessions pin it")
                seg = self._open.get(sig)
                if seg is not None and seg.size and seg.size + size > self.segment_bytes:
                    self._rotate_locked(seg.generation)
                    continue
                break
            if seg is None:
                seg = self._open_locked(sig)
            offset = seg.size
            if offset + size > seg.reserved:
                self._reserve_locked(seg, offset + size)
            try:
                written = self.writev(seg.fd, [header, data, trailer])  # the request is not copied into a frame
                if written != size:  # a short write: the disk filled up mid-frame
                    raise OSError(28, f"short write ({written} of {size} bytes)")
            except OSError as e:
                self._cut_locked(seg, offset)
                self.metrics.inc("wt_otel_segment_write_errors_total")
                reason = f"cannot append to {SEGMENTS}/{segment_name(seg.generation, signal)}: {e.strerror or e}"
                self._unhealthy_locked(reason)
                raise SegmentUnavailable(reason) from None
            seg.size += size
            self._add_bytes(seg.generation, size)
            pos = position(seg.generation, sig, offset)
            self.pin(pos)
            self._dirty.add(sig)
            self._pending += 1
            return Ticket(pos, offset + size, seg, seg.epoch)

    def wait(self, ticket: Ticket, timeout: float = 30.0) -> None:
        """Return once the ticket's bytes are fsynced; SegmentUnavailable if they never will be. With no
        commit under way, this caller runs the next one (for every waiter), else it waits for it."""
        deadline = time.monotonic() + timeout
        seg = ticket.segment
        with self._cond:
            while True:
                if seg.epoch != ticket.epoch:
                    raise SegmentUnavailable(seg.error or "the segment could not be fsynced")
                if seg.committed >= ticket.end:
                    return
                if not self._committing and self._dirty and not self._rotation_wanted:
                    self._commit_locked()
                    continue
                if (stall := self._stall_locked()) is not None:
                    raise SegmentUnavailable(stall)
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    raise SegmentUnavailable(f"fsync did not complete within {timeout:g}s")
                if self._fsync_since is not None:  # wake when it would count as stalled
                    left = min(left, max(0.001, self._fsync_since + self.stall_timeout - now))
                self._cond.wait(left)

    def _stall_locked(self) -> str | None:
        """Why appends are refused when a group commit's fsync has not returned for `stall_timeout` (the log is
        then unhealthy until it does); None while it has not. Appends, waiters and the tick's checkpoint ask, so
        a stall is found within a tick even with no traffic."""
        since = self._fsync_since
        if since is None or time.monotonic() - since <= self.stall_timeout:
            return None
        reason = f"an fsync of the segment log has not returned for {self.stall_timeout:g}s (a stalled disk?)"
        if self.failing is None:
            self._stalled = True
            self._unhealthy_locked(reason)
            self.metrics.set("wt_otel_segment_fsync_stalled", 1)
        return reason

    def pin(self, pos: int) -> None:
        with self._pins_lock:
            self._pins[pos] = self._pins.get(pos, 0) + 1

    def release(self, pos: int) -> None:
        """The records of the entry at `pos` are with the assembler now (or were refused)."""
        with self._pins_lock:
            n = self._pins.get(pos, 0) - 1
            if n > 0:
                self._pins[pos] = n
            else:
                self._pins.pop(pos, None)

    def _reserve_locked(self, seg: _Open, needed: int) -> None:
        """Allocate the file `RESERVE_BYTES` past `needed` (not past `segment_bytes`, unless one entry is larger).
        If the system cannot, the writes allocate as they go; a full disk is found by the write, as before."""
        want = max(needed, min(needed + RESERVE_BYTES, self.segment_bytes))
        if fsutil.reserve(seg.fd, seg.reserved, want - seg.reserved):
            seg.reserved = want
        else:
            seg.reserved = needed

    def _open_locked(self, sig: int) -> _Open:
        path = self.dir / segment_name(self._generation, SIGNALS[sig])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        seg = self._open[sig] = _Open(sig, self._generation, fd, size=os.fstat(fd).st_size)
        seg.committed = seg.size
        self._sizes.setdefault(self._generation, 0)
        if seg.size == 0:  # a new file: the format header first (fsynced with the first commit)
            try:
                if self.writev(fd, [HEADER_FRAME]) == len(HEADER_FRAME):
                    seg.size = len(HEADER_FRAME)
                    self._add_bytes(self._generation, seg.size)
                else:
                    os.ftruncate(fd, 0)
            except OSError:  # the append that follows says what is wrong; a file without it is read as format 1
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
        if len(self._open) == 1:
            self._born = time.monotonic()
            with contextlib.suppress(OSError):  # the new file's name durable too
                dfd = os.open(self.dir, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        return seg

    def _rotate_locked(self, generation: int) -> None:
        """Close `generation`'s files, fsynced first; the next append opens the next generation (so a file is
        written only once every older one is whole on disk: a start repairs torn tails in the newest only).

        It runs as a commit: after the commit under way, with the lock let go while the files fsync, appends
        waiting for it. A disk that hangs then stalls it as it stalls a commit (appends refused past
        `stall_timeout`), instead of holding every receiver on the lock. Nothing is done when the generation
        was closed meanwhile, or when the log is stalled."""
        self._rotation_wanted = True  # no new commit starts meanwhile: the rotation syncs for their waiters
        try:
            while self._committing:
                if self._stall_locked() is not None:
                    return
                self._wait_locked()
        finally:
            self._rotation_wanted = False
        if self._generation != generation:
            return
        self._committing = self._rotating = True
        try:
            segs = list(self._open.values())
            unsynced = [seg for seg in segs if seg.committed < seg.size]
            results, stalled_at = self._fsync_unlocked(unsynced) if unsynced else ([], None)
            for seg, err in zip(unsynced, results, strict=True):
                if err is None:
                    seg.committed = seg.size  # appends wait while `_rotating`: nothing was added meanwhile
                    self.metrics.inc("wt_otel_segment_fsyncs_total")
                else:
                    self._fail_locked(seg, err)
            for seg in segs:
                if seg.reserved > seg.size:  # what was allocated ahead and not written goes back
                    with contextlib.suppress(OSError):
                        os.ftruncate(seg.fd, seg.size)
                os.close(seg.fd)
                seg.closed = True
            self._open.clear()
            self._dirty.clear()
            self._closed_at[self._generation] = time.time()
            self._generation += 1
            self._said_recovered(stalled_at)
        finally:
            self._committing = self._rotating = False
            self._cond.notify_all()

    def _wait_locked(self) -> None:
        """Wait (lock held) for the commit or rotation under way, waking when its fsync would count as stalled."""
        since = self._fsync_since
        self._cond.wait(max(0.001, since + self.stall_timeout - time.monotonic()) if since is not None else 0.05)

    def _fsync_unlocked(self, segs: list[_Open]) -> tuple[list[OSError | None], float | None]:
        """fsync `segs` with the lock let go (held on entry and on return), timed for the stall check.
        Returns each one's error (None: synced) and, when these fsyncs had stalled the log, when they began: the
        log is healthy again, unless one failed (the caller marks that), then `_said_recovered` says so."""
        results: list[OSError | None] = []
        self._fsync_since = started = time.monotonic()
        self._lock.release()
        try:
            for seg in segs:
                try:
                    self.fsync(seg.fd)
                    results.append(None)
                except OSError as e:
                    results.append(e)
        finally:
            self._lock.acquire()
            self._fsync_since = None
        self._last_sync = time.monotonic()
        stalled, self._stalled = self._stalled, False
        if stalled:  # the stalled fsync returned: healthy again, unless it failed
            self.failing = None
            self.metrics.set("wt_otel_segment_fsync_stalled", 0)
        return results, started if stalled else None

    def _said_recovered(self, stalled_at: float | None) -> None:
        if stalled_at is not None and self.failing is None:
            log.warning("the stalled segment fsync returned after %.1fs: accepting exports again",
                        self._last_sync - stalled_at)
            if self.on_health is not None:
                self.on_health(None)

    def _fail_locked(self, seg: _Open, e: OSError) -> None:
        seg.error = f"cannot fsync {SEGMENTS}/{segment_name(seg.generation, SIGNALS[seg.signal])}: {e.strerror or e}"
        log.error("%s: refusing the requests it held (they were not acknowledged)", seg.error)
        self.metrics.inc("wt_otel_segment_write_errors_total")
        self._cut_locked(seg, seg.committed)
        seg.epoch += 1
        self._unhealthy_locked(seg.error)

    def _unhealthy_locked(self, reason: str) -> None:
        if self.failing is None:
            self.failing = reason
            if self.on_health is not None:
                self.on_health(reason)

    def probe(self) -> None:
        """While appends fail (a full disk, EIO): write and fsync a small file beside the segments; once that
        works the log is healthy again and serve accepts exports (serve calls it every tick)."""
        if self.failing is None or self._stalled:  # a stall clears when its fsync returns: a probe would hang too
            return
        if self._probe_error() is not None:
            return
        with self._lock:
            self.failing = None
        if self.on_health is not None:
            self.on_health(None)

    def check_writable(self) -> None:
        """At start (after `on_health` is set): probe the disk; one that cannot take `PROBE_BYTES` makes the log
        unhealthy at once (exports refused, /healthz degraded, until `probe()` succeeds), rather than serve
        saying ok until the first export fails (issue 31)."""
        if (reason := self._probe_error()) is not None:
            with self._lock:
                self._unhealthy_locked(reason)

    def _probe_error(self) -> str | None:
        """Write and fsync `PROBE_BYTES` beside the segments, then remove them: why that failed, or None."""
        path = self.dir / ".probe"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                written = self.writev(fd, [b"\0" * PROBE_BYTES])
                if written != PROBE_BYTES:
                    return f"cannot write {SEGMENTS}/: short write ({written} of {PROBE_BYTES} bytes)"
                self.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            return f"cannot write {SEGMENTS}/: {e.strerror or e}"
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        return None

    def _pinned(self) -> list[int]:
        with self._pins_lock:
            return list(self._pins)

    def _cut_locked(self, seg: _Open, size: int) -> None:
        """Truncate back to `size`, so nothing unacknowledged stays to be replayed."""
        with contextlib.suppress(OSError):
            os.ftruncate(seg.fd, size)  # (the space reserved past it goes back too)
        seg.reserved = size
        with self._pins_lock:
            for pos in [p for p in self._pins if split(p)[:2] == (seg.generation, seg.signal) and split(p)[2] >= size]:
                del self._pins[pos]
        self._add_bytes(seg.generation, size - seg.size)
        seg.size = size

    def _add_bytes(self, generation: int, n: int) -> None:
        self._sizes[generation] = self._sizes.get(generation, 0) + n
        self._total += n

    # ------------------------------------------------------------------ group commit

    def _commit_locked(self) -> None:
        """One group commit, run by a waiter with the lock held: the lock is let go while it waits out
        `commit_interval` (appends join the batch) and while it fsyncs (appends go on)."""
        self._committing = True
        try:
            delay = self._last_sync + self.commit_interval - time.monotonic()
            if delay > 0 and not self._closing:
                self._lock.release()
                try:
                    time.sleep(delay)
                finally:
                    self._lock.acquire()
            batch = [(self._open[s], self._open[s].size, self._open[s].epoch) for s in self._dirty if s in self._open]
            self._dirty.clear()
            entries, self._pending = self._pending, 0
            results, stalled_at = self._fsync_unlocked([seg for seg, _, _ in batch])
            for (seg, size, epoch), err in zip(batch, results, strict=True):
                if seg.closed or seg.epoch != epoch:
                    continue  # a failed write cut it: nothing to record
                if err is None:
                    seg.committed = max(seg.committed, size)
                    self.metrics.inc("wt_otel_segment_fsyncs_total")
                else:
                    self._fail_locked(seg, err)
            if batch:
                self.metrics.inc("wt_otel_segment_commit_batches_total")
                self.metrics.inc("wt_otel_segment_commit_entries_total", entries)
            self._said_recovered(stalled_at)
        finally:
            self._committing = False
            self._cond.notify_all()

    # ------------------------------------------------------------------ checkpoint, retention

    def checkpoint(self, needed: int | None) -> int:
        """Record the lowest position still needed (`needed`: the assembler's and the store's, or None),
        delete the generations below it, and start a new generation if the open one is old. Per tick."""
        with self._lock:
            if self._stall_locked() is not None:  # rotating (fsync), writing or deleting would hang this thread too
                return self._checkpoint.position
            floor = position(self._generation, 0, self._open[0].size if 0 in self._open else 0)
            candidates = [floor, *self._pinned()]
            if needed is not None and needed >= 0:
                candidates.append(needed)
            cp = min(candidates)
            if self._open and time.monotonic() - self._born > self.segment_max_age:
                self._rotate_locked(self._generation)  # so a quiet log's generation can be deleted once written
        if cp != self._checkpoint.position:
            self._write_checkpoint(cp)
        self._delete_below(split(cp)[0])
        self._gauges()
        return cp

    def _write_checkpoint(self, cp: int) -> None:
        checkpoint = Checkpoint(position=cp, generation=split(cp)[0], written_at=utc_now_iso())
        tmp = self.dir / f".{CHECKPOINT}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, checkpoint.model_dump_json().encode() + b"\n")
                os.fsync(fd)  # then the rename: never a checkpoint that names deleted segments as its start
            finally:
                os.close(fd)
            os.replace(tmp, self.dir / CHECKPOINT)
        except OSError as e:  # an older checkpoint only means more to replay; said, not fatal
            log.warning("cannot write %s/%s: %s", SEGMENTS, CHECKPOINT, e)
            return
        self._checkpoint = checkpoint
        self.metrics.set("wt_otel_segment_checkpoint_generation", checkpoint.generation)

    def _delete_below(self, generation: int) -> None:
        """Delete the generations below `generation` (the checkpoint's), except, newest first, those within
        `retain_age` and `retain_bytes` (sessions kept by reference are rendered from them on demand)."""
        with self._lock:
            below = sorted((g for g in self._sizes if g < generation and g != self._generation), reverse=True)
            kept = 0
            old = []
            now = time.time()
            for g in below:
                if self.retain_age > 0 and now - self._closed_at.get(g, now) < self.retain_age \
                        and kept + self._sizes[g] <= self.retain_bytes:
                    kept += self._sizes[g]
                else:
                    old.append(g)
            self._retained_bytes = kept
        for g in old:
            for signal in SIGNALS:
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / segment_name(g, signal)).unlink()
            with self._lock:
                self._total -= self._sizes.pop(g, 0)
                self._closed_at.pop(g, None)
            self.metrics.inc("wt_otel_segments_deleted_total")

    def _gauges(self) -> None:
        self.metrics.set("wt_otel_segment_bytes", self._total)
        self.metrics.set("wt_otel_segment_files", sum(1 for _ in self.dir.glob("*.pb")))

    @property
    def total_bytes(self) -> int:
        return self._total

    @property
    def checkpoint_position(self) -> int:
        return self._checkpoint.position

    def close(self, needed: int | None = None) -> None:
        """Sync and close the open files, then write the last checkpoint (what the next start replays from)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            deadline = time.monotonic() + self.stall_timeout
            while self._committing:  # a waiter's commit: let it finish before the files close under it
                left = deadline - time.monotonic()
                if left <= 0:  # its fsync hangs: closing the files under it, or a checkpoint's fsync, would too
                    log.error("segment log: an fsync has not returned for %gs; closing without a checkpoint "
                              "(the next start replays from the last one; nothing acknowledged is lost)",
                              self.stall_timeout)
                    return
                self._cond.wait(left)
        with self._lock:
            self._rotate_locked(self._generation)
            floor = position(self._generation, 0, 0)
            cp = min([floor, *self._pinned(), *([needed] if needed is not None and needed >= 0 else [])])
        if cp != self._checkpoint.position:
            self._write_checkpoint(cp)
        self._delete_below(split(cp)[0])


def read_entry(directory: Path, pos: int) -> bytes:
    """The request at segment position `pos` of `<data-dir>/segments`; ValueError saying why it cannot be read."""
    generation, sig, offset = split(pos)
    name = segment_name(generation, SIGNALS[sig])
    try:
        with open(directory / name, "rb") as fh:
            checksummed = fh.read(len(HEADER_FRAME)) == HEADER_FRAME
            fh.seek(offset)
            header = fh.read(4)
            n = int.from_bytes(header, "big") if len(header) == 4 else -1
            if not 0 <= n <= MAX_FRAME + TRAILER:
                raise ValueError(f"{SEGMENTS}/{name} has no whole entry at offset {offset}")
            data = fh.read(n)
    except FileNotFoundError:
        raise ValueError(f"{SEGMENTS}/{name} is gone: segments are kept for sessions indexed by reference only "
                         "within durability.retain_age and retain_bytes") from None
    except OSError as e:
        raise ValueError(f"cannot read {SEGMENTS}/{name}: {e.strerror or e}") from None
    if len(data) < n:
        raise ValueError(f"{SEGMENTS}/{name} ends inside the entry at offset {offset}")
    if checksummed:
        message = _checked(data)
        if message is None:
            raise ValueError(f"{SEGMENTS}/{name}: the entry at offset {offset} does not match its checksum (damaged "
                             "on disk)")
        return message
    return data


def spans_of(directory: Path, refs: Sequence[SpanRefs]) -> list[SpanRecord]:
    """The spans `refs` point to, decoded, in the order of `refs` (each one's in the order of its ordinals):
    each request they point into is read and parsed once, and only its referenced spans are converted.
    ValueError when one cannot be read back."""
    return _spans(refs, lambda pos: _parsed(directory, pos))


class _Parsed(NamedTuple):
    """A traces request read back: its spans in wire order, each with the index of its resource and its scope."""

    resources: list[Any]  # ResourceSpans
    spans: list[tuple[Any, int, str, str]]  # (Span, resource index, scope name, scope version)


class SpanReader:
    """`spans_of` for the session core, keeping the last `entries` requests it read parsed.

    A request holds the spans of many sessions (50 in the benches), and the sessions of one request are built
    one after the other: those with log records, flagged ones, and every one without a conversation id (the
    content-join check builds it). Read and parsed again for each, one request cost 50 reads, checksums and
    parses. Entries never change once written, so a parsed one stays true. Thread-safe."""

    def __init__(self, directory: Path, entries: int = 4) -> None:
        self.directory = directory
        self.entries = entries
        self._cache: OrderedDict[int, _Parsed] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, refs: Sequence[SpanRefs]) -> list[SpanRecord]:
        return _spans(refs, self._request)

    def _request(self, pos: int) -> _Parsed:
        with self._lock:
            found = self._cache.get(pos)
            if found is not None:
                self._cache.move_to_end(pos)
                return found
        found = _parsed(self.directory, pos)  # outside the lock: the read and parse are the slow part
        with self._lock:
            self._cache[pos] = found
            while len(self._cache) > self.entries:
                self._cache.popitem(last=False)
        return found


def _parsed(directory: Path, pos: int) -> _Parsed:
    """The traces request at `pos`, parsed, its spans listed in wire order (the span index's ordinals)."""
    try:
        request = ExportTraceServiceRequest.FromString(read_entry(directory, pos))
    except DecodeError as e:
        raise ValueError(f"segment entry {pos} is not an OTLP traces request: {e}") from None
    resources = list(request.resource_spans)
    return _Parsed(resources, [(span, r, ss.scope.name, ss.scope.version) for r, rs in enumerate(resources)
                               for ss in rs.scope_spans for span in ss.spans])


def _spans(refs: Sequence[SpanRefs], request_at: Callable[[int], _Parsed]) -> list[SpanRecord]:
    """Only the spans `refs` name are converted; each call gets its own records (callers add to them). Each
    request is asked for once a call, however many refs point into it."""
    requests: dict[int, tuple[_Parsed, dict[int, dict[str, Any]]]] = {}  # position -> (request, its resources)
    out: list[SpanRecord] = []
    for ref in refs:
        got = requests.get(ref.segment_pos)
        if got is None:
            got = requests[ref.segment_pos] = (request_at(ref.segment_pos), {})
        parsed, resources = got
        count = len(parsed.spans)
        for n in ref.ordinals:
            if not 0 <= n < count:
                raise ValueError(f"segment entry {ref.segment_pos} holds {count} spans, not span {n}")
            span, r, scope_name, scope_version = parsed.spans[n]
            resource = resources.get(r)
            if resource is None:
                resource = resources[r] = pb_attrs(parsed.resources[r].resource.attributes)
            record = span_record(span, resource, scope_name, scope_version)
            record.segment_pos = ref.segment_pos
            out.append(record)
    return out


def past_checkpoint(data_dir: Path | str) -> Iterator[tuple[str, int, bytes]]:
    """What the next start of serve would replay from `data_dir` (read-only: nothing is repaired or written)."""
    directory = Path(data_dir) / SEGMENTS
    try:
        checkpoint = Checkpoint.model_validate_json((directory / CHECKPOINT).read_bytes())
    except (OSError, ValidationError):
        checkpoint = Checkpoint()
    yield from _entries(directory, sorted(generations_on_disk(directory) or ()), checkpoint.position)


def generations_on_disk(directory: Path) -> set[int] | None:
    """The generations with a segment file in `<data-dir>/segments`; None when there is no such directory."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    return {int(m.group(1)) for name in names if (m := _NAME.match(name))}


def generation_of(pos: int) -> int:
    """The generation of a segment position (the files a session kept by reference needs)."""
    return pos >> _GEN_SHIFT


def _entries(directory: Path, generations: list[int], start: int) -> Iterator[tuple[str, int, bytes]]:
    for generation in generations:
        for sig, signal in enumerate(SIGNALS):
            path = directory / segment_name(generation, signal)
            if not path.exists() or position(generation, sig, path.stat().st_size) <= start:
                continue
            for offset, data in _frames(path):
                pos = position(generation, sig, offset)
                if pos >= start:
                    yield signal, pos, data


def _frames(path: Path) -> Iterator[tuple[int, bytes]]:
    """(offset, message) of each whole frame; stops at a torn or oversized one. In a format-2 file every frame's
    checksum is checked, and a stretch that is not a whole frame with a matching one is skipped (and logged):
    the frames after it are read."""
    with open(path, "rb") as fh:
        if fh.read(len(HEADER_FRAME)) == HEADER_FRAME:
            yield from _checked_frames(path, fh.fileno())
            return
        fh.seek(0)
        offset = 0
        while True:
            header = fh.read(4)
            if len(header) < 4:
                return
            n = int.from_bytes(header, "big")
            if n > MAX_FRAME:
                return
            data = fh.read(n)
            if len(data) < n:
                return
            yield offset, data
            offset += 4 + n


def _whole_end(path: Path) -> tuple[int, int]:
    """(where the last whole frame ends, the file's size), as `_frames` would find it, from the frame headers
    alone: a start reads 4 bytes a frame, not every retained segment's every byte (gigabytes, with
    `retain_bytes`)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size, end = os.fstat(fd).st_size, 0
        while end + 4 <= size:
            n = int.from_bytes(os.pread(fd, 4, end), "big")
            if n > MAX_FRAME or end + 4 + n > size:
                break
            end += 4 + n
        return end, size
    finally:
        os.close(fd)


def _repair_tail(path: Path) -> tuple[int, str, list[tuple[int, int, int]]]:
    """Cut a segment back to its last whole frame: (the bytes cut (0: it was whole), what they were, the corrupt
    stretches before it, each (start, end, whole frames after it)). A format-2 file is read whole, every checksum
    checked: a bad frame with whole frames after it is damage in the middle, skipped and kept, not a torn tail."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        stat = os.fstat(fd)
        size = stat.st_size
        if stat.st_blocks * 512 > size + RESERVE_BYTES // 2:  # space reserved ahead by a run that was killed
            with contextlib.suppress(OSError):
                os.truncate(path, size)
        if os.pread(fd, len(HEADER_FRAME), 0) == HEADER_FRAME:
            buf = os.pread(fd, size, 0)
            frames, corrupt, end = _walk_checked(buf)
            why = _tail_kind(buf, end)
            stretches = [(a, b, sum(1 for at in frames if at >= b)) for a, b in corrupt]
        else:
            end, size = _whole_end(path)
            why, stretches = "a torn last frame (killed mid-write; that request was never acknowledged)", []
    finally:
        os.close(fd)
    if size > end:
        with open(path, "r+b") as fh:
            fh.truncate(end)
            fh.flush()
            os.fsync(fh.fileno())
        return size - end, why, stretches
    return 0, why, stretches


def _checked(data: bytes) -> bytes | None:
    """The message of a format-2 frame (`data`: what its length covers) when its checksum matches, else None."""
    return data[:-TRAILER] if _crc_ok(memoryview(data)) else None


def _crc_ok(frame: memoryview) -> bool:
    """Whether a format-2 frame's bytes (what its length covers) end in the CRC tag and a matching checksum."""
    if len(frame) < TRAILER or frame[-TRAILER:-4] != _CRC_TAG:
        return False  # the tag check first: a checksum is computed only where a frame can end
    return zlib.crc32(frame[:-TRAILER]) == int.from_bytes(frame[-4:], "little")


def _frame_at(buf: bytes, at: int) -> int | None:
    """The length of a whole frame with a matching checksum at `at` of a format-2 file's bytes, or None."""
    if at + 4 > len(buf):
        return None
    n = int.from_bytes(buf[at:at + 4], "big")
    if n > MAX_FRAME + TRAILER or at + 4 + n > len(buf):
        return None
    return n if _crc_ok(memoryview(buf)[at + 4:at + 4 + n]) else None


def _walk_checked(buf: bytes) -> tuple[list[int], list[tuple[int, int]], int]:
    """(the offsets of the whole, checked frames, the corrupt stretches [start, end) between them, where the last
    whole frame ends) of a format-2 file's bytes. After a bad frame the next whole one is searched byte by byte
    (damage is rare; the search stops at the first frame that checks)."""
    frames: list[int] = []
    corrupt: list[tuple[int, int]] = []
    at = end = len(HEADER_FRAME)
    while at < len(buf):
        n = _frame_at(buf, at)
        if n is not None:
            frames.append(at)
            at = end = at + 4 + n
            continue
        after = next((x for x in range(at + 1, len(buf) - 4 - TRAILER + 1) if _frame_at(buf, x) is not None), None)
        if after is None:
            break  # nothing whole after it: the tail
        corrupt.append((at, after))
        at = after
    return frames, corrupt, end


def _tail_kind(buf: bytes, end: int) -> str:
    """What the bytes past the last whole frame are: a frame cut short by a kill, or a whole one that fails its
    checksum (it was written whole: damaged on disk)."""
    n = int.from_bytes(buf[end:end + 4], "big") if end + 4 <= len(buf) else None
    if n is not None and end + 4 + n == len(buf):
        return "a last frame that does not match its checksum (damaged on disk; it cannot be read)"
    return "a torn last frame (killed mid-write; that request was never acknowledged)"


def _checked_frames(path: Path, fd: int) -> Iterator[tuple[int, bytes]]:
    """`_frames` of a format-2 file: the messages of the frames whose checksums match."""
    buf = os.pread(fd, os.fstat(fd).st_size, 0)
    frames, corrupt, _ = _walk_checked(buf)
    for start, end in corrupt:
        log.warning("%s/%s: bytes %d-%d are not a whole frame with a matching checksum; skipped (the frames after "
                    "it are read)", SEGMENTS, path.name, start, end)
    for at in frames:
        n = int.from_bytes(buf[at:at + 4], "big")
        yield at, buf[at + 4:at + 4 + n - TRAILER]
