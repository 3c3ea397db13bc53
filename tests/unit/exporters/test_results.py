"""Results of a sweep: the terminal table, `--format junit` (read back by junitparser), `--format json`.

JUnit is checked with a real consumer (`junitparser`), including hostile
trace text: markup, quotes and the control characters XML 1.0 forbids. The
issue's required test is here too: a dead endpoint is an ERROR in JUnit, in
the JSON document and in the ledger.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from junitparser import Error, Failure, JUnitXml, Properties, TestCase, TestSuite

from tests.unit.replay.test_run import AGENT_RUNTIME, McpEndpoint, ScriptedAgent, cli, free_port, sweep, write_scenario
from wt_otel.components import load
from wt_otel.contracts.results import LayerResult, LedgerRow, RunScore, ScenarioResult, SweepResult
from wt_otel.replay.runtimes import PythonRuntime

HOSTILE = 'a<b>&"c\' ]]> \x00\x01\x07\x1b[31m\x0b\x0c\ud800 \ufffe end </testcase><!-- \u2603'


def record(sid: str, verdict: str, *, pack: str | None = "billing", detail: str | None = None, **kw: Any
           ) -> ScenarioResult:
    return ScenarioResult(scenario_id=sid, pack=pack, verdict=verdict, detail=detail, runs=kw.pop("runs", 2),
                          runs_passed=kw.pop("runs_passed", 2 if verdict == "PASS" else 0), **kw)


def sample_sweep(hostile: str = "plain") -> SweepResult:
    failing = RunScore(scenario_id="refund", run_index=1, run_id="s/refund/run-1", passed=False,
                       layers={"outcome": LayerResult(passed=False, detail=f"missing fact 'refunded' {hostile}"),
                               "integrity": LayerResult(passed=True)})
    return SweepResult(sweep_id="20260101T000000Z-abc123", started_at="2026-01-01T00:00:00.000Z",
                       finished_at="2026-01-01T00:00:09.000Z", selection={"tag": ["origin:incident-412"]},
                       label="ci-7", git_sha="3efbf94", wt_version="0.1.0", scenarios=[
                           record("lookup", "PASS", owner="team-ops", origin="incident-412",
                                  layer_pass_rates={"outcome": 1.0, "integrity": 1.0}, duration_s=1.5),
                           record("refund", "FAIL", detail=f"outcome failed {hostile}", owner=hostile,
                                  origin=hostile, tags=[f"origin:{hostile}"], scores=[failing], runs=1,
                                  layer_pass_rates={"outcome": 0.0, "integrity": 1.0}, duration_s=2.0),
                           record("down", "ERROR", pack=None, detail=f"run 1: reset failed: {hostile}", runs=1),
                           record("bypass", "INVALID", pack=hostile, detail="universe bypassed", runs=1),
                           record("varies", "PASS_WITH_VARIANCE", runs_passed=1),
                       ])


# ---------------------------------------------------------------- the terminal table


def test_table_is_plain_text_when_not_a_tty() -> None:
    out = io.StringIO()
    load("exporters", "table")(sample_sweep(), file=out)
    text = out.getvalue()
    assert "\x1b[" not in text  # no escape codes in a CI log
    lines = text.splitlines()
    assert lines[0].split() == ["VERDICT", "SCENARIO", "RUNS", "OUTCOME", "INTEGRITY", "DETAIL"]
    assert lines[1].split() == ["PASS", "lookup", "2/2", "100%", "100%"]
    assert lines[2].split()[:5] == ["FAIL", "refund", "0/1", "0%", "100%"]
    assert lines[2].endswith("outcome failed plain")  # the detail is last and unwrapped
    assert lines[3].split()[:5] == ["ERROR", "down", "0/1", "-", "-"]
    assert len(lines) == 6


def test_table_is_coloured_on_a_terminal_and_trace_text_is_not_markup() -> None:
    out = io.StringIO()
    sw = sample_sweep("[b]x[/b]")
    load("exporters", "table")(sw, file=out, color=True)
    text = out.getvalue()
    assert "\x1b[" in text and "[b]x[/b]" in text


# ---------------------------------------------------------------- JUnit


def case_props(case: TestCase) -> dict[str, str]:
    return {p.name: p.value for props in case.iterchildren(Properties) for p in props}


def parse_junit(path: Path) -> dict[str, Any]:
    xml = JUnitXml.fromfile(str(path))
    suites = {s.name: s for s in xml} if isinstance(xml, JUnitXml) else {xml.name: xml}
    cases = {c.name: c for s in suites.values() for c in s}
    return {"xml": xml, "suites": suites, "cases": cases}


def test_junit_one_suite_per_pack_one_case_per_scenario(tmp_path: Path) -> None:
    out = tmp_path / "results.xml"
    load("exporters", "junit")(sample_sweep(), out)
    got = parse_junit(out)
    xml, suites, cases = got["xml"], got["suites"], got["cases"]
    assert list(suites) == ["billing", "default", "plain"]
    assert (xml.tests, xml.failures, xml.errors) == (5, 1, 2)
    billing: TestSuite = suites["billing"]
    assert (billing.tests, billing.failures, billing.errors) == (3, 1, 0)
    assert {p.name: p.value for p in billing.properties()}["sweep_id"] == "20260101T000000Z-abc123"
    lookup, refund = cases["lookup"], cases["refund"]
    assert lookup.classname == "billing" and lookup.time == 1.5 and lookup.is_passed
    [failure] = refund.result
    assert isinstance(failure, Failure) and failure.message == "outcome failed plain"
    assert "run 1 outcome: missing fact 'refunded' plain" in failure.text
    assert "layer pass rates: outcome 0%, integrity 100%" in failure.text
    [error] = cases["down"].result
    assert isinstance(error, Error) and error.type == "ERROR" and "reset failed" in error.message
    [invalid] = cases["bypass"].result
    assert isinstance(invalid, Error) and invalid.type == "INVALID"
    assert cases["varies"].is_passed  # variance the author allowed is not a failure
    props = case_props(lookup)
    assert (props["verdict"], props["owner"], props["origin"]) == ("PASS", "team-ops", "incident-412")


def test_junit_survives_hostile_trace_text(tmp_path: Path) -> None:
    out = tmp_path / "results.xml"
    load("exporters", "junit")(sample_sweep(HOSTILE), out)
    got = parse_junit(out)  # a real consumer reads it: no illegal character, no broken markup
    assert got["xml"].tests == 5 and got["xml"].failures == 1 and got["xml"].errors == 2
    [failure] = got["cases"]["refund"].result
    assert 'a<b>&"c\' ]]>' in failure.message and "</testcase><!--" in failure.message
    assert "\\x00\\x01\\x07\\x1b[31m \\ud800" in failure.message  # visible, not dropped silently
    assert "\\x0b\\x0c\\ud800 \\ufffe end" in failure.text and "\u2603" in failure.text
    props = case_props(got["cases"]["refund"])
    assert props["owner"].startswith('a<b>&"c\'') and "\x00" not in props["origin"]
    assert got["suites"][next(n for n in got["suites"] if n.startswith("a<b>"))].errors == 1


# ---------------------------------------------------------------- JSON


def test_json_document_validates_against_the_model(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    sw = sample_sweep("tab\there \x01 \u2603")
    load("exporters", "json")(sw, out)
    data = json.loads(out.read_text(encoding="utf-8"))
    back = SweepResult.model_validate(data)
    assert back == sw and data["wt_results"] == 1 and data["selection"] == {"tag": ["origin:incident-412"]}
    assert [s["verdict"] for s in data["scenarios"]] == ["PASS", "FAIL", "ERROR", "INVALID", "PASS_WITH_VARIANCE"]


# ---------------------------------------------------------------- end to end through `wt-otel run`


def test_dead_endpoint_is_an_error_in_junit_json_and_the_ledger(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "orders", runs=2)
    down = f"http://127.0.0.1:{free_port()}"
    runs = tmp_path / "runs"
    for fmt, name in (("junit", "results.xml"), ("json", "results.json")):
        res = cli("run", str(tmp_path / "sc"), "--inject-url", down, "--universe-port", "0", "--runs-dir", str(runs),
                  "--format", fmt, "--out", str(tmp_path / name))
        assert res.exit_code == 1, res.output
        assert f"{fmt} in {tmp_path / name}" in res.output.splitlines()[-1]
    [case] = parse_junit(tmp_path / "results.xml")["cases"].values()
    [error] = case.result
    assert isinstance(error, Error) and error.type == "ERROR" and f"agent at {down} is unreachable" in error.message
    assert case.name == "orders" and case.classname == "default"
    doc = SweepResult.model_validate_json((tmp_path / "results.json").read_text())
    [rec] = doc.scenarios
    assert (rec.verdict, rec.runs, rec.runs_passed) == ("ERROR", 1, 0) and "unreachable" in rec.detail
    assert rec.run_ids == [f"{doc.sweep_id}/orders/run-1"] and doc.finished_at is not None
    rows = [LedgerRow.model_validate_json(line) for line in (runs / "ledger.ndjsonl").read_text().splitlines()]
    assert [(r.scenario_id, r.verdict) for r in rows] == [("orders", "ERROR")] * 2  # one row per sweep
    assert rows[1].sweep_id == doc.sweep_id and down in rows[1].detail  # checked once, the URL given named


def test_circuit_breaker_not_run_scenarios_are_error_rows(tmp_path: Path) -> None:
    for sid in ("s1", "s2", "s3", "s4"):
        write_scenario(tmp_path / "sc", sid)
    with McpEndpoint("http://127.0.0.1:1/mcp", reset_status=500) as endpoint:  # reachable; every reset fails
        res = cli("run", str(tmp_path / "sc"), "--inject-url", endpoint.url, "--universe-port",
                  "0", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "r.xml"))  # suffix: junit
    assert res.exit_code == 1
    cases = parse_junit(tmp_path / "r.xml")["cases"]
    assert list(cases) == ["s1", "s2", "s3", "s4"]
    [error] = cases["s4"].result
    assert error.message.startswith("not run: circuit breaker (circuit breaker: 3 consecutive")
    rows = [json.loads(line) for line in (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert [(r["scenario_id"], r["verdict"], r["runs"]) for r in rows][-1] == ("s4", "ERROR", 0)


def test_bypass_with_hostile_arguments_reaches_junit_parseable(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    agent = ScriptedAgent(bypass=True, calls=[("lookup_order", {"order_id": HOSTILE.replace("\ud800", "")})])
    result = sweep([tmp_path / "orders"], PythonRuntime(agent), tmp_path)
    assert result.record is not None
    load("exporters", "junit")(result.record, tmp_path / "r.xml")
    [case] = parse_junit(tmp_path / "r.xml")["cases"].values()
    [error] = case.result
    assert error.type == "INVALID" and "universe bypassed" in error.message


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "junit"], "--format junit needs --out FILE"),
    (["--out", "results.txt"], "say --format junit or --format json"),
])
def test_format_and_out_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    write_scenario(tmp_path, "sc")
    res = cli("run", str(tmp_path / "sc"), "--runtime", AGENT_RUNTIME, "--runs-dir",
              str(tmp_path / "runs"), *args)
    assert res.exit_code == 2 and message in res.output
    assert not (tmp_path / "runs").exists()
