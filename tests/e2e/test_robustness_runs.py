"""Robustness runs: perturb the universe (error, empty, slow), one run each, in a `robustness` layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from junitparser import JUnitXml

from tests.support.universe_agent import UniverseAgent, run_sweep, write_scenario
from wt_otel.cli import main
from wt_otel.components import load
from wt_otel.contracts.perturbation import Perturbation, parse_flag
from wt_otel.contracts.results import LedgerRow
from wt_otel.contracts.scenario import load_scenario
from wt_otel.contracts.validate import validate_data
from wt_otel.replay.runtimes import PythonRuntime

FACTS = "from wt_otel.scorers import target_facts\noutcome = target_facts(['shipped'])\n"
PERTURBATIONS = [{"kind": "error", "tool": "lookup_order"}, {"kind": "empty", "tool": "*"}]


def ledger_row(tmp_path: Path) -> LedgerRow:
    return LedgerRow.model_validate_json((tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()[-1])


def test_an_honest_agent_handles_every_perturbation(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "robust", scorer_source=FACTS, perturbations=PERTURBATIONS)
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent()), tmp_path)
    rec = result.record.scenarios[0]
    assert rec.verdict == "PASS", rec.detail
    assert "robustness" in rec.gate and rec.layer_pass_rates["robustness"] == 1.0
    assert [(e["perturbation"], e["passed"]) for e in rec.robustness] == [("error:lookup_order", True),
                                                                          ("empty:*", True)]
    folder = result.directory / "robust"
    perturbed = json.loads((folder / "perturb-1.trace.json").read_text())
    assert validate_data("trace", perturbed) == []
    assert perturbed["perturbation"]["kind"] == "error"
    [call] = perturbed["mcp_calls"]
    assert call["is_error"] and call["extra"]["perturbation"]["kind"] == "error"
    assert (folder / "perturb-2.score.json").exists()
    assert ledger_row(tmp_path).layer_pass_rates["robustness"] == 1.0


def test_a_fabricating_agent_fails_robustness_and_the_scenario(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "fragile", scorer_source=FACTS, perturbations=PERTURBATIONS)
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent(naive=True)), tmp_path)
    rec = result.record.scenarios[0]
    assert rec.verdict == "FAIL" and rec.triage == "agent_regression"
    assert rec.layer_pass_rates["outcome"] == 1.0 and rec.layer_pass_rates["robustness"] == 0.0
    assert rec.detail.startswith("robustness: 2/2 perturbation(s) not handled; error:lookup_order: fabricated: "
                                 "the reply states 'shipped'")
    load("exporters", "junit")(result.record, tmp_path / "r.xml")
    [case] = list(JUnitXml.fromfile(str(tmp_path / "r.xml")))[0]
    [failure] = case.result
    assert "robustness error:lookup_order: FAIL" in failure.text
    assert ledger_row(tmp_path).layer_pass_rates["robustness"] == 0.0


def test_expect_assertions_judge_the_perturbed_run(tmp_path: Path) -> None:
    expect = [{**PERTURBATIONS[0], "expect": [{"type": "output", "contains": "apolog"}]}]
    write_scenario(tmp_path / "sc", "polite", perturbations=expect)
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent()), tmp_path)
    [entry] = result.record.scenarios[0].robustness
    assert not entry["passed"] and "apolog" in entry["detail"]


def test_run_perturb_flag_adds_robustness_runs_to_any_scenario(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "plain", scorer_source=FACTS)
    result = CliRunner().invoke(main, ["run", str(tmp_path / "sc"), "--runtime",
                                       "python:tests.support.universe_agent:NAIVE", "--universe-port", "0",
                                       "--runs-dir", str(tmp_path / "runs"), "--perturb", "error:lookup_order"])
    assert result.exit_code == 1, result.output
    row = ledger_row(tmp_path)
    assert row.verdict == "FAIL" and row.layer_pass_rates["robustness"] == 0.0


def test_slow_tool_past_the_deadline(tmp_path: Path) -> None:
    """A slow answer: an agent whose MCP client gives up reports an error envelope and is judged handled."""
    write_scenario(tmp_path / "sc", "slow", perturbations=[{"kind": "slow", "tool": "lookup_order",
                                                             "delay_s": 3}])
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent(tool_timeout_s=0.5)), tmp_path)
    [entry] = result.record.scenarios[0].robustness
    assert entry["passed"], entry
    [trace] = [json.loads(p.read_text()) for p in (result.directory / "slow").glob("perturb-*.trace.json")]
    assert trace["turns"][0]["error"]


@pytest.mark.parametrize(("spec", "want"), [
    ("error:lookup_order", {"kind": "error", "tool": "lookup_order"}),
    ("empty", {"kind": "empty", "tool": "*"}),
    ("slow:search:12.5", {"kind": "slow", "tool": "search", "delay_s": 12.5}),
    ("error:t:upstream 503", {"kind": "error", "tool": "t", "message": "upstream 503"}),
])
def test_parse_flag(spec: str, want: dict) -> None:
    assert parse_flag(spec).to_dict() == want


@pytest.mark.parametrize("spec", ["explode:x", "slow:x:soon", "empty:x:1"])
def test_parse_flag_rejects(spec: str) -> None:
    with pytest.raises(ValueError, match="--perturb"):
        parse_flag(spec)


def test_scenario_perturbations_are_validated() -> None:
    base = {"wt_scenario": 1, "id": "s", "user_turns": ["hi"]}
    assert load_scenario({**base, "perturbations": PERTURBATIONS}).gate() == ["outcome", "robustness"]
    problems = validate_data("scenario", {**base, "perturbations": [{"kind": "explode"}]})
    assert problems and "perturbations[0].kind must be one of ['error', 'empty', 'slow']" in problems[0].message
    bad_expect = {**base, "perturbations": [{"kind": "error", "expect": [{"type": "nope"}]}]}
    assert any("perturbations[0].expect[0]" in p.message for p in validate_data("scenario", bad_expect))
    assert Perturbation(kind="slow").delay == 30.0


def test_result_spans_carry_the_robustness_layer_and_triage() -> None:
    from wt_otel.contracts.results import ScenarioResult, SweepResult
    from wt_otel.exporters.span_plan import plan_sweep

    rec = ScenarioResult(scenario_id="s", verdict="FAIL", triage="agent_regression", detail="robustness: ...",
                         layer_pass_rates={"outcome": 1.0, "robustness": 0.5},
                         robustness=[{"perturbation": "error:t", "kind": "error", "tool": "t", "passed": False,
                                      "detail": "error:t: fabricated", "run_id": "w/s/perturb-1"},
                                     {"perturbation": "empty:*", "kind": "empty", "tool": "*", "passed": True,
                                      "detail": "empty:*: handled", "run_id": "w/s/perturb-2"}])
    sweep = SweepResult(sweep_id="w", started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:01Z",
                        scenarios=[rec])
    [scenario] = plan_sweep(sweep, []).children
    assert scenario.attributes["wt.triage"] == "agent_regression"
    assert scenario.attributes["wt.layer.robustness.pass_rate"] == 0.5
    spans = {c.name: c for c in scenario.children}
    bad = spans["robustness error:t"]
    assert bad.attributes["wt.layer.robustness.passed"] is False and bad.status == "ERROR"
    assert bad.attributes["wt.perturbation.kind"] == "error"
    assert spans["robustness empty:*"].status == "OK"
