"""Pin glibc's mmap threshold so large request buffers go back to the OS when freed.

glibc serves an allocation of 128 KiB or more with its own mmap, and unmaps it on free; but after the
first such free it raises that threshold (up to 32 MiB) to the size just freed. serve allocates and frees
a buffer per request (an OTLP request is often 0.5-4 MiB), so after the first one every request buffer
comes from the heap arenas, which keep their pages: measured under the overload bench, RSS grew to
~380 MiB against a 256 MiB memory budget, and stayed there. Setting the threshold explicitly turns the
adjustment off (mallopt(3)); the same run then peaks ~280 MiB. Elsewhere (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("wt_otel.malloc")

M_MMAP_THRESHOLD = -3  # <malloc.h>
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept fixed


def pin_mmap_threshold() -> bool:
    """True when glibc took the setting; False when this is not glibc (nothing changed)."""
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
