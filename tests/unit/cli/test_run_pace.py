"""`wt-otel run --llm replay --pace`: historical latency emulation on a replay run, not only `cassette serve`."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.replay.runner import RunOptions, ScenarioServers, load_all
from wt_otel.replay.runtimes import resolve_runtime

T = "0af7651916cd43dd8448eb211c80319c"
CASSETTE = {"wt_cassette": 1, "latest_trace_id": T, "history_keys": [T], "traces": {T: {
    "trace_id": T, "request_context": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "response_timeline": [{"delta_ms": 0, "chunk": "hello"}]}}}


def scenario_dir(root: Path) -> Path:
    d = root / "s"
    d.mkdir()
    (d / "llm.cassette.json").write_text(json.dumps(CASSETTE))
    (d / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": "s", "user_turns": ["hi"],
                                                     "fixtures": {"cassette": "llm.cassette.json"}}))
    return d


def test_pace_reaches_the_cassette_server(tmp_path: Path) -> None:
    (loaded,) = load_all([scenario_dir(tmp_path)], "replay")
    runtime = resolve_runtime("http_inject")
    try:
        paced = ScenarioServers(loaded, RunOptions(runtime=runtime, llm="replay", pace=True, llm_port=0))
        plain = ScenarioServers(loaded, RunOptions(runtime=runtime, llm="replay", llm_port=0))
    finally:
        runtime.close()
    assert paced.cassette is not None and paced.cassette.pace
    assert plain.cassette is not None and not plain.cassette.pace


def test_pace_without_llm_replay_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", str(scenario_dir(tmp_path)), "--pace", "--runs-dir",
                                       str(tmp_path / "runs")])
    assert result.exit_code == 2
    assert "--pace applies to --llm replay only" in result.output


def test_run_help_offers_pace() -> None:
    assert "--pace" in CliRunner().invoke(main, ["run", "--help"]).output
