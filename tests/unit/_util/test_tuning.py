"""serve's process settings: the GC tune, and the mmap threshold pin (a large buffer freed goes back to the OS)."""

from __future__ import annotations

import gc
import platform
import subprocess
import sys

import pytest

from wt_otel._util.tuning import GC_THRESHOLDS, tune_gc

# What serve does per request: a fresh multi-MiB buffer, touched, then freed; then how far RSS grew (KiB).
# In a process of its own: in the test run's process, other tests' threads allocate meanwhile (CI saw +4 MiB).
_BUFFERS = """
import sys
from wt_otel._util.tuning import pin_mmap_threshold

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

pinned = pin_mmap_threshold() if sys.argv[1] == "pin" else None
base = rss_kib()
for _ in range(50):
    buf = bytearray(4 * 1024 * 1024)
    buf[::4096] = b"x" * len(buf[::4096])
    del buf
print(pinned, rss_kib() - base)
"""


def _grown_kib(pin: bool) -> tuple[str, int]:
    done = subprocess.run([sys.executable, "-c", _BUFFERS, "pin" if pin else "no"], capture_output=True, text=True,
                          timeout=60, check=True)
    pinned, grown = done.stdout.split()
    return pinned, int(grown)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_freed_request_buffers_leave_rss_after_the_pin() -> None:
    pinned, grown = _grown_kib(pin=True)
    assert pinned == "True" and grown < 2 * 1024, grown  # without the pin glibc keeps the last ones (~4+ MiB)


def test_tune_gc_freezes_start_up_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0
        assert gc.isenabled()  # cycles are still collected, only less often
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_gc_tuned_is_undone_after_the_work() -> None:
    """The importer's pass 2 runs inside `gc_tuned()`: tuned while it runs, the caller's settings after
    (import_dumps is a library call too), also when the work raises."""
    from wt_otel._util.tuning import gc_tuned

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with gc_tuned():
        assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > frozen
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), gc_tuned():
        raise RuntimeError("a batch failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
