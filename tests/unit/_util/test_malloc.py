"""The mmap threshold pin: on glibc mallopt takes it; a large buffer is then returned to the OS when freed."""

from __future__ import annotations

import platform

import pytest

from wt_otel._util.malloc import pin_mmap_threshold


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_freed_request_buffers_leave_rss_after_the_pin() -> None:
    assert pin_mmap_threshold() is True
    base = _rss_kib()
    for _ in range(50):  # what serve does per request: a fresh multi-MiB buffer, touched, then freed
        buf = bytearray(4 * 1024 * 1024)
        buf[::4096] = b"x" * len(buf[::4096])
        del buf
    assert _rss_kib() - base < 2 * 1024  # without the pin, glibc keeps the last ones in its heap (~4+ MiB)
