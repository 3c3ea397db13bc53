"""The run ledger, `<runs-dir>/ledger.ndjsonl`: one JSON line per scenario per sweep, appended, never rewritten.

Why append-only NDJSON: it is the queryable history over time (trends,
flakiness, "green since") that per-sweep folders are not, and it stays
greppable and `jq`-able. Several sweeps may share a runs dir (parallel CI
jobs on one runner), so each row is written by a single `os.write` of the
whole line on an `O_APPEND` descriptor: the kernel places each write at the
end as one unit, so lines from concurrent writers never interleave.

A crash can still leave a torn last line (a write cut short by a full disk or
a kill). Readers skip it and report it (`LedgerRead.torn`), and the next
append starts on a fresh line, so one bad write never poisons later rows.
That check reads the file's last byte, which a concurrent writer could be
halfway through, so appends also hold an advisory `flock` (best-effort: where
locking is unavailable the single write still keeps lines whole, at worst
leaving a blank line readers skip). The lock also keeps one sweep's rows
together.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from wt_otel.contracts.results import LedgerRow, SweepResult


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rows_for(sweep: SweepResult) -> list[LedgerRow]:
    """One row per scenario record, each with its own timestamp (when it was written)."""
    return [LedgerRow.from_result(sweep, result, _now()) for result in sweep.scenarios]


def encode(row: LedgerRow) -> bytes:
    """One line: compact JSON, UTF-8, no raw newline possible (JSON escapes control characters)."""
    return row.model_dump_json(exclude_none=False).encode("utf-8") + b"\n"


@dataclass
class LedgerRead:
    """What reading found: the rows, the bad lines (`path:line: why`), and whether the last line was torn."""

    rows: list[LedgerRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    torn: bool = False


class Ledger:
    """`Ledger(path).append(rows)`, `Ledger(path).read()`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, rows: Iterable[LedgerRow]) -> int:
        """Append each row with one `os.write`; returns how many were written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
            n = 0
            for row in rows:
                line = encode(row)
                if n == 0 and not self._ends_with_newline(fd):
                    line = b"\n" + line  # a torn last line from a crash: start ours on a line of its own
                self._write_all(fd, line)
                n += 1
            return n
        finally:
            os.close(fd)  # releases the lock

    def append_sweep(self, sweep: SweepResult) -> int:
        return self.append(rows_for(sweep))

    @staticmethod
    def _ends_with_newline(fd: int) -> bool:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        """One write for the whole line (atomic on O_APPEND); a short write (a full disk) is finished with
        further writes rather than dropped, and the reader treats what is left as a torn line."""
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def read(self) -> LedgerRead:
        """Every row, in file order. A missing ledger is empty; bad lines are skipped and listed."""
        out = LedgerRead()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return out
        lines = data.split(b"\n")
        tail_unterminated = not data.endswith(b"\n") and data != b""
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            last = number == len(lines)
            try:
                out.rows.append(LedgerRow.model_validate(json.loads(raw)))
            except (ValueError, ValidationError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                if last and tail_unterminated:
                    out.torn = True
                    out.problems.append(f"{self.path}:{number}: torn last line ({len(raw)} bytes) skipped: "
                                        "a write was cut short (crash or full disk)")
                else:
                    out.problems.append(f"{self.path}:{number}: not a ledger row, skipped: {_short(exc)}")
        return out


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:199] + "…"
