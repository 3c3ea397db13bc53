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
The append and read rules (one write per line, `flock`, fsync, torn tails)
are the shared journal's (`wt_otel._util.journal`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from wt_otel._util.clock import utc_now_iso
from wt_otel._util.journal import Journal
from wt_otel.contracts.results import LedgerRow, SweepResult


def rows_for(sweep: SweepResult) -> list[LedgerRow]:
    """One row per scenario record, each with its own timestamp (when it was written)."""
    return [LedgerRow.from_result(sweep, result, utc_now_iso()) for result in sweep.scenarios]


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
        """Append each row with one `os.write` (under `flock`, fsynced); returns how many were written."""
        journal = Journal(self.path, label=str(self.path))
        try:
            return journal.append([encode(row) for row in rows], encoded=True)
        finally:
            journal.close()

    def append_sweep(self, sweep: SweepResult) -> int:
        return self.append(rows_for(sweep))

    def read(self) -> LedgerRead:
        """Every row, in file order. A missing ledger is empty; bad lines are skipped and listed."""
        read = Journal(self.path, label=str(self.path)).read(LedgerRow.model_validate, keep_torn=True,
                                                              what="not a ledger row")
        return LedgerRead(rows=read.records, problems=read.problems, torn=read.torn)
