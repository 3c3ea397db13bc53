"""What a sweep leaves behind besides its traces: ledger rows and `--format junit|json --out F` files.

Both are written from the one `contracts.results.SweepResult` document. Writers
are found by name through entry points (`wt_otel.components`), so the core never
imports `exporters/`, and a third-party package can add a format by registering one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wt_otel.components import load as load_component
from wt_otel.contracts.results import SweepResult

LEDGER_FILE = "ledger.ndjsonl"

__all__ = ["LEDGER_FILE", "append_ledger", "infer_format", "write_results"]


def append_ledger(runs_dir: Path, record: SweepResult) -> Path:
    """One ledger row per scenario of the sweep, ERROR rows included; returns the ledger's path."""
    path = runs_dir / LEDGER_FILE
    load_component("exporters", "ledger")(path).append_sweep(record)
    return path


def write_results(record: SweepResult, fmt: str, out: Path) -> None:
    """`--format junit|json --out F`: the writer registered under `fmt` writes `record` to `out`."""
    writer: Callable[[SweepResult, Path], None] = load_component("exporters", fmt)
    writer(record, out)


def infer_format(fmt: str | None, out: Path | None) -> str | None:
    """`--out results.xml` alone means junit, `.json` json; `--format` without `--out` is a usage error."""
    if fmt and out is None:
        raise ValueError(f"--format {fmt} needs --out FILE")
    if fmt or out is None:
        return fmt
    suffix = out.suffix.lower()
    if suffix == ".xml":
        return "junit"
    if suffix == ".json":
        return "json"
    raise ValueError(f"--out {out}: say --format junit or --format json (the suffix {suffix!r} does not tell)")
