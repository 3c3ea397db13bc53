"""`wt-otel report`: the ledger's history, per scenario (latest verdict, trend, flakiness, time since green).

Pure: `build_report(rows)` turns ledger rows into a `Report` (data), and the
renderers turn that into text, JSON, Markdown or HTML. Reading the ledger
file is the CLI's business (through the `ledger` exporter), so this module
never touches the file system.

Definitions (each chosen so a number means the same thing in every format):

- pass rate of a row: `runs_passed / runs` (0 for a row with no run, e.g. an
  ERROR before the first run); the trend is the last `window` rows, oldest first;
- green: PASS or PASS_WITH_VARIANCE; a flip is a change of green-ness between
  consecutive rows in the window (PASS→FAIL→PASS is two flips), so an
  ERROR→FAIL change is not counted as flakiness;
- time since last green: from the newest green row to `now` (None: never green);
- by owner (0001, Change 3: "owner flows into ... report grouping"): scenarios are listed per owner (the
  scenario's effective owner in its latest row; no owner last), each owner followed by a subtotal of its
  scenarios' latest verdicts, so a team reads its own share of red first.

The HTML page is self-contained (inline CSS and SVG, no script, no external
asset) so it can be attached to a CI run or mailed; every string from the
ledger (scenario ids, details, owners: trace-derived text) is escaped.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime

from wt_otel._util.clock import iso, parse_iso, utc_now
from wt_otel.contracts.results import LedgerRow

GREEN = ("PASS", "PASS_WITH_VARIANCE")
DEFAULT_WINDOW = 20
FORMATS = ("text", "json", "markdown", "html")
SPARK = "▁▂▃▄▅▆▇█"
_CONTROL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _parse_ts(ts: str) -> datetime | None:
    return parse_iso(ts)


def _rate(row: LedgerRow) -> float:
    return round(row.runs_passed / row.runs, 4) if row.runs else 0.0


@dataclass
class ScenarioHistory:
    scenario_id: str
    pack: str | None
    owner: str | None
    origin: str | None
    latest_verdict: str
    latest_detail: str | None
    latest_ts: str
    latest_sweep: str
    sweeps: int  # rows in the ledger for this scenario (all time)
    trend: list[float] = field(default_factory=list)  # pass rate per row, last `window`, oldest first
    verdicts: list[str] = field(default_factory=list)  # verdict per row, same window
    flips: int = 0
    last_green_ts: str | None = None
    since_green_s: float | None = None
    latest_triage: str | None = None  # who must act on the latest non-pass (wt_otel.scoring.triage)


@dataclass
class SweepPoint:
    """One sweep on the overall chart: the share of its scenarios that were green."""

    sweep_id: str
    ts: str
    scenarios: int
    green: int

    @property
    def rate(self) -> float:
        return round(self.green / self.scenarios, 4) if self.scenarios else 0.0


@dataclass
class OwnerTotal:
    """One owner's subtotal over its scenarios' latest verdicts (owner None: scenarios nobody owns)."""

    owner: str | None
    scenarios: int
    green: int
    verdicts: dict[str, int] = field(default_factory=dict)  # latest verdict -> scenarios

    @property
    def rate(self) -> float:
        return round(self.green / self.scenarios, 4) if self.scenarios else 0.0

    def describe(self) -> str:
        """`owner team-a: 2 scenario(s), 1 green (50%): FAIL 1, PASS 1`."""
        who = f"owner {self.owner}" if self.owner is not None else "no owner"
        counts = ", ".join(f"{v} {n}" for v, n in self.verdicts.items())
        return f"{who}: {self.scenarios} scenario(s), {self.green} green ({self.rate:.0%}): {counts}"


@dataclass
class Report:
    generated_at: str
    window: int
    rows: int
    scenarios: list[ScenarioHistory]  # grouped by owner, in `owners` order
    sweeps: list[SweepPoint]
    problems: list[str] = field(default_factory=list)
    owners: list[OwnerTotal] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["sweeps"] = [{**asdict(p), "rate": p.rate} for p in self.sweeps]
        data["owners"] = [{**asdict(t), "rate": t.rate} for t in self.owners]
        return {"wt_report": 1, **data}

    def by_owner(self) -> list[tuple[OwnerTotal, list[ScenarioHistory]]]:
        """Each owner's subtotal with its scenarios, in report order (subtotals computed here for a Report
        built without them, so no scenario is ever left out of a rendering)."""
        return [(t, [h for h in self.scenarios if h.owner == t.owner])
                for t in (self.owners or owner_totals(self.scenarios))]


def _owner_key(owner: str | None) -> tuple[bool, str]:
    return owner is None, owner or ""


def owner_totals(histories: Sequence[ScenarioHistory]) -> list[OwnerTotal]:
    """Subtotals per owner (sorted; no owner last), verdict counts sorted by verdict."""
    groups: dict[str | None, list[ScenarioHistory]] = {}
    for h in histories:
        groups.setdefault(h.owner, []).append(h)
    totals = []
    for owner in sorted(groups, key=_owner_key):
        hs = groups[owner]
        counts: dict[str, int] = {}
        for h in hs:
            counts[h.latest_verdict] = counts.get(h.latest_verdict, 0) + 1
        totals.append(OwnerTotal(owner, len(hs), sum(h.latest_verdict in GREEN for h in hs), dict(sorted(
            counts.items()))))
    return totals


def _history(rows: list[LedgerRow], window: int, now: datetime) -> ScenarioHistory:
    rows = sorted(rows, key=lambda r: r.ts)
    recent = rows[-window:]
    latest = rows[-1]
    greens = [r for r in rows if r.verdict in GREEN]
    last_green = greens[-1] if greens else None
    green_at = _parse_ts(last_green.ts) if last_green else None
    flags = [r.verdict in GREEN for r in recent]
    return ScenarioHistory(
        scenario_id=latest.scenario_id, pack=latest.pack, owner=latest.owner,
        origin=next((r.origin for r in reversed(rows) if r.origin), None),
        latest_verdict=latest.verdict, latest_detail=latest.detail, latest_ts=latest.ts,
        latest_sweep=latest.sweep_id, sweeps=len(rows), trend=[_rate(r) for r in recent],
        verdicts=[r.verdict for r in recent], flips=sum(a != b for a, b in zip(flags, flags[1:], strict=False)),
        last_green_ts=last_green.ts if last_green else None,
        since_green_s=round(max(0.0, (now - green_at).total_seconds()), 1) if green_at else None,
        latest_triage=getattr(latest, "triage", None),
    )


def build_report(rows: Iterable[LedgerRow], *, window: int = DEFAULT_WINDOW, now: datetime | None = None,
                 problems: Sequence[str] = ()) -> Report:
    """Group rows by (pack, scenario) and summarise each; `problems` (bad ledger lines) are carried along."""
    now = now or utc_now()
    rows = list(rows)
    groups: dict[tuple[str, str], list[LedgerRow]] = {}
    sweeps: dict[str, list[LedgerRow]] = {}
    for row in rows:
        groups.setdefault((row.pack or "", row.scenario_id), []).append(row)
        sweeps.setdefault(row.sweep_id, []).append(row)
    histories = sorted((_history(g, window, now) for _, g in sorted(groups.items())),
                       key=lambda h: _owner_key(h.owner))  # stable: (pack, scenario) order within an owner
    points = sorted((SweepPoint(sid, min(r.ts for r in rs), len(rs), sum(r.verdict in GREEN for r in rs))
                     for sid, rs in sweeps.items()), key=lambda p: p.ts)[-window:]
    return Report(generated_at=iso(now, "seconds"), window=window,
                  rows=len(rows), scenarios=histories, sweeps=points, problems=list(problems),
                  owners=owner_totals(histories))


# ---------------------------------------------------------------- rendering


def clean(text: object) -> str:
    """Text with the characters no document format should carry (C0 controls, lone surrogates) made visible."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        str(text))


def humanize(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def sparkline(rates: Sequence[float]) -> str:
    return "".join(SPARK[min(len(SPARK) - 1, int(r * (len(SPARK) - 1) + 0.5))] for r in rates)


def _green_since(h: ScenarioHistory) -> str:
    return "green now" if h.latest_verdict in GREEN else humanize(h.since_green_s)


def _cells(h: ScenarioHistory) -> list[str]:
    return [h.latest_verdict, h.scenario_id, h.pack or "-", h.owner or "-", sparkline(h.trend),
            f"{h.trend[-1]:.0%}" if h.trend else "-", str(h.flips), _green_since(h),
            (f"[{h.latest_triage}] " if h.latest_triage else "") + " ".join(clean(h.latest_detail or "").split())]


HEADER = ["VERDICT", "SCENARIO", "PACK", "OWNER", "TREND", "RATE", "FLIPS", "SINCE GREEN", "DETAIL"]


def render_text(report: Report) -> str:
    table = [HEADER] + [[clean(c) for c in _cells(h)] for h in report.scenarios]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER) - 1)]

    def line(r: list[str]) -> str:
        return "  ".join([*(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)), r[-1]]).rstrip()

    lines = [line(HEADER)]
    for total, histories in report.by_owner():  # each owner's rows, then its subtotal
        lines += [line([clean(c) for c in _cells(h)]) for h in histories]
        lines.append(clean(total.describe()))
    lines.append(f"{len(report.scenarios)} scenario(s), {report.rows} ledger row(s), trend over the last "
                 f"{report.window} sweep(s)")
    lines += [f"warning: {clean(p)}" for p in report.problems]
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"


def _md(text: str) -> str:
    """A Markdown table cell: pipes and markup characters escaped, one line, no raw HTML."""
    text = " ".join(clean(text).split())
    text = html.escape(text, quote=False)
    return re.sub(r"([\\`*_{}\[\]()#+!|~<>])", r"\\\1", text)


def render_markdown(report: Report) -> str:
    lines = [f"# wt-otel report ({report.generated_at})", "",
             f"{len(report.scenarios)} scenario(s), {report.rows} ledger row(s); trend over the last "
             f"{report.window} sweep(s)."]
    for total, histories in report.by_owner():  # a section per owner, its subtotal as the heading
        lines += ["", f"## {_md(total.describe()[:1].upper() + total.describe()[1:])}", "",
                  "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        lines += ["| " + " | ".join(_md(c) for c in _cells(h)) + " |" for h in histories]
    if report.problems:
        lines += ["", "## Ledger problems", ""] + [f"- {_md(p)}" for p in report.problems]
    return "\n".join(lines) + "\n"


def _esc(text: object) -> str:
    return html.escape(clean(text), quote=True)


def svg_chart(points: Sequence[tuple[str, float]], *, width: int = 640, height: int = 160, title: str) -> str:
    """A line chart of pass rates (0..1), with a `<title>` per point (hover shows the sweep and rate)."""
    pad = 28
    inner_w, inner_h = width - 2 * pad, height - 2 * pad
    n = len(points)

    def xy(i: int, rate: float) -> tuple[float, float]:
        x = pad + (inner_w * i / (n - 1) if n > 1 else inner_w / 2)
        return round(x, 1), round(pad + inner_h * (1 - rate), 1)

    coords = [xy(i, r) for i, (_, r) in enumerate(points)]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">',
             f"<title>{_esc(title)}</title>",
             f'<rect x="{pad}" y="{pad}" width="{inner_w}" height="{inner_h}" class="frame"/>']
    for level in (0.0, 0.5, 1.0):
        y = round(pad + inner_h * (1 - level), 1)
        parts.append(f'<line x1="{pad}" y1="{y}" x2="{pad + inner_w}" y2="{y}" class="grid"/>'
                     f'<text x="{pad - 4}" y="{y + 4}" class="axis">{level:.0%}</text>')
    if len(coords) > 1:
        parts.append('<polyline class="line" points="' + " ".join(f"{x},{y}" for x, y in coords) + '"/>')
    for (label, rate), (x, y) in zip(points, coords, strict=True):
        parts.append(f'<circle cx="{x}" cy="{y}" r="3" class="{"ok" if rate >= 1 else "bad"}">'
                     f"<title>{_esc(label)}: {rate:.0%}</title></circle>")
    parts.append("</svg>")
    return "".join(parts)


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-top:1em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f4f4f4}.v-PASS{color:#176d2c;font-weight:600}.v-PASS_WITH_VARIANCE{color:#8a6d00;
font-weight:600}.v-FAIL,.v-ERROR{color:#b00020;font-weight:600}.v-INVALID{color:#7b1fa2;font-weight:600}
.detail{max-width:40em;word-break:break-word;font-family:ui-monospace,monospace;font-size:12px}
.chart .frame{fill:none;stroke:#ccc}.chart .grid{stroke:#eee}.chart .axis{font-size:10px;text-anchor:end;fill:#666}
.chart .line{fill:none;stroke:#3366cc;stroke-width:2}.chart .ok{fill:#176d2c}.chart .bad{fill:#b00020}
.problems{color:#b00020}.subtotal th{background:#fafafa;font-weight:600;text-align:right}
"""


def render_html(report: Report) -> str:
    overall = svg_chart([(f"sweep {p.sweep_id} ({p.ts}): {p.green}/{p.scenarios} green", p.rate)
                         for p in report.sweeps], title="share of green scenarios per sweep")
    rows = []
    subtotal_after = {id(hs[-1]): t for t, hs in report.by_owner() if hs}
    for h in report.scenarios:
        spark = svg_chart([(f"{v} ({i + 1} of {len(h.trend)})", r) for i, (v, r) in
                           enumerate(zip(h.verdicts, h.trend, strict=True))],
                          width=180, height=60, title=f"pass rate trend of {h.scenario_id}")
        cells = _cells(h)
        rows.append(f'<tr><td class="v-{_esc(h.latest_verdict)}">{_esc(cells[0])}</td>'
                    + "".join(f"<td>{_esc(c)}</td>" for c in cells[1:4])
                    + f"<td>{spark}</td>" + "".join(f"<td>{_esc(c)}</td>" for c in cells[5:8])
                    + f'<td class="detail">{_esc(cells[8])}</td></tr>')
        total = subtotal_after.get(id(h))
        if total is not None:
            rows.append(f'<tr class="subtotal"><th colspan="{len(HEADER)}">{_esc(total.describe())}</th></tr>')
    problems = ""
    if report.problems:
        problems = ('<h2>Ledger problems</h2><ul class="problems">'
                    + "".join(f"<li>{_esc(p)}</li>" for p in report.problems) + "</ul>")
    head = "".join(f"<th>{_esc(h)}</th>" for h in HEADER)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>wt-otel report</title>'
            f"<style>{CSS}</style></head><body>"
            f"<h1>wt-otel report</h1><p>generated {_esc(report.generated_at)}: {len(report.scenarios)} scenario(s), "
            f"{report.rows} ledger row(s), trend over the last {report.window} sweep(s)</p>"
            f"<h2>Pass rate per sweep</h2>{overall}"
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{problems}"
            "</body></html>\n")


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown, "html": render_html}


def render(report: Report, fmt: str) -> str:
    return RENDERERS[fmt](report)
