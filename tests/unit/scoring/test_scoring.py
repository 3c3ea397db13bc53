"""Layers, gates and verdicts: one run's layers, the gate, N runs to one verdict, sidecars, and the sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.tracekit import LOOKUP, make_trace
from tests.unit.replay.test_run import ScriptedAgent, sweep, write_scenario
from wt_otel.contracts.problems import ContractError
from wt_otel.contracts.results import RunScore
from wt_otel.contracts.scenario import load_scenario
from wt_otel.replay.runtimes import PythonRuntime
from wt_otel.scoring.layers import ScenarioChecks, aggregate, score_run, score_scenario

SCORER_OK = '''
from wt_otel.scorers import all_of, target_facts

outcome = all_of(target_facts(["ops@bluewing.example"]))
'''
SCORER_STUB = '''
def outcome(trace) -> tuple[bool, str]:
    return False, "scorer.py is an unreviewed stub: write the outcome check"
'''
SCORER_RAISES = '''
def outcome(trace):
    return trace.turns[0].nonexistent
'''


def scenario(**fields: Any):
    return load_scenario({"wt_scenario": 1, "id": "s", "user_turns": ["What is the email for Bluewing?"], **fields})


def checks(tmp_path: Path | None = None, scorer: str | None = None, **fields: Any) -> ScenarioChecks:
    if scorer is not None:
        assert tmp_path is not None
        (tmp_path / "scorer.py").write_text(scorer)
        fields["scorer"] = "scorer.py"
    return ScenarioChecks.of(scenario(**fields), tmp_path)


OK = make_trace(calls=[LOOKUP])


# ---------------------------------------------------------------- one run's layers


def test_a_scenario_with_nothing_declared_gates_on_a_reply_and_integrity():
    score = score_run(OK, checks())
    assert score.passed and score.gate == ["outcome"] and set(score.layers) == {"outcome", "integrity"}
    assert "no outcome check is declared" in score.layers["outcome"].detail


def test_structural_outcome_checks_run_first():
    silent = make_trace(reply="", turns=[{"text": "hi", "reply": "", "tool_calls": [], "latency_ms": 1,
                                          "error": "model timed out"}])
    score = score_run(silent, checks())
    assert not score.passed and score.layers["outcome"].detail == ("the agent gave no final reply (the agent "
                                                                   "reported: model timed out)")
    no_tools = score_run(make_trace(), checks(requires_tool_use=True))
    assert not no_tools.passed and no_tools.layers["outcome"].detail.startswith("requires_tool_use: the agent used no")
    assert score_run(OK, checks(requires_tool_use=True)).passed


def test_scorer_py_is_loaded_by_path_and_judges_the_outcome(tmp_path: Path):
    c = checks(tmp_path, SCORER_OK)
    assert score_run(OK, c).passed
    wrong = score_run(make_trace(reply="I could not find it.", calls=[LOOKUP]), c)
    assert not wrong.passed
    assert wrong.layers["outcome"].detail == "scorer.py: the final reply misses 'ops@bluewing.example'"


def test_the_import_stub_fails_until_written(tmp_path: Path):
    score = score_run(OK, checks(tmp_path, SCORER_STUB))
    assert not score.passed and "unreviewed stub" in score.layers["outcome"].detail


def test_a_raising_scorer_is_a_failure_with_the_exception(tmp_path: Path):
    score = score_run(OK, checks(tmp_path, SCORER_RAISES))
    detail = score.layers["outcome"].detail
    assert not score.passed and detail.startswith("scorer.py: scorer.py:outcome raised AttributeError:")
    assert "nonexistent" in detail


@pytest.mark.parametrize(("source", "reason"), [
    ("def outcome(trace:\n", "SyntaxError"),
    ("x = 1\n", "scorer.py defines no outcome(trace) function"),
    ("import no_such_module_here\n", "ModuleNotFoundError"),
])
def test_an_unloadable_scorer_fails_every_run_with_the_reason(tmp_path: Path, source: str, reason: str):
    score = score_run(OK, checks(tmp_path, source))
    assert not score.passed and score.layers["outcome"].detail.startswith("scorer.py could not be loaded")
    assert reason in score.layers["outcome"].detail


def test_output_assertions_join_the_outcome_layer():
    c = checks(assertions=[{"type": "output", "contains": "bluewing.example", "notContains": "sorry"}])
    assert score_run(OK, c).passed
    failed = score_run(make_trace(reply="Sorry, no idea.", calls=[LOOKUP]), c)
    assert not failed.passed
    assert "the final reply does not contain 'bluewing.example'" in failed.layers["outcome"].detail


def test_trajectory_layer_must_call_forbidden_calls_and_sequence():
    c = checks(must_call=["client_lookup"], forbidden_calls=["payment_submit"],
               assertions=[{"type": "tool-sequence", "mode": "exact", "tools": ["client_lookup"]}])
    score = score_run(OK, c)
    assert score.passed and score.gate == ["outcome", "trajectory"]
    bad = score_run(make_trace(calls=[LOOKUP, ("payment_submit", {}, "ok")]), c)
    detail = bad.layers["trajectory"].detail
    assert not bad.passed and "forbidden_calls 'payment_submit': called 1 time(s)" in detail
    assert "tool-sequence: expected ['client_lookup'], got ['client_lookup', 'payment_submit']" in detail
    missing = score_run(make_trace(), c)
    assert "must_call 'client_lookup': never called" in missing.layers["trajectory"].detail


def test_constraint_layer_policies_and_no_divergence():
    c = checks(assertions=[{"type": "policy", "rule": "no-divergence"}])
    assert score_run(OK, c).gate == ["outcome", "constraint"] and score_run(OK, c).passed
    miss = make_trace(calls=[("client_lookup", {"query": "x"}, {"error": "no_recorded_result"}, "fail_call")])
    score = score_run(miss, c)
    assert not score.passed and "divergence: 1 tool call(s) matched no recording" in score.layers["constraint"].detail


def test_a_widened_gate_over_a_layer_with_nothing_declared_says_so():
    c = checks(assertions=[{"type": "tool-sequence", "mode": "exact", "tools": ["other"]}],
               gates=["outcome", "trajectory", "constraint"])
    score = score_run(OK, c)
    assert not score.passed and score.layers["constraint"].detail == "no constraint check is declared"


def test_an_errored_run_is_scored_on_integrity_alone_and_an_invalid_one_in_full():
    errored = score_run(make_trace(integrity="ERROR", integrity_detail="reset failed: 500"), checks())
    assert not errored.passed and set(errored.layers) == {"integrity"}
    assert errored.layers["integrity"].detail == "reset failed: 500"
    invalid = score_run(make_trace(integrity="INVALID", integrity_detail="universe bypassed"), checks())
    assert not invalid.passed and invalid.layers["outcome"].passed and not invalid.layers["integrity"].passed


# ---------------------------------------------------------------- gates


def test_gate_is_inferred_and_may_only_widen():
    assert scenario().gate() == ["outcome"]
    assert scenario(must_call=["a"]).gate() == ["outcome", "trajectory"]
    policy = {"type": "policy", "rule": "forbid-after", "tool": "a", "afterTool": "b"}
    assert scenario(assertions=[policy]).gate() == ["outcome", "constraint"]
    assert scenario(gates=["outcome", "constraint"]).gate() == ["outcome", "constraint"]
    with pytest.raises(ContractError, match="gates omits 'trajectory'.*must_call.*gates may only widen"):
        scenario(must_call=["a"], gates=["outcome"])
    with pytest.raises(ContractError, match="gates omits 'outcome'"):
        scenario(gates=["trajectory"])


def test_scenario_assertions_are_validated_with_their_yaml_path():
    with pytest.raises(ContractError) as caught:
        scenario(assertions=[{"type": "tool-sequence", "mode": "exakt", "tools": ["a"]}])
    assert "assertions[0].mode is invalid: 'exakt' is not one of exact, ordered-subsequence, contiguous" in str(
        caught.value)


# ---------------------------------------------------------------- N runs


def scores_of(traces, c=None):
    return [score_run(t, c or checks()) for t in traces]


FAILED = make_trace(reply="", run_index=2)


def test_verdict_pass_fail_and_the_failing_layers_detail():
    traces = [make_trace(run_index=1), make_trace(run_index=2)]
    assert aggregate(traces, scores_of(traces)) == ("PASS", None)
    traces = [make_trace(run_index=1), FAILED]
    assert aggregate(traces, scores_of(traces)) == ("FAIL", "1/2 runs passed; run 2: outcome: the agent gave no "
                                                            "final reply")


def test_pass_with_variance_only_when_allowed_and_one_run_passed():
    traces = [make_trace(run_index=1), FAILED]
    verdict, detail = aggregate(traces, scores_of(traces), variance_allowed=True)
    assert verdict == "PASS_WITH_VARIANCE" and detail.startswith("1/2 runs passed; run 2: outcome")
    all_failed = [make_trace(reply="", run_index=1), FAILED]
    assert aggregate(all_failed, scores_of(all_failed), variance_allowed=True)[0] == "FAIL"


def test_invalid_and_error_win_over_scores():
    invalid = [make_trace(run_index=1), make_trace(run_index=2, integrity="INVALID", integrity_detail="bypassed")]
    assert aggregate(invalid, scores_of(invalid), variance_allowed=True) == ("INVALID", "run 2: bypassed")
    error = [make_trace(integrity="INVALID", integrity_detail="bypassed"),
             make_trace(run_index=2, integrity="ERROR", integrity_detail="endpoint down")]
    assert aggregate(error, scores_of(error)) == ("ERROR", "run 2: endpoint down")
    assert aggregate([], []) == ("ERROR", "no run was recorded")


def test_score_scenario_writes_sidecars_and_fills_the_record(tmp_path: Path):
    traces = [make_trace(run_index=1, calls=[LOOKUP]), make_trace(run_index=2, reply="", calls=[LOOKUP])]
    paths = [tmp_path / "run-1.trace.json", tmp_path / "run-2.trace.json"]
    s = scenario(must_call=["client_lookup"], variance_allowed=True, runs=2)
    record = score_scenario("s", s, tmp_path, traces, paths)
    assert (record.verdict, record.runs, record.runs_passed) == ("PASS_WITH_VARIANCE", 2, 1)
    assert record.layer_pass_rates == {"outcome": 0.5, "trajectory": 1.0, "integrity": 1.0}
    assert record.gate == ["outcome", "trajectory"] and record.run_ids == ["sweep/s/run-1", "sweep/s/run-2"]
    assert record.detail == "1/2 runs passed; run 2: outcome: the agent gave no final reply"
    sidecar = RunScore.model_validate_json((tmp_path / "run-2.score.json").read_text())
    assert sidecar.run_index == 2 and not sidecar.passed and sidecar.trace_path == str(paths[1])
    assert sidecar == record.scores[1]


def test_an_unloadable_scenario_is_scored_on_integrity():
    record = score_scenario("broken", None, None, [make_trace(integrity="ERROR", integrity_detail="bad fixture: x")],
                            write=False)
    assert (record.verdict, record.detail) == ("ERROR", "run 1: bad fixture: x")
    assert record.layer_pass_rates == {"integrity": 0.0}


# ---------------------------------------------------------------- wired into wt-otel run


def add_scorer(directory: Path, source: str, **fields: Any) -> None:
    (directory / "scorer.py").write_text(source)
    data = yaml.safe_load((directory / "scenario.yaml").read_text())
    data.update(scorer="scorer.py", **fields)
    (directory / "scenario.yaml").write_text(yaml.safe_dump(data))


def test_the_sweep_scores_every_run_and_writes_score_sidecars(tmp_path: Path):
    good = write_scenario(tmp_path / "sc", "shipped", runs=2)
    add_scorer(good, "from wt_otel.scorers import target_facts\noutcome = target_facts(['shipped'])\n",
               assertions=[{"type": "tool-sequence", "mode": "exact", "tools": ["lookup_order"]}])
    bad = write_scenario(tmp_path / "sc", "refunded")
    add_scorer(bad, "from wt_otel.scorers import target_facts\noutcome = target_facts(['refunded'])\n")
    result = sweep([tmp_path / "sc"], PythonRuntime(ScriptedAgent()), tmp_path)
    refunded, shipped = result.scenarios
    assert (shipped.status, refunded.status) == ("PASS", "FAIL") and result.exit_code == 1
    assert refunded.detail == "run 1: outcome: scorer.py: the final reply misses 'refunded'"
    assert shipped.record.gate == ["outcome", "trajectory"] and shipped.record.runs_passed == 2
    assert [s.run_index for s in shipped.scores] == [1, 2]
    sidecars = sorted(p.name for p in (result.directory / "shipped").iterdir())
    assert sidecars == ["run-1.score.json", "run-1.trace.json", "run-2.score.json", "run-2.trace.json"]
    score = json.loads((result.directory / "shipped" / "run-1.score.json").read_text())
    assert score["passed"] is True and set(score["layers"]) == {"outcome", "trajectory", "integrity"}
