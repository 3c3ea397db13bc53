"""Verdicts that never flatter (issue 30, item 4): a robustness run that tested nothing is ERROR, never
"handled"; `any_of` evaluates and reports every operand; an unreviewed incident is never green in its spans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.tracekit import LOOKUP, make_trace
from tests.unit.exporters.test_result_spans import make_trace as span_trace
from tests.unit.exporters.test_result_spans import score as span_score
from wt_otel.components import load
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.results import LayerResult, ScenarioResult, SweepResult
from wt_otel.contracts.run import McpCall, ToolCall, Trace, Turn
from wt_otel.contracts.scenario import load_scenario
from wt_otel.contracts.universe import load_universe
from wt_otel.exporters.span_plan import ScenarioEvidence, plan_sweep
from wt_otel.scorers import any_of, no_divergence
from wt_otel.scoring.layers import score_scenario
from wt_otel.scoring.robustness import judge

ERROR_LOOKUP = Perturbation(kind="error", tool="client_lookup")
UNIVERSE = load_universe({"windtunnel_universe": 1,
                          "tools": [{"name": "client_lookup", "input_schema": {"type": "object"}}],
                          "recordings": [{"tool_name": LOOKUP[0], "args": LOOKUP[1], "result": LOOKUP[2]}]})
PERTURBED_CALL = (LOOKUP[0], LOOKUP[1], {"error": "upstream 503"})
MISS_422 = {"match": "miss", "event": "llm_divergence", "status": 422, "seq": 1,
            "divergence": {"at": "messages[2].content"}, "error": "no recorded response matches this request"}


def perturbed(calls: list[Any], llm_calls: list[dict[str, Any]] | None = None, reply: str = "Sorry, the CRM is down.",
              error: str | None = None, llm: str = "replay") -> Trace:
    trace = make_trace(reply, calls, llm_calls=llm_calls, perturbation=ERROR_LOOKUP.to_dict())
    for call in trace.mcp_calls:
        call.extra = {"perturbation": ERROR_LOOKUP.to_dict()}
        call.is_error = True
    trace.turns[-1].error = error
    trace.evidence.llm = llm  # type: ignore[assignment]
    return trace


# ---------------------------------------------------------------- robustness


def test_a_perturbed_run_that_hit_a_cassette_miss_is_error_not_handled() -> None:
    """The model request after the perturbed tool result is not in the cassette: the agent got a 422 and gave up
    with an error envelope. Nothing was tested: that is ERROR, never "handled"."""
    trace = perturbed([PERTURBED_CALL], llm_calls=[{"match": "exact", "seq": 0}, MISS_422], reply="",
                      error="model request failed: 422 no recorded response")
    result = judge(trace, ERROR_LOOKUP, UNIVERSE)
    assert not result.passed
    assert result.detail.startswith("error:client_lookup: ERROR: not tested:") and "422" in result.detail


def test_a_perturbation_whose_tool_was_never_served_is_error() -> None:
    trace = perturbed([], llm_calls=[{"match": "exact", "seq": 0}], reply="I could not check, sorry.")
    result = judge(trace, ERROR_LOOKUP, UNIVERSE)
    assert not result.passed and "never served" in result.detail and "client_lookup" in result.detail


def test_a_perturbation_served_and_answered_from_the_cassette_counts() -> None:
    trace = perturbed([PERTURBED_CALL], llm_calls=[{"match": "exact", "seq": 0}, {"match": "exact", "seq": 1}])
    result = judge(trace, ERROR_LOOKUP, UNIVERSE)
    assert result.passed and "handled" in result.detail
    live = perturbed([PERTURBED_CALL], llm="live")  # a live model answered the perturbed result: a real test
    assert judge(live, ERROR_LOOKUP, UNIVERSE).passed


def test_an_untested_perturbation_makes_the_scenario_error_not_pass(tmp_path: Path) -> None:
    scenario = load_scenario({"wt_scenario": 1, "id": "s", "user_turns": ["email?"],
                              "perturbations": [ERROR_LOOKUP.to_dict()]})
    ok = make_trace(calls=[LOOKUP])
    miss = perturbed([PERTURBED_CALL], llm_calls=[MISS_422], reply="", error="422")
    result = score_scenario("s", scenario, None, [ok], write=False, perturbed=[miss], universe=UNIVERSE)
    assert result.verdict == "ERROR", result
    assert result.robustness[0]["status"] == "ERROR" and result.robustness[0]["passed"] is False
    assert result.layer_pass_rates["robustness"] == 0.0
    assert "robustness" in (result.detail or "") and "not tested" in (result.detail or "")
    load("exporters", "junit")(SweepResult(sweep_id="w", started_at="2026-01-01T00:00:00Z", scenarios=[result]),
                               tmp_path / "r.xml")
    spans = plan_sweep(SweepResult(sweep_id="w", started_at="2026-01-01T00:00:00Z", scenarios=[result]),
                       [ScenarioEvidence([ok], None)])
    [child] = [c for c in spans.children[0].children if c.name.startswith("robustness ")]
    assert child.attributes["wt.layer.robustness.status"] == "ERROR" and child.status == "ERROR"
    assert "robustness error:client_lookup: ERROR: error:client_lookup: ERROR: not tested:" in (
        tmp_path / "r.xml").read_text()


def test_a_tested_and_unhandled_perturbation_still_fails_beside_an_untested_one() -> None:
    empty = Perturbation(kind="empty", tool="client_lookup")
    scenario = load_scenario({"wt_scenario": 1, "id": "s", "user_turns": ["email?"],
                              "perturbations": [ERROR_LOOKUP.to_dict(), empty.to_dict()]})
    fabricated = perturbed([PERTURBED_CALL], reply="The email is ops@bluewing.example.")  # only the recording has it
    untested_run = make_trace(calls=[LOOKUP], llm_calls=[MISS_422], perturbation=empty.to_dict())
    result = score_scenario("s", scenario, None, [make_trace(calls=[LOOKUP])], write=False,
                            perturbed=[fabricated, untested_run], universe=UNIVERSE)
    assert [e["status"] for e in result.robustness] == ["FAIL", "ERROR"]
    assert result.verdict == "FAIL" and (result.detail or "").startswith(
        "robustness: 1/2 perturbation(s) not handled (1 more not tested); error:client_lookup: fabricated"), result


# ---------------------------------------------------------------- any_of


def test_any_of_evaluates_every_operand_on_a_clean_run_and_reports_each() -> None:
    seen: list[str] = []

    def second(trace: Trace) -> LayerResult:
        seen.append("second")
        return LayerResult(passed=False, detail="the reply misses the phone number")

    result = any_of(no_divergence(), second)(make_trace(calls=[LOOKUP]))
    assert seen == ["second"]  # evaluated although the first operand passed
    assert result.passed
    assert "no divergence" in result.detail and "the reply misses the phone number" in result.detail
    assert "PASS" in result.detail and "FAIL" in result.detail and "1/2" in result.detail


def test_any_of_judges_a_constraint_operand_on_its_real_result_inside_an_outcome() -> None:
    """Inside scorer.py's outcome, no_divergence() reports to the constraint layer and answers the outcome a
    pass; as an any_of alternative that placeholder pass would make the whole any_of pass on a divergent run."""
    from wt_otel.scoring.scorers import constraint_capture

    divergent = make_trace(calls=[(*LOOKUP, "fail_call")])
    with constraint_capture() as diverted:
        result = any_of(no_divergence(), lambda t: LayerResult(passed=False, detail="wrong answer"))(divergent)
    assert not result.passed, result.detail
    assert "divergence: 1 tool call(s) matched no recording" in result.detail and "wrong answer" in result.detail
    assert diverted == []  # an alternative is judged inside the any_of, not split into another layer


# ---------------------------------------------------------------- unreviewed result spans


def unreviewed_sweep(verdict: str = "UNREVIEWED") -> tuple[SweepResult, list[ScenarioEvidence]]:
    trace = span_trace("incident", 1, "2026-01-02T03:04:05.000Z", "2026-01-02T03:04:07.000Z",
                       [Turn(text="phone?", reply="+1-555-0199", latency_ms=600,
                             tool_calls=[ToolCall(name="client_lookup", arguments={"q": "Bluewing"})])],
                       [McpCall(tool_name="client_lookup", args={"q": "Bluewing"}, result={"phone": "x"},
                                match="exact")])
    record = ScenarioResult(scenario_id="incident", tags=["unreviewed", "auto-replay"], verdict=verdict,
                            detail="unreviewed: incident REPRODUCED (same final answer and tool trajectory)",
                            runs=1, runs_passed=1, reviewed=False, reproduced=True,
                            scores=[span_score("incident", 1, True, "no divergence")])
    sweep = SweepResult(sweep_id="sw-1", started_at="2026-01-02T03:04:04.000Z",
                        finished_at="2026-01-02T03:04:20.000Z", scenarios=[record])
    return sweep, [ScenarioEvidence([trace], None)]


def test_an_unreviewed_reproduced_incident_is_never_green_in_its_spans() -> None:
    sweep, evidence = unreviewed_sweep()
    root = plan_sweep(sweep, evidence)
    assert root.attributes["wt.sweep.passed"] is False
    assert root.attributes["wt.sweep.unreviewed"] == 1 and root.status != "OK"
    [scenario] = root.children
    assert scenario.attributes["wt.verdict"] == "UNREVIEWED" and scenario.status != "OK"
    assert scenario.attributes["wt.reproduced"] is True
    [run] = [c for c in scenario.children if c.name.startswith("run ")]
    assert run.attributes["wt.verdict"] == "UNREVIEWED" and run.status != "OK"


def test_a_green_verdict_on_an_unreviewed_record_still_says_unreviewed() -> None:
    sweep, evidence = unreviewed_sweep(verdict="PASS")  # a record built by other code than mark_unreviewed
    root = plan_sweep(sweep, evidence)
    [scenario] = root.children
    assert root.attributes["wt.sweep.passed"] is False
    assert scenario.attributes["wt.verdict"] == "UNREVIEWED" and scenario.status != "OK"
