"""no_divergence() counts in the constraint layer however scorer.py writes it (recording-a-universe.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wt_otel.contracts.run import Trace
from wt_otel.contracts.scenario import load_scenario
from wt_otel.scorers import no_divergence
from wt_otel.scoring.layers import ScenarioChecks, score_run


def trace(divergent: bool) -> Trace:
    call: dict[str, Any] = {"tool_name": "lookup", "args": {"q": "x"}, "result": {"email": "a@b.example"},
                            "match": "fail_call" if divergent else "exact"}
    if divergent:
        call["extra"] = {"divergence": {"policy": "fail_call", "matched": None}}
    return Trace.model_validate({
        "wt_trace": 1, "scenario_id": "s", "run_index": 1, "run_id": "w/s/run-1",
        "started_at": "2026-01-01T00:00:00Z", "runtime": "http_inject",
        "turns": [{"text": "email?", "reply": "a@b.example", "latency_ms": 1.0,
                   "tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}],
        "mcp_calls": [call], "evidence": {"witness": "available", "llm": "live"},
        "integrity": {"status": "PASS"}})


SCORERS = {
    "all_of": "from wt_otel.scorers import all_of, no_divergence, substantiated_by_tools\n"
              "outcome = all_of(no_divergence(), substantiated_by_tools())\n",
    "bare": "from wt_otel.scorers import no_divergence\noutcome = no_divergence()\n",
    "hand_written": "from wt_otel.scorers import all_of, no_divergence, target_facts\n"
                    "def outcome(trace):\n"
                    "    return all_of(target_facts(['a@b.example']), no_divergence())(trace)\n",
}


def checks(tmp_path: Path, source: str) -> ScenarioChecks:
    (tmp_path / "scorer.py").write_text(source)
    scenario = load_scenario({"wt_scenario": 1, "id": "s", "user_turns": ["email?"], "scorer": "scorer.py"})
    return ScenarioChecks.of(scenario, tmp_path)


@pytest.mark.parametrize("form", sorted(SCORERS))
def test_divergence_fails_the_constraint_layer_not_the_outcome(tmp_path: Path, form: str) -> None:
    score = score_run(trace(divergent=True), checks(tmp_path, SCORERS[form]))
    assert score.layers["outcome"].passed, score.layers["outcome"].detail
    assert not score.layers["constraint"].passed
    assert "1 tool call(s) matched no recording" in score.layers["constraint"].detail
    assert "constraint" in score.gate and not score.passed  # a declared policy gates, as a YAML policy does


@pytest.mark.parametrize("form", sorted(SCORERS))
def test_no_divergence_passes_in_the_constraint_layer(tmp_path: Path, form: str) -> None:
    score = score_run(trace(divergent=False), checks(tmp_path, SCORERS[form]))
    assert score.passed
    assert score.layers["constraint"].passed and "no divergence" in score.layers["constraint"].detail


def test_called_directly_it_still_answers() -> None:
    assert not no_divergence()(trace(divergent=True)).passed
    assert no_divergence()(trace(divergent=False)).passed
