"""Unreviewed auto-replays (issue 12): never a plain PASS; they say whether the incident reproduced, and are
marked unreviewed in the ledger, the table, JUnit and the result spans."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.contracts.results import ScenarioResult, SweepResult
from wt_otel.exporters.span_plan import ScenarioEvidence, plan_sweep

ANSWER = "Order A-1 shipped on Monday."
AGENT = '''
def agent(text, session_id):
    return {"reply": "Order A-1 shipped on Monday.", "tool_calls": []}
'''


def scenario(root: Path, sid: str, incident_answer: str, tags: list[str]) -> Path:
    """A scenario as serve's auto-replay imports it: default outcome check, an incident envelope."""
    d = root / sid
    d.mkdir(parents=True)
    (d / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": sid, "user_turns": ["Where is A-1?"],
                                                     "fixtures": {}, "tags": tags}))
    (d / "scorer.py").write_text("from wt_otel.scorers import all_of, no_divergence\n"
                                 "outcome = all_of(no_divergence())\n")
    envelope = {"windtunnel_interchange": 1, "messages": [
        {"role": "user", "parts": [{"type": "text", "content": "Where is A-1?"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": incident_answer}]}]}
    (d / "incident.wtin.json").write_text(json.dumps(envelope))
    return d


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "h6_unreviewed_agent.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    return "python:h6_unreviewed_agent:agent"


def test_an_unreviewed_replay_that_passed_its_default_checks_is_not_a_pass(tmp_path: Path, agent_module: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scenario(tmp_path / "sc", "same", ANSWER, ["unreviewed", "auto-replay"])
    scenario(tmp_path / "sc", "differs", "Order A-1 is lost.", ["unreviewed", "auto-replay"])
    scenario(tmp_path / "sc", "reviewed", "Order A-1 is lost.", [])
    res = CliRunner().invoke(main, ["run", "sc", "--runtime", agent_module, "--universe-port", "0",
                                    "--format", "junit", "--out", "results.xml"])
    assert res.exit_code == 0, res.output  # unreviewed is not a failure either
    ledger = (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()
    rows = {r["scenario_id"]: r for r in map(json.loads, ledger)}
    assert rows["reviewed"]["verdict"] == "PASS" and rows["reviewed"].get("reviewed", True) is True
    for sid, reproduced in (("same", True), ("differs", False)):
        row = rows[sid]
        assert row["verdict"] == "UNREVIEWED" and row["reviewed"] is False and row["reproduced"] is reproduced
    assert "incident REPRODUCED (same final answer and tool trajectory)" in rows["same"]["detail"]
    assert "not reproduced in 1/1 run(s) (final answer differs)" in rows["differs"]["detail"]
    table = [line for line in res.output.splitlines() if line.startswith(("UNREVIEWED", "PASS"))]
    assert sorted(line.split()[0] for line in table) == ["PASS", "UNREVIEWED", "UNREVIEWED"], res.output
    assert "1 pass" in res.output and "2 unreviewed" in res.output
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "results.xml").iter("testcase")}
    assert cases["same"].find("skipped") is not None and cases["reviewed"].find("skipped") is None
    assert "REPRODUCED" in cases["same"].find("skipped").get("message")
    assert ET.parse(tmp_path / "results.xml").getroot().get("skipped") == "2"


def test_result_spans_mark_unreviewed_scenarios_neither_ok_nor_error() -> None:
    record = SweepResult(sweep_id="s", started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:01Z",
                         scenarios=[ScenarioResult(scenario_id="a", verdict="UNREVIEWED", detail="unreviewed: ...",
                                                   reviewed=False, reproduced=True)])
    tree = plan_sweep(record, [ScenarioEvidence()])
    span = tree.children[0]
    assert span.attributes["wt.verdict"] == "UNREVIEWED" and span.attributes["wt.reviewed"] is False
    assert span.attributes["wt.reproduced"] is True and span.status == "UNSET"
    assert tree.attributes["wt.sweep.failed"] == 0
