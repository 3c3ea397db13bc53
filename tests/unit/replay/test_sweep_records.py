"""The runner builds the results records itself: one ScenarioResult per scenario, pack and divergence included."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import yaml
from mcp import Client

from wt_otel.contracts.results import ScenarioResult, SweepResult
from wt_otel.replay.runner import ENV_UNIVERSE_URL, RunOptions, ScenarioRun, Sweep, load_all
from wt_otel.replay.runtimes import PythonRuntime

UNIVERSE = {"windtunnel_universe": 1,
            "tools": [{"name": "lookup_order", "input_schema": {"type": "object"}}],
            "recordings": [{"tool_name": "lookup_order", "args": {"order_id": "A-2"}, "result": {"status": "x"}}]}


async def _call(url: str) -> Any:
    async with Client(url) as client:
        return (await client.call_tool("lookup_order", {"order_id": "A-1"})).structured_content


def agent(text: str, session_id: str) -> dict[str, Any]:
    """Calls the served universe with arguments it never recorded: a universe miss on every run."""
    result = asyncio.run(_call(os.environ[ENV_UNIVERSE_URL]))
    return {"reply": f"done: {json.dumps(result)}", "tool_calls": [{"name": "lookup_order",
                                                                   "arguments": {"order_id": "A-1"}}]}


def scenario(root: Path, sid: str, **extra: Any) -> Path:
    d = root / sid
    d.mkdir(parents=True)
    (d / "fixture.universe.json").write_text(json.dumps(UNIVERSE))
    (d / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": sid, "user_turns": ["Where is A-1?"],
                                                     "fixtures": {"universe": "fixture.universe.json"}, **extra}))
    return d


def test_records_carry_pack_model_and_divergence_note_while_the_summary_keeps_them_apart(tmp_path: Path) -> None:
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "pack.yaml").write_text(yaml.safe_dump({"name": "billing", "owner": "team-pay",
                                                               "metadata": {"model": "gpt-x", "sampler.top_p": "1"}}))
    scenario(tmp_path / "sc", "orders", tags=["origin:inc-7"], runs=2)
    options = RunOptions(runtime=PythonRuntime(agent), runs_dir=tmp_path / "runs", universe_port=0, label="nightly",
                         emit=lambda line: None, ledger=False)
    sweep = Sweep(options).run(load_all([tmp_path / "sc" / "orders"], "live"))

    [run] = sweep.scenarios
    assert isinstance(run, ScenarioRun) and isinstance(sweep.record, SweepResult)
    [record] = sweep.record.scenarios
    assert record is run.record and isinstance(record, ScenarioResult)
    assert (record.pack, record.owner, record.origin, record.model, record.sampler, record.label) == (
        "billing", "team-pay", "inc-7", "gpt-x", {"top_p": "1"}, "nightly")
    assert record.verdict == run.status == "PASS" and record.runs == 2 and record.runs_passed == 2
    assert record.layer_pass_rates == {"outcome": 1.0, "integrity": 1.0}
    assert record.detail == run.note == "divergence: 2 universe miss(es)"  # in every output, never hidden
    summary = json.loads((sweep.directory / "summary.json").read_text())["scenarios"][0]
    assert (summary["detail"], summary["note"]) == (None, "divergence: 2 universe miss(es)")
    assert sweep.ledger_path is None and not (tmp_path / "runs" / "ledger.ndjsonl").exists()


def test_a_scenario_the_breaker_skipped_is_an_error_record_but_not_run_in_the_summary(tmp_path: Path) -> None:
    for sid in ("a", "b", "c"):
        d = scenario(tmp_path / "sc", sid)
        (d / "fixture.universe.json").write_text("{")
    scenario(tmp_path / "sc", "d", owner="team-late")
    options = RunOptions(runtime=PythonRuntime(agent), runs_dir=tmp_path / "runs", universe_port=0, breaker=3,
                         emit=lambda line: None, ledger=False)
    sweep = Sweep(options).run(load_all(sorted((tmp_path / "sc").iterdir()), "live"))

    assert [s.status for s in sweep.scenarios] == ["ERROR", "ERROR", "ERROR", "NOT RUN"]
    skipped = sweep.record.scenarios[3]
    assert (skipped.scenario_id, skipped.verdict, skipped.owner, skipped.runs) == ("d", "ERROR", "team-late", 0)
    assert skipped.detail.startswith("not run: circuit breaker (circuit breaker: 3 consecutive")
    assert sweep.scenarios[3].detail == "not run: the sweep stopped (circuit breaker)"
    assert sweep.stopped is not None and sweep.exit_code == 1
