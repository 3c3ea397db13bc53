"""Triage categories, live-run model/quant, and run warnings in JUnit `<system-out>` (0001, CI ergonomics)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from junitparser import Error, Failure, JUnitXml

from tests.support.universe_agent import UniverseAgent, run_sweep, write_scenario
from wt_otel.components import load
from wt_otel.contracts.results import LedgerRow
from wt_otel.replay.runtimes import PythonRuntime

FACTS = "from wt_otel.scorers import target_facts\noutcome = target_facts(['shipped'])\n"


def ledger(tmp_path: Path) -> dict[str, LedgerRow]:
    lines = (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()
    return {r.scenario_id: r for r in map(LedgerRow.model_validate_json, lines)}


def test_triage_says_who_acts_in_the_ledger_and_junit(tmp_path: Path) -> None:
    sc = tmp_path / "sc"
    write_scenario(sc, "regressed", scorer_source=FACTS.replace("shipped", "delivered"))
    write_scenario(sc, "gap", scorer_source=FACTS)
    write_scenario(sc, "fine", scorer_source=FACTS)
    agents = {"regressed": UniverseAgent(), "gap": UniverseAgent([("lookup_order", {"order_id": "B-7"})]),
              "fine": UniverseAgent()}
    for sid, agent in agents.items():
        result = run_sweep([sc / sid], PythonRuntime(agent), tmp_path)
        load("exporters", "junit")(result.record, tmp_path / f"{sid}.xml")
    rows = ledger(tmp_path)
    assert (rows["regressed"].verdict, rows["regressed"].triage) == ("FAIL", "agent_regression")
    assert (rows["gap"].verdict, rows["gap"].triage) == ("FAIL", "recording_gap")
    assert (rows["fine"].verdict, rows["fine"].triage) == ("PASS", None)
    [case] = list(JUnitXml.fromfile(str(tmp_path / "gap.xml")))[0]
    [failure] = [r for r in case.result if isinstance(r, Failure)]
    assert failure.text.startswith("triage: recording_gap: a failing run left the recording")
    tree = ET.parse(tmp_path / "gap.xml")
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    assert props["triage"] == "recording_gap"


def test_an_unreachable_endpoint_is_an_environment_error(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "down")
    from wt_otel.replay.runtimes import HttpInjectRuntime

    result = run_sweep([tmp_path / "sc"], HttpInjectRuntime("http://127.0.0.1:9", 1.0), tmp_path)
    load("exporters", "junit")(result.record, tmp_path / "r.xml")
    assert ledger(tmp_path)["down"].triage == "environment"
    [case] = list(JUnitXml.fromfile(str(tmp_path / "r.xml")))[0]
    [error] = [r for r in case.result if isinstance(r, Error)]
    assert error.text.startswith("triage: environment:")


def test_live_run_ledger_names_the_model_and_quant_from_the_response(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "live")
    run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent(model="gpt-4o-mini-2024-07-18", quant="fp8")),
              tmp_path)
    row = ledger(tmp_path)["live"]
    assert (row.model, row.quant) == ("gpt-4o-mini-2024-07-18", "fp8")
    raw = json.loads((tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()[0])
    assert "quant" in raw  # the spec's ledger key is always there (null when unknown)


def test_run_warnings_reach_junit_system_out(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "warned")

    def agent(text: str, session_id: str) -> dict:  # no reset hook: "state between runs is not wiped"
        return UniverseAgent()(text, session_id)

    result = run_sweep([tmp_path / "sc"], PythonRuntime(agent), tmp_path)
    load("exporters", "junit")(result.record, tmp_path / "r.xml")
    [case] = list(JUnitXml.fromfile(str(tmp_path / "r.xml")))[0]
    assert "state between runs is not wiped" in (case.system_out or "")
    assert result.record.scenarios[0].warnings


def test_the_report_says_who_acts(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from wt_otel.cli import main

    write_scenario(tmp_path / "sc", "gap", scorer_source=FACTS)
    run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent([("lookup_order", {"order_id": "B-7"})])), tmp_path)
    result = CliRunner().invoke(main, ["report", "--runs-dir", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    assert "[recording_gap] " in result.output
    as_json = CliRunner().invoke(main, ["report", "--runs-dir", str(tmp_path / "runs"), "--format", "json"])
    assert json.loads(as_json.output)["scenarios"][0]["latest_triage"] == "recording_gap"
