"""The bundled reference-agent dump (examples/dumps/crm-agent.otlp.jsonl, written by
examples/make_reference_dump.py from the reference agent's own telemetry) replays against the reference
agent with `--llm replay`: every model call and tool call matches the recording exactly (same system
prompt, tool list and requests), the reviewed good conversation PASSes and the flagged incident is
reproduced (its wrong answer FAILs the outcome check)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from examples.agent import AgentConfig, start_in_thread
from examples.demo.stage import free_port
from tests.support.paths import ROOT
from wt_otel.cli import main
from wt_otel.contracts.run import load_trace

DUMP = ROOT / "examples" / "dumps" / "crm-agent.otlp.jsonl"
REVIEWED_SCORER = """from wt_otel.scorers import all_of, observation, substantiated_by_tools, target_facts

outcome = all_of(target_facts(["ops@bluewing.example"]), substantiated_by_tools(),
                 # state assertions on what the run did to the served universe (trace.observations)
                 observation("universe", "tools.client_lookup.calls", lambda n: n == 1, "one CRM lookup"),
                 observation("universe", "writes", lambda w: w == [], "the agent changed nothing"))
"""


def test_the_reference_sample_replays_against_the_reference_agent(tmp_path: Path):
    runner = CliRunner()
    res = runner.invoke(main, ["import", str(DUMP), "--out", str(tmp_path / "scenarios")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    scenarios = {yaml.safe_load((p / "scenario.yaml").read_text())["user_turns"][0]: p
                 for p in (tmp_path / "scenarios").iterdir()}
    email = scenarios["What is the email on file for Bluewing?"]
    (email / "scorer.py").write_text(REVIEWED_SCORER)  # what a reviewer writes for the good conversation
    spec = email / "scenario.yaml"
    spec.write_text(spec.read_text().replace("- unreviewed\n", ""))

    universe_port, llm_port = free_port(), free_port()
    agent = start_in_thread(AgentConfig(mcp_url=f"http://127.0.0.1:{universe_port}/mcp",
                                        openai_base_url=f"http://127.0.0.1:{llm_port}/v1"), port=0)
    try:
        res = runner.invoke(main, ["run", str(tmp_path / "scenarios"), "--inject-url", agent.url, "--llm", "replay",
                                   "--universe-port", str(universe_port), "--llm-port", str(llm_port),
                                   "--runs-dir", str(tmp_path / "runs")], catch_exceptions=False)
    finally:
        agent.stop()
    traces = [load_trace(json.loads(p.read_text())) for p in (tmp_path / "runs").rglob("*.trace.json")]
    assert len(traces) == 2, res.output
    for trace in traces:
        assert [c.match for c in trace.llm_calls] == ["exact", "exact"], res.output
        assert [(c.tool_name, c.match) for c in trace.mcp_calls] == [("client_lookup", "exact")]
        assert trace.observations is not None and trace.observations["universe"]["writes"] == []
    scored = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("run-1.score.json")]
    assert any("one CRM lookup: holds for 1" in s["layers"]["outcome"]["detail"] for s in scored), scored
    rows = {line.split()[1]: line.split()[0] for line in res.output.splitlines()
            if line.split() and line.split()[0] in ("PASS", "FAIL", "ERROR", "INVALID")}
    assert rows[email.name] == "PASS", res.output
    [incident] = [name for name in rows if name != email.name]
    assert rows[incident] == "FAIL" and "REPRODUCED" in res.output, res.output
