"""The one clock: every timestamp wt-otel writes is UTC ISO-8601 with `Z`."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from wt_otel._util.clock import compact_stamp, elapsed_ms, iso, iso_from_ns, parse_iso, utc_now_iso

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def test_now_is_utc_with_z_and_milliseconds() -> None:
    stamp = utc_now_iso()
    assert ISO_Z.match(stamp), stamp
    assert "+00:00" not in stamp
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", utc_now_iso("seconds"))
    assert ISO_Z.match(iso(datetime(2026, 1, 2, 3, 4, 5, 678_900, tzinfo=UTC))) and \
        iso(datetime(2026, 1, 2, 3, 4, 5, 678_900, tzinfo=UTC)) == "2026-01-02T03:04:05.678Z"


def test_other_offsets_and_naive_times_are_converted_to_utc() -> None:
    plus2 = datetime(2026, 1, 2, 5, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    assert iso(plus2, "seconds") == "2026-01-02T03:00:00Z"
    assert iso(datetime(2026, 1, 2, 3, 0, 0), "seconds") == "2026-01-02T03:00:00Z"


def test_otlp_nanoseconds_and_unset() -> None:
    assert iso_from_ns(1_767_323_045_678_000_000) == "2026-01-02T03:04:05.678Z"
    assert iso_from_ns(0) is None and iso_from_ns(None) is None


def test_parse_round_trips_and_rejects_garbage() -> None:
    stamp = "2026-01-02T03:04:05.678Z"
    parsed = parse_iso(stamp)
    assert parsed is not None and parsed.tzinfo is not None and iso(parsed) == stamp
    assert parse_iso("2026-01-02T03:04:05+00:00") == parse_iso("2026-01-02T03:04:05Z")
    assert parse_iso("2026-01-02T03:04:05") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)  # naive: UTC
    assert parse_iso("yesterday") is None


def test_compact_stamp_and_elapsed() -> None:
    assert re.fullmatch(r"\d{8}T\d{6}Z", compact_stamp())
    assert elapsed_ms(time.perf_counter()) >= 0


def test_iso_from_ns_writes_what_iso_writes() -> None:
    """iso_from_ns skips iso()'s conversions (the moment is UTC already): the same text for any timestamp."""
    import random

    rng = random.Random(7)
    stamps = [1, 999_999, 1_000_000, 1_767_323_045_678_999_999, 253_402_300_799_999_999_999 // 1000]
    stamps += [rng.randrange(1, 4_102_444_800 * 10**9) for _ in range(2000)]
    for ns in stamps:
        assert iso_from_ns(ns) == iso(datetime.fromtimestamp(ns / 1e9, tz=UTC)), ns


def test_now_is_now_to_the_millisecond_though_it_is_formatted_once_per_millisecond() -> None:
    for _ in range(3):
        before = iso(datetime.now(UTC))
        stamp = utc_now_iso()
        assert before <= stamp <= iso(datetime.now(UTC)), stamp
        time.sleep(0.002)  # the next millisecond: a fresh string, not the cached one
        assert utc_now_iso() > stamp


def test_iso_from_ns_matches_datetime_on_edges() -> None:
    """The fast path (day memo, arithmetic, %-formatting) writes datetime's text byte for byte: the epoch,
    leap days, year ends, every sub-second digit position and the float rounding at .9995/.9999995 s."""
    from wt_otel._util.clock import _MAX_FAST_NS, _iso_from_ns_datetime

    day = 86_400 * 10**9
    bases = [0, 951_782_400 * 10**9, 1_709_164_800 * 10**9, 1_735_603_200 * 10**9, 4_107_542_400 * 10**9,
             4_102_444_800 * 10**9 - day, 253_402_214_400 * 10**9]  # epoch, 2000-02-29, 2024-02-29, 2024-12-31,
    #                                            2100-03-01 (no leap day), 2099-12-31, 9999-12-31
    subs = [0, 1, 9, 10, 999, 1_000, 499_999, 500_000, 999_999, 1_000_000, 123_456_789, 999_499_999,
            999_500_000, 999_999_499, 999_999_500, 999_999_999]
    stamps = [b + s + k * 10**9 for b in bases for s in subs for k in (0, 1, 59, 3599, 86_399)]
    stamps += [_MAX_FAST_NS - 1, _MAX_FAST_NS, _MAX_FAST_NS + 999_999_999]
    def outcome(fn: Any, ns: int) -> str:
        try:
            return fn(ns)
        except ValueError as e:  # the last second of 9999 may round into year 10000
            return f"ValueError: {e}"

    for ns in stamps:
        if ns:
            assert outcome(iso_from_ns, ns) == outcome(_iso_from_ns_datetime, ns), ns
    assert iso_from_ns(1) == "1970-01-01T00:00:00.000Z"
    assert iso_from_ns(1_709_164_800_999_999_999) == "2024-02-29T00:00:01.000Z"  # the float rounds up a second
    assert iso_from_ns(951_868_799_999_000_000) == "2000-02-29T23:59:59.999Z"


def test_iso_from_ns_past_year_9999_fails_as_datetime_does() -> None:
    import pytest

    from wt_otel._util.clock import _iso_from_ns_datetime

    ns = 253_402_300_800 * 10**9
    with pytest.raises(ValueError) as fast:
        iso_from_ns(ns)
    with pytest.raises(ValueError) as reference:
        _iso_from_ns_datetime(ns)
    assert str(fast.value) == str(reference.value)
