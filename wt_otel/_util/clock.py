"""One clock: every timestamp wt-otel writes is UTC ISO-8601 ending in `Z`, milliseconds by default.

Why one module: the files we write (index, queue, ledger, results, envelopes)
are compared and sorted as strings by people and tools; one writer putting
`+00:00` where the others put `Z` sorts and greps differently. Durations use
the monotonic clock (`perf_counter`), never wall time, so a clock step cannot
make one negative.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

__all__ = ["compact_stamp", "elapsed_ms", "epoch_ms", "iso", "iso_from_ns", "parse_iso", "utc_now",
           "utc_now_iso"]


def utc_now() -> datetime:
    """Now, as an aware UTC datetime."""
    return datetime.now(UTC)


def iso(moment: datetime, timespec: str = "milliseconds") -> str:
    """`2026-01-02T03:04:05.678Z`; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


_last_ms: tuple[int, str] = (-1, "")  # the last millisecond utc_now_iso() formatted (serve asks per session)


def utc_now_iso(timespec: str = "milliseconds") -> str:
    """Now, as `iso()` writes it (without its conversions: a moment made in UTC ends in "+00:00")."""
    global _last_ms
    if timespec != "milliseconds":
        return datetime.now(UTC).isoformat(timespec=timespec)[:-6] + "Z"
    ms = time.time_ns() // 1_000_000
    last = _last_ms
    if last[0] != ms:
        moment = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
        last = _last_ms = (ms, moment.isoformat(timespec="milliseconds")[:-6] + "Z")
    return last[1]


# 9999-12-31T23:59:59: beyond it datetime raises where gmtime would write year 10000 (one second spare,
# since the float below can round up into the next second)
_MAX_FAST_NS = 253_402_300_799 * 10**9


_last_day: tuple[int, str] = (-1, "")  # the last day iso_from_ns() formatted (a dump's spans share few days)


def iso_from_ns(ns: int | None) -> str | None:
    """An OTLP nanosecond timestamp as `iso()`; None for 0/None (OTLP's "unset").

    The text `datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")` makes (the same
    float, rounded to microseconds half-even, then truncated to milliseconds), without building a datetime:
    the date is formatted once per day, the time of day by arithmetic and %-formatting, in half the time
    (the importer writes every LLM call's start and end)."""
    global _last_day
    if not ns:
        return None
    if not 0 < ns < _MAX_FAST_NS:
        return _iso_from_ns_datetime(ns)
    frac, whole = math.modf(ns / 1e9)
    us = round(frac * 1e6)  # half-even, as datetime.fromtimestamp rounds
    secs = int(whole)
    if us >= 1_000_000:
        secs += 1
        us -= 1_000_000
    day, rem = divmod(secs, 86_400)
    last = _last_day
    if last[0] != day:
        t = time.gmtime(day * 86_400)
        last = _last_day = (day, f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}")
    hour, rem = divmod(rem, 3600)
    minute, sec = divmod(rem, 60)
    return "%sT%02d:%02d:%02d.%03dZ" % (last[1], hour, minute, sec, us // 1000)  # noqa: UP031 - 0.3 us, an f-string 0.5


def _iso_from_ns_datetime(ns: int) -> str:
    """`iso_from_ns` through datetime: the reference, and the path for moments past year 9999."""
    # iso() without its conversions: this moment is already UTC, so its isoformat ends in "+00:00"
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def parse_iso(text: str) -> datetime | None:
    """An ISO-8601 timestamp (`Z` or an offset; naive taken as UTC) as an aware datetime; None if malformed."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def compact_stamp() -> str:
    """`20260102T030405Z`: now, sortable and safe in file names and ids."""
    return utc_now().strftime("%Y%m%dT%H%M%SZ")


def epoch_ms() -> int:
    """Wall-clock milliseconds since the epoch (for wire fields that want a number)."""
    return time.time_ns() // 1_000_000


def elapsed_ms(since: float) -> float:
    """Milliseconds since `since` (a `time.perf_counter()` value), rounded to 0.1 ms."""
    return round((time.perf_counter() - since) * 1000, 1)
