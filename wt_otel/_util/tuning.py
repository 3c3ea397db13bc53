"""Process-wide settings: the cyclic GC's thresholds and glibc's mmap threshold for serve, a long-running
process that holds many small objects and frees a large buffer per request; the GC's for `wt-otel import`'s
pass 2 (`gc_tuned`); returning freed heap pages after large requests (`MemoryReturn`).

The GC: serve holds its open sessions as small tracked objects (a few per run of spans) that live for
seconds, so with CPython's default thresholds (700, 10, 10) young collections are frequent and the
objects that survive them soon trigger full collections of the whole heap: measured under the ingest
bench, ~1,300 young and ~11 full collections in 8 s, ~2 ms of every request's CPU (a fifth of serve's),
all of it holding the GIL. `tune_gc` freezes what start-up made (modules, config: never garbage) and
raises the young threshold, so collections are rare and short; cycles are still collected.

The allocator: glibc serves an allocation of 128 KiB or more with its own mmap, and unmaps it on free; but after the
first such free it raises that threshold (up to 32 MiB) to the size just freed. serve allocates and frees
a buffer per request (an OTLP request is often 0.5-4 MiB), so after the first one every request buffer
comes from the heap arenas, which keep their pages: measured under the overload bench, RSS grew to
~380 MiB against a 256 MiB memory budget, and stayed there. Setting the threshold explicitly turns the
adjustment off (mallopt(3)); the same run then peaks ~280 MiB. Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator

log = logging.getLogger("wt_otel.tuning")

M_MMAP_THRESHOLD = -3  # <malloc.h>
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept fixed


GC_THRESHOLDS = (50_000, 20, 10)


def tune_gc() -> None:
    """Freeze the objects start-up made and raise the young generation's threshold (see the module doc)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@contextlib.contextmanager
def gc_tuned() -> Iterator[None]:
    """`tune_gc` for a stretch of work, undone after: `wt-otel import`'s pass 2 makes and drops a session's
    worth of small objects at a time, over the index pass 1 built (never garbage while it runs). Measured on
    the import bench: ~4 full and ~50 middle collections, 0.27 s of 4.3 s in one process, become none and
    ~10. Worker processes forked inside inherit the frozen heap and the thresholds (and do not touch the
    frozen objects' pages to collect them)."""
    thresholds = gc.get_threshold()
    tune_gc()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def tune_for_serve() -> None:
    """Both settings, once serve's components are built (the frozen objects are start-up's)."""
    tune_gc()
    pin_mmap_threshold()


def pin_mmap_threshold() -> bool:
    """True when glibc took the setting; False when this is not glibc (nothing changed)."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        log.debug("no mallopt (not glibc): the allocator's thresholds stay as they are")
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


class MemoryReturn:
    """Give freed heap pages back to the OS after large requests (glibc's `malloc_trim(0)`).

    Decoding and writing a large request makes and frees many objects below the mmap threshold, and glibc
    keeps the pages they leave free inside its heap (it trims only the top). Measured with 50 requests of
    150 KB gzip inflating to 30 MB each (`datadir.render: all`): in a process without the pinned threshold
    (an in-process `Server`), a trim took RSS from 753 to 468 MiB; in `wt-otel serve` (threshold pinned) the
    gain is small, 344 -> 337 MiB 40 s later (bench/rss_gzip.py --compare). `note(n)` counts request bytes
    (the receivers); `maybe()` (serve's pipeline tick) trims once 64 MiB came in since the last trim (at most
    every 2 s), and every 30 s while requests came in the last 5.5 minutes (sessions are written and late
    windows close after the requests that made them). A trim of a heap of a few hundred MiB with many free
    holes takes 20-50 ms, without the GIL. `WT_OTEL_RELEASE_MEMORY=off` turns it off; elsewhere than glibc it
    does nothing."""

    EVERY_BYTES = 64 * 1024 * 1024
    MIN_INTERVAL = 2.0
    QUIET_INTERVAL = 30.0
    AFTER_TRAFFIC = 330.0

    def __init__(self, enabled: bool | None = None) -> None:
        import os

        self.enabled = os.environ.get("WT_OTEL_RELEASE_MEMORY", "on").lower() != "off" if enabled is None \
            else enabled
        self.trims = 0
        self._noted = 0  # bytes since the last trim (approximate: updated without a lock)
        self._last_trim, self._last_noted = time.monotonic(), -1e9
        self._trim = _malloc_trim() if self.enabled else None

    def note(self, nbytes: int) -> None:
        if self._trim is not None:
            self._noted += nbytes
            self._last_noted = time.monotonic()

    def maybe(self, now: float | None = None) -> bool:
        """Trim if it is time (see the class doc); True when it did."""
        if self._trim is None:
            return False
        now = time.monotonic() if now is None else now
        since = now - self._last_trim
        if not ((self._noted >= self.EVERY_BYTES and since >= self.MIN_INTERVAL)
                or (since >= self.QUIET_INTERVAL and now - self._last_noted <= self.AFTER_TRAFFIC)):
            return False
        self._noted, self._last_trim = 0, now
        self._trim(0)
        self.trims += 1
        return True


def _malloc_trim():
    """glibc's `malloc_trim`, or None (not glibc)."""
    return _libc("malloc_trim")


def _libc(symbol: str):
    """The C library's function `symbol`, or None (no such function: not glibc)."""
    import ctypes  # here, not at the top: the importer uses this module's GC settings only
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), symbol, None) if name else None
    except OSError:
        return None


memory_return = MemoryReturn()
"""The process's one instance: the receivers note, serve's pipeline tick trims."""
