"""The terminal table of a sweep: scenario, verdict, runs passed, layer pass rates, failing detail.

On a terminal it is a rich table with coloured verdicts. Anywhere else (a CI
log, a pipe, a file) it is plain aligned text, one line per scenario with the
detail unwrapped at the end, because CI logs mangle escape codes and a
wrapped detail breaks `grep ^FAIL`.
"""

from __future__ import annotations

import sys
from typing import IO

from wt_otel.contracts.results import LAYERS, ScenarioResult, SweepResult

COLOURS = {"PASS": "green", "PASS_WITH_VARIANCE": "yellow", "UNREVIEWED": "cyan", "FAIL": "red", "INVALID": "magenta",
           "ERROR": "bold red"}
HEADERS = ("VERDICT", "SCENARIO", "RUNS")


def layer_columns(sweep: SweepResult) -> list[str]:
    """Layers any scenario has a pass rate for, in the canonical order, then any others."""
    present = {k for s in sweep.scenarios for k in s.layer_pass_rates}
    return [k for k in LAYERS if k in present] + sorted(present - set(LAYERS))


def _rate(result: ScenarioResult, layer: str) -> str:
    rate = result.layer_pass_rates.get(layer)
    return "-" if rate is None else f"{rate:.0%}"


def _detail(result: ScenarioResult) -> str:
    if result.verdict == "PASS" and not result.detail:
        return ""
    return " ".join((result.detail or "").split())


def rows(sweep: SweepResult) -> tuple[list[str], list[list[str]]]:
    """Header and cells, shared by both renderings."""
    layers = layer_columns(sweep)
    header = [*HEADERS, *(layer.upper() for layer in layers), "DETAIL"]
    body = [[s.verdict, s.scenario_id, f"{s.runs_passed}/{s.runs}", *(_rate(s, layer) for layer in layers),
             _detail(s)] for s in sweep.scenarios]
    return header, body


def render_plain(sweep: SweepResult) -> str:
    """Aligned columns, no escape codes; the last column (detail) is never padded or wrapped."""
    header, body = rows(sweep)
    table = [header, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)), r[-1]]).rstrip()
             for r in table]
    return "\n".join(lines) + "\n"


def print_table(sweep: SweepResult, file: IO[str] | None = None, *, color: bool | None = None) -> None:
    """Print the table to `file` (stdout): rich and coloured when it is a terminal (or `color=True`)."""
    out = file if file is not None else sys.stdout
    tty = color if color is not None else bool(getattr(out, "isatty", lambda: False)())
    if not tty:
        out.write(render_plain(sweep))
        out.flush()
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    header, body = rows(sweep)
    table = Table(title=f"sweep {sweep.sweep_id}", title_justify="left", show_lines=False)
    for name in header:
        table.add_column(name, overflow="fold", no_wrap=name != "DETAIL")
    for cells in body:
        verdict = Text(cells[0], style=COLOURS.get(cells[0], ""))
        table.add_row(verdict, *(Text(c) for c in cells[1:]))  # Text: trace content is never markup
    Console(file=out, force_terminal=True, highlight=False).print(table)
