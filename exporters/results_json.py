"""`--format json`: the sweep as one `SweepResult` document (`wt_results: 1`), for anything that does not
speak JUnit.

It is the same data the ledger rows and the JUnit file are made from, whole:
sweep id, started/finished, the selection that chose the scenarios, and a
record per scenario with its per-run scores. `wt_otel.contracts.results.SweepResult`
reads it back (`SweepResult.model_validate_json`).
"""

from __future__ import annotations

from pathlib import Path

from wt_otel._util.fsutil import atomic_write
from wt_otel.components import ResultsFormatSpec
from wt_otel.contracts.results import SweepResult


def to_json(sweep: SweepResult) -> str:
    return sweep.model_dump_json(indent=2) + "\n"


def write_results_json(sweep: SweepResult, out: Path) -> None:
    """Write the document atomically; non-ASCII text is kept as UTF-8 (JSON escapes control characters)."""
    atomic_write(out, to_json(sweep))


# the `json` results format (entry-point group wt_otel.results_formats): `wt-otel run/check --format json`
FORMAT = ResultsFormatSpec(name="json", suffix=".json", write=write_results_json)
