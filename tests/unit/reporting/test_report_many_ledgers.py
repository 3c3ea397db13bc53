"""`wt-otel report` over several ledgers (issue 32, part 4): the ledgers of several serve instances' automatic
replays (`--data-dir`, repeated) and runs dirs (`--runs-dir`, repeated) are one report, a scenario's rows from
every ledger in time order. Ledgers written by the ledger exporter (exporters/ledger.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.replay.test_run import cli
from tests.unit.reporting.test_report import row, write_ledger


def test_the_same_scenario_in_two_ledgers_is_reported_from_both_in_time_order(tmp_path: Path) -> None:
    # instance A replayed hours 1 and 3, instance B hours 2 and 4 of the same scenario; B also has its own
    write_ledger(tmp_path / "a" / "runs", [row(1, "refund", "PASS"), row(3, "refund", "FAIL", 0)])
    write_ledger(tmp_path / "b" / "runs", [row(4, "refund", "PASS"), row(2, "refund", "FAIL", 0),
                                           row(2, "only-b", "PASS")])
    res = cli("report", "--data-dir", str(tmp_path / "a"), "--data-dir", str(tmp_path / "b"), "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["rows"] == 5
    refund = next(s for s in data["scenarios"] if s["scenario_id"] == "refund")
    assert refund["sweeps"] == 4 and refund["verdicts"] == ["PASS", "FAIL", "FAIL", "PASS"]
    assert refund["flips"] == 2 and refund["latest_verdict"] == "PASS" and refund["latest_sweep"] == "sweep-4"
    assert [p["sweep_id"] for p in data["sweeps"]] == ["sweep-1", "sweep-2", "sweep-3", "sweep-4"]
    assert {s["scenario_id"] for s in data["scenarios"]} == {"refund", "only-b"}

    # --runs-dir repeats too and mixes with --data-dir; a ledger named twice is read once
    res = cli("report", "--runs-dir", str(tmp_path / "a" / "runs"), "--runs-dir", str(tmp_path / "a" / "runs"),
              "--data-dir", str(tmp_path / "b"), "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["rows"] == 5


def test_a_missing_ledger_among_several_is_a_warning_and_no_rows_at_all_an_error(tmp_path: Path) -> None:
    write_ledger(tmp_path / "a" / "runs", [row(1, "refund", "PASS")])
    res = cli("report", "--data-dir", str(tmp_path / "a"), "--data-dir", str(tmp_path / "gone"))
    assert res.exit_code == 0 and f"warning: no ledger at {tmp_path / 'gone' / 'runs' / 'ledger.ndjsonl'}" in res.stderr
    assert "1 scenario(s), 1 ledger row(s)" in res.stdout
    res = cli("report", "--data-dir", str(tmp_path / "gone"), "--runs-dir", str(tmp_path / "none"))
    assert res.exit_code == 1 and "error: no ledger rows in" in res.stderr and "Traceback" not in res.output
