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


def test_memory_return_trims_after_large_requests_and_while_traffic_lasts(monkeypatch):
    """Issue 31: freed heap pages go back to the OS (malloc_trim) after 64 MiB of requests, at most every 2 s,
    and every 30 s while requests came in recently; never without traffic; off with WT_OTEL_RELEASE_MEMORY."""
    from wt_otel._util import tuning

    calls: list[int] = []
    monkeypatch.setattr(tuning, "_malloc_trim", lambda: calls.append)
    clock = [1000.0]
    monkeypatch.setattr(tuning.time, "monotonic", lambda: clock[0])
    release = tuning.MemoryReturn(enabled=True)
    t0 = clock[0]
    assert not release.maybe(t0 + 60)  # no traffic: nothing to give back
    release.note(30 * 1024 * 1024)
    assert not release.maybe(t0 + 3)  # under 64 MiB, and not 30 s since the start
    release.note(40 * 1024 * 1024)
    assert release.maybe(t0 + 3) and calls == [0]
    release.note(100 * 1024 * 1024)
    assert not release.maybe(t0 + 4)  # at most every 2 s
    assert release.maybe(t0 + 5.5) and len(calls) == 2
    assert not release.maybe(t0 + 20)
    assert release.maybe(t0 + 36)  # sessions written after the requests: a quiet trim
    assert not release.maybe(t0 + 1000)  # long after the last request: nothing more
    monkeypatch.setenv("WT_OTEL_RELEASE_MEMORY", "off")
    off = tuning.MemoryReturn()
    off.note(1 << 30)
    assert not off.maybe() and off.trims == 0
