"""Process-wide settings: the cyclic GC's thresholds and glibc's mmap threshold for serve, a long-running
process that holds many small objects and frees a large buffer per request; the GC's for `wt-otel import`'s
pass 2 (`gc_tuned`).

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
    import ctypes  # here, not at the top: the importer uses this module's GC settings only
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = getattr(libc, "mallopt", None)
    except OSError:
        mallopt = None
    if mallopt is None:
        log.debug("no mallopt (not glibc): the allocator's thresholds stay as they are")
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
