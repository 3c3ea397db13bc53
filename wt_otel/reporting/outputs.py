"""What a sweep leaves behind besides its traces: ledger rows and `--format junit|json --out F` files.

Both are written from the one `contracts.results.SweepResult` document. Writers
are found by name through entry points (`wt_otel.components`), so the core never
imports `exporters/`, and a third-party package can add a format by registering one.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from wt_otel.components import PluginError, load_plugin, names
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
    """`--format NAME --out F`: the results format registered as NAME (wt_otel.results_formats) writes `record`."""
    load_plugin("results_formats", fmt).write(record, out)


def infer_format(fmt: str | None, out: Path | None) -> str | None:
    """`--out F` alone: the registered format whose suffix F has (.xml junit, .json json); `--format` without
    `--out` is a usage error, and so is a format whose plug-in lacks the interface (ValueError naming it)."""
    if fmt and out is None:
        raise ValueError(f"--format {fmt} needs --out FILE")
    if fmt:
        try:
            load_plugin("results_formats", fmt)
        except PluginError as exc:
            raise ValueError(str(exc)) from None
    if fmt or out is None:
        return fmt
    suffix = out.suffix.lower()
    by_suffix: dict[str, str] = {}
    for name in names("results_formats"):
        with contextlib.suppress(PluginError):  # a broken plug-in is reported when it is asked for by name
            by_suffix.setdefault(load_plugin("results_formats", name).suffix.lower(), name)
    if suffix in by_suffix:
        return by_suffix[suffix]
    known = sorted(names("results_formats"), key=lambda n: (n != "junit", n))  # JUnit first: what CI reads
    say = " or ".join(f"--format {n}" for n in known)
    raise ValueError(f"--out {out}: say {say} (the suffix {suffix!r} does not tell)")
