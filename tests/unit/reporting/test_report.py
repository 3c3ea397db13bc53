"""`wt-otel report`: latest verdict, pass-rate trend, flakiness and time since green, in every format."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

from tests.unit.replay.test_run import cli
from wt_otel.components import load
from wt_otel.contracts.results import LedgerRow
from wt_otel.reporting.report import build_report, render_html, render_markdown, sparkline

NOW = datetime(2026, 1, 2, 0, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script>&amp; | pipe \x01'


def row(n: int, sid: str, verdict: str, passed: int = 1, runs: int = 1, **kw: object) -> LedgerRow:
    return LedgerRow(ts=f"2026-01-01T{n:02d}:00:00.000Z", sweep_id=f"sweep-{n}", scenario_id=sid, verdict=verdict,
                     runs=runs, runs_passed=passed, **kw)


def history() -> list[LedgerRow]:
    return [
        row(1, "flaky", "PASS", pack="billing", owner="team-a"), row(1, "steady", "PASS"),
        row(2, "flaky", "FAIL", 0, pack="billing", owner="team-a"), row(2, "steady", "PASS"),
        row(3, "flaky", "PASS", pack="billing", owner="team-a"), row(3, "steady", "PASS_WITH_VARIANCE", 1, 2),
        row(4, "flaky", "FAIL", 1, 2, pack="billing", owner="team-a", detail="outcome: missing fact"),
        row(4, "steady", "PASS"), row(4, "down", "ERROR", 0, 0, origin="incident-412"),
    ]


def test_build_report_trend_flips_and_time_since_green() -> None:
    report = build_report(history(), now=NOW)
    by = {h.scenario_id: h for h in report.scenarios}
    flaky, steady, down = by["flaky"], by["steady"], by["down"]
    assert flaky.latest_verdict == "FAIL" and flaky.trend == [1.0, 0.0, 1.0, 0.5] and flaky.flips == 3
    assert flaky.last_green_ts == "2026-01-01T03:00:00.000Z" and flaky.since_green_s == 21 * 3600
    assert steady.flips == 0 and steady.trend[2] == 0.5  # variance allowed is green, at half the runs
    assert down.since_green_s is None and down.trend == [0.0] and down.origin == "incident-412"
    assert [(p.sweep_id, p.green, p.scenarios) for p in report.sweeps] == [
        ("sweep-1", 2, 2), ("sweep-2", 1, 2), ("sweep-3", 2, 2), ("sweep-4", 1, 3)]
    short = {h.scenario_id: h for h in build_report(history(), window=2, now=NOW).scenarios}
    assert short["flaky"].trend == [1.0, 0.5] and short["flaky"].flips == 1  # the last 2 sweeps only
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"


def write_ledger(runs: Path, rows: list[LedgerRow]) -> Path:
    path = runs / "ledger.ndjsonl"
    load("exporters", "ledger")(path).append(rows)
    return path


def test_report_text_and_json_via_cli(tmp_path: Path) -> None:
    write_ledger(tmp_path / "runs", history())
    res = cli("report", "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:4] == ["VERDICT", "SCENARIO", "PACK", "OWNER"]
    flaky = next(line for line in lines if " flaky " in line)
    assert flaky.split()[:7] == ["FAIL", "flaky", "billing", "team-a", "█▁█▅", "50%", "3"]
    assert flaky.endswith("outcome: missing fact")
    assert "green now" in next(line for line in lines if " steady " in line)
    assert lines[-1].startswith("3 scenario(s), 9 ledger row(s)")
    res = cli("report", "--runs-dir", str(tmp_path / "runs"), "--format", "json", "--out", str(tmp_path / "r.json"))
    data = json.loads((tmp_path / "r.json").read_text())
    assert res.exit_code == 0 and data["wt_report"] == 1 and data["rows"] == 9
    assert {s["scenario_id"]: s["flips"] for s in data["scenarios"]} == {"down": 0, "flaky": 3, "steady": 0}
    assert data["sweeps"][-1] == {"sweep_id": "sweep-4", "ts": "2026-01-01T04:00:00.000Z", "scenarios": 3,
                                  "green": 1, "rate": 0.3333}


def test_report_html_is_self_contained_with_a_chart_and_escapes_hostile_text(tmp_path: Path) -> None:
    rows = [*history(), row(5, "evil", "FAIL", 0, pack=HOSTILE, owner=HOSTILE, detail=HOSTILE)]
    page = render_html(build_report(rows, now=NOW))
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 1 + 4  # overall chart + a sparkline each
    assert "<polyline" in page and "<style>" in page
    assert "<script" not in page and "alert(&quot;x&quot;)" in page and "&amp;amp;" in page
    assert "\x01" not in page and "\\x01" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # no external asset
    write_ledger(tmp_path / "runs", rows)
    res = cli("report", "--runs-dir", str(tmp_path / "runs"), "--format", "html", "--out", str(tmp_path / "r.html"))
    assert res.exit_code == 0 and (tmp_path / "r.html").read_text(encoding="utf-8").count("<svg") == 5


def test_report_markdown_escapes_cells() -> None:
    rows = [row(1, "evil", "FAIL", 0, owner=HOSTILE, detail="a | b\nc")]
    text = render_markdown(build_report(rows, now=NOW))
    table = [line for line in text.splitlines() if line.startswith("| FAIL")]
    assert len(table) == 1 and table[0].count(" | ") == 8  # the pipes inside cells are escaped
    assert "a \\| b c" in table[0] and "<script>" not in text and "&lt;script&gt;" in text


def test_report_tolerates_a_torn_ledger_and_needs_rows(tmp_path: Path) -> None:
    res = cli("report", "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1 and "no ledger rows" in res.output
    path = write_ledger(tmp_path / "runs", history()[:2])
    with path.open("ab") as f:
        f.write(b'{"wt_ledger": 1, "ts"')
    res = cli("report", "--runs-dir", str(tmp_path / "runs"), "--format", "markdown")
    assert res.exit_code == 0 and "torn last line" in res.output and "## Ledger problems" in res.output


def owned_history() -> list[LedgerRow]:
    return [*history(), row(4, "refund", "PASS", pack="billing", owner="team-a"),
            row(4, "search", "FAIL", 0, owner="team-b", detail="outcome: wrong city")]


def test_report_groups_scenarios_by_owner_with_subtotals() -> None:
    report = build_report(owned_history(), now=NOW)
    assert [(h.owner, h.scenario_id) for h in report.scenarios] == [
        ("team-a", "flaky"), ("team-a", "refund"), ("team-b", "search"), (None, "down"), (None, "steady")]
    totals = {t.owner: t for t in report.owners}
    assert [t.owner for t in report.owners] == ["team-a", "team-b", None]  # no owner last
    assert (totals["team-a"].scenarios, totals["team-a"].green, totals["team-a"].verdicts) == (
        2, 1, {"FAIL": 1, "PASS": 1})
    assert (totals[None].scenarios, totals[None].green, totals[None].rate) == (2, 1, 0.5)
    assert totals["team-b"].rate == 0.0


def test_report_text_markdown_html_and_json_show_owner_subtotals(tmp_path: Path) -> None:
    write_ledger(tmp_path / "runs", owned_history())
    res = cli("report", "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[:4] == ["VERDICT", "SCENARIO", "PACK", "OWNER"]
    subtotals = [line for line in lines if line.startswith("owner ")]
    assert subtotals == ["owner team-a: 2 scenario(s), 1 green (50%): FAIL 1, PASS 1",
                         "owner team-b: 1 scenario(s), 0 green (0%): FAIL 1"]
    assert "no owner: 2 scenario(s), 1 green (50%): ERROR 1, PASS 1" in lines
    team_a = lines.index(subtotals[0])  # each owner's rows sit right above its subtotal
    assert " flaky " in lines[team_a - 2] and " refund " in lines[team_a - 1]
    res = cli("report", "--runs-dir", str(tmp_path / "runs"), "--format", "json")
    data = json.loads(res.output)
    assert data["owners"][0] == {"owner": "team-a", "scenarios": 2, "green": 1, "rate": 0.5,
                                 "verdicts": {"FAIL": 1, "PASS": 1}}
    markdown = cli("report", "--runs-dir", str(tmp_path / "runs"), "--format", "markdown").output
    assert "## Owner team-a: 2 scenario\\(s\\), 1 green \\(50%\\)" in markdown and "## No owner:" in markdown
    assert markdown.index("## Owner team-b") < markdown.index("| FAIL | search |") < markdown.index("## No owner")
    page = cli("report", "--runs-dir", str(tmp_path / "runs"), "--format", "html").output
    assert "owner team-b: 1 scenario(s), 0 green (0%)" in page
