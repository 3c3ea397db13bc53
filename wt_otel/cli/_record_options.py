"""The record budget flags, one definition for every command that records (`run --llm record`,
`cassette record`), so their names, defaults and help cannot drift apart."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from wt_otel.replay.record_budget import DEFAULT_MAX_BYTES, DEFAULT_MAX_CALLS, DEFAULT_MAX_SECONDS, RecordBudget

F = TypeVar("F", bound=Callable[..., Any])
_SIZE = re.compile(r"(\d+)\s*([kmg]?)(i?b)?", re.I)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


class ByteSize(click.ParamType):
    """A byte count: 8388608, 8M, 8MiB, 512k (binary units)."""

    name = "BYTES"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        match = _SIZE.fullmatch(str(value).strip())
        if not match:
            self.fail(f"{value!r} is not a byte count (e.g. 8388608, 8M, 512k; 0 for no limit)", param, ctx)
        return int(match.group(1)) * _UNITS[match.group(2).lower()]


def record_budget_options(func: F) -> F:
    """Add --max-llm-calls, --max-seconds, --max-bytes (see `budget_from`)."""
    func = click.option("--max-bytes", type=ByteSize(), default=f"{DEFAULT_MAX_BYTES // 1024**2}M", show_default=True,
                        help="Record budget: the bytes a recorded run may write (8M, 512k; 0: no limit).")(func)
    func = click.option("--max-seconds", type=click.FloatRange(min=0), default=DEFAULT_MAX_SECONDS,
                        show_default=True,
                        help="Record budget: seconds from a run's first model call (0: no limit).")(func)
    return click.option(
        "--max-llm-calls", type=click.IntRange(min=0), default=DEFAULT_MAX_CALLS, show_default=True,
        help="Record budget: model calls per recorded run (0: no limit). A run over any budget has its "
             "next model call refused (HTTP 400 record_budget_exceeded), is never written (the cassette keeps "
             "its last good state), and is reported naming the budget, with exit status 1.")(func)


def budget_from(max_llm_calls: int, max_seconds: float, max_bytes: int) -> RecordBudget:
    return RecordBudget(max_calls=max_llm_calls, max_seconds=max_seconds, max_bytes=max_bytes)


__all__ = ["ByteSize", "budget_from", "record_budget_options"]
