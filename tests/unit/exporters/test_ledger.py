"""The run ledger: one row per scenario per sweep, atomic appends, tolerant reads."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.unit.replay.test_run import ScriptedAgent, sweep, write_scenario
from wt_otel import __version__
from wt_otel.components import load
from wt_otel.contracts.results import LAYERS, LedgerRow, ScenarioResult, SweepResult
from wt_otel.exporters.ledger import rows_for
from wt_otel.replay.runner import git_sha
from wt_otel.replay.runtimes import PythonRuntime

Ledger = load("exporters", "ledger")


def row(n: int = 0, detail: str = "") -> LedgerRow:
    return LedgerRow(ts=f"2026-01-01T00:00:{n % 60:02d}.000Z", sweep_id=f"s{n}", scenario_id="orders",
                     verdict="PASS", detail=detail or None, runs=1, runs_passed=1)


def test_a_sweep_appends_one_row_per_scenario_with_provenance(tmp_path: Path) -> None:
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "pack.yaml").write_text("name: billing\nowner: team-billing\nmetadata: {model: gpt-x}\n")
    write_scenario(tmp_path / "sc", "a-orders", runs=2)
    write_scenario(tmp_path / "sc", "b-broken", universe="{")
    sc = tmp_path / "sc" / "a-orders" / "scenario.yaml"
    sc.write_text(sc.read_text() + "tags: ['origin:incident-412', unreviewed]\nowner: team-ops\n")
    result = sweep([tmp_path / "sc"], PythonRuntime(ScriptedAgent()), tmp_path, label="nightly",
                   selection={"pack": ["billing"]})
    read = Ledger(tmp_path / "runs" / "ledger.ndjsonl").read()
    assert read.problems == [] and not read.torn
    first, broken = read.rows
    assert (first.scenario_id, first.verdict, first.runs, first.runs_passed) == ("a-orders", "UNREVIEWED", 2, 2)
    assert (first.pack, first.owner, first.origin, first.model) == ("billing", "team-ops", "incident-412", "gpt-x")
    assert first.label == "nightly" and first.sweep_id == result.sweep_id and first.wt_version == __version__
    assert first.layer_pass_rates["integrity"] == 1.0 and set(first.layer_pass_rates) <= set(LAYERS)
    assert first.run_ids == [f"{result.sweep_id}/a-orders/run-1", f"{result.sweep_id}/a-orders/run-2"]
    assert first.ts.endswith("Z") and first.git_sha == git_sha()
    assert (broken.verdict, broken.owner, broken.runs_passed) == ("ERROR", "team-billing", 0)  # the pack's owner
    assert "bad fixture" in broken.detail
    assert result.record is not None and result.record.selection == {"pack": ["billing"]}


def test_git_sha_is_null_outside_a_repo_and_from_the_environment(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_SHA", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert git_sha(tmp_path) is None
    monkeypatch.setenv("GITHUB_SHA", "3efbf94")
    assert git_sha(tmp_path) == "3efbf94"
    monkeypatch.delenv("GITHUB_SHA")
    assert git_sha(ROOT) is not None  # this checkout


def test_row_from_result_and_from_a_sweep() -> None:
    sw = SweepResult(sweep_id="sw", started_at="t", label="L", git_sha="abc", wt_version="9",
                     scenarios=[ScenarioResult(scenario_id="x", verdict="ERROR", detail="down", origin="inc-1")])
    [r] = rows_for(sw)
    assert (r.sweep_id, r.label, r.git_sha, r.wt_version, r.verdict, r.origin) == ("sw", "L", "abc", "9", "ERROR",
                                                                                      "inc-1")


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from wt_otel.components import load
    from wt_otel.contracts.results import LedgerRow
    who, path, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    rows = [LedgerRow(ts="2026-01-01T00:00:00Z", sweep_id=f"{who}-{i}", scenario_id="s", verdict="PASS",
                      detail=who * 20000) for i in range(n)]  # each line far bigger than PIPE_BUF
    for r in rows:
        load("exporters", "ledger")(path).append([r])
""")


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjsonl"
    writers, per = 6, 40
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, chr(ord("a") + w), str(path), str(per)])
             for w in range(writers)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == writers * per + 1
    for line in lines[:-1]:
        data = json.loads(line)  # every line parses: no partial line from another writer
        assert data["detail"] == data["sweep_id"][0] * 20000
    read = Ledger(path).read()
    assert len(read.rows) == writers * per and read.problems == []


def test_a_torn_last_line_is_reported_and_the_next_append_starts_fresh(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjsonl"
    ledger = Ledger(path)
    assert ledger.read().rows == []  # no ledger yet: empty, not an error
    ledger.append([row(1), row(2)])
    with path.open("ab") as f:
        f.write(b'{"wt_ledger": 1, "ts": "2026-01-01T00:00:0')  # a crash mid-write
    read = ledger.read()
    assert [r.sweep_id for r in read.rows] == ["s1", "s2"] and read.torn
    assert "torn last line" in read.problems[0] and ":3:" in read.problems[0]
    ledger.append([row(3)])
    read = ledger.read()
    assert [r.sweep_id for r in read.rows] == ["s1", "s2", "s3"] and not read.torn
    assert len(read.problems) == 1 and "not a ledger row" in read.problems[0]  # the fragment, now mid-file


def test_rows_with_unknown_fields_are_kept_forward_compatible(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjsonl"
    data = {**row(1).model_dump(), "added_later": {"x": 1}}
    path.write_text(json.dumps(data) + "\n\n")
    [r] = Ledger(path).read().rows
    assert r.model_extra == {"added_later": {"x": 1}}
