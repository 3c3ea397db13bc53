"""Framework runtimes: an agent object replayed as it is, its live tool bodies never run.

The OpenAI Agents SDK agent below is ordinary user code: a function tool whose live body fails the
test if it ever runs, and the SDK's default model API (Responses). `wt-otel run --runtime
openai-agents:MODULE:ATTR --llm replay` answers its model from the cassette and its tool from the
universe, and the verdict is a real one (PASS here, FAIL when the recording says otherwise).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.support.llm_calls import ASK, CALLS, SYSTEM, cassette
from tests.support.producers import FIRST_ANSWER  # also puts the fake provider (fake_openai) on sys.path
from wt_otel.cli import main
from wt_otel.contracts.run import load_trace

pytest.importorskip("agents", reason="openai-agents is a test dependency")

AGENT_MODULE = f'''
from pathlib import Path
from agents import Agent, function_tool

RAN = Path(__file__).with_name("LIVE_TOOL_RAN")


@function_tool
def client_lookup(query: str) -> dict:
    """Look up a client by name."""
    RAN.write_text(query)  # the live body: must never run during a replay
    raise AssertionError("the live tool ran")


agent = Agent("crm", instructions={SYSTEM!r}, model="gpt-4o-mini", tools=[client_lookup])
'''
UNIVERSE = {
    "windtunnel_universe": 1,
    "tools": [{"name": "client_lookup", "description": "Look up a client by name.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}],
    "recordings": [{"tool_name": "client_lookup", "args": {"query": "Bluewing"},
                    "result": {"email": "ops@bluewing.example"}}],
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "crm_agent_mod.py").write_text(textwrap.dedent(AGENT_MODULE))
    scenario = tmp_path / "sc"
    scenario.mkdir()
    (scenario / "fixture.universe.json").write_text(json.dumps(UNIVERSE))
    (scenario / "llm.cassette.json").write_text(json.dumps(cassette(CALLS)))
    (scenario / "scenario.yaml").write_text(yaml.safe_dump({
        "wt_scenario": 1, "id": "crm", "user_turns": [ASK], "requires_tool_use": True,
        "assertions": [{"type": "output", "contains": "ops@bluewing.example"}],
        "fixtures": {"universe": "fixture.universe.json", "cassette": "llm.cassette.json"}, "runs": 1}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return tmp_path


def run(workdir: Path, runtime: str) -> tuple[int, str, list]:
    res = CliRunner().invoke(main, ["run", "sc", "--runtime", runtime, "--llm", "replay", "--universe-port", "0",
                                    "--llm-port", "0", "--runs-dir", "runs"], catch_exceptions=False)
    traces = [load_trace(json.loads(p.read_text())) for p in sorted((workdir / "runs").rglob("*.trace.json"))]
    return res.exit_code, res.output, traces


def test_openai_agents_agent_replays_with_zero_divergence_and_no_live_tool(workdir: Path):
    code, out, [trace] = run(workdir, "openai-agents:crm_agent_mod:agent")
    assert code == 0 and "PASS" in out, out
    assert not (workdir / "LIVE_TOOL_RAN").exists(), "the live tool body ran"
    assert trace.turns[0].reply == "The email is ops@bluewing.example."
    assert [(c.name, c.arguments) for c in trace.turns[0].tool_calls] == [("client_lookup", {"query": "Bluewing"})]
    assert [(c.tool_name, c.match) for c in trace.mcp_calls] == [("client_lookup", "exact")]
    assert [(c.match, c.recorded_index) for c in trace.llm_calls] == [("exact", 0), ("exact", 1)]
    assert trace.integrity.status == "PASS" and trace.evidence.llm == "replay"


def test_a_changed_instruction_diverges_and_fails(workdir: Path):
    source = (workdir / "crm_agent_mod.py").read_text().replace("You are a CRM assistant.", "Be brief.")
    (workdir / "crm_agent_brief.py").write_text(source)  # a new module name: the first is imported already
    code, out, [trace] = run(workdir, "openai-agents:crm_agent_brief:agent")
    assert code == 1 and "system prompt changed:" in out, out
    assert trace.turns[0].error and "422" in trace.turns[0].error
    assert not (workdir / "LIVE_TOOL_RAN").exists()


def test_a_target_that_is_not_an_agent_is_a_usage_error(workdir: Path):
    res = CliRunner().invoke(main, ["run", "sc", "--runtime", "openai-agents:crm_agent_mod:client_lookup",
                                    "--universe-port", "0"])
    assert res.exit_code == 2 and "expected an agents.Agent" in res.output, res.output


def test_record_through_the_runtime_then_replay_hermetically(workdir: Path):
    """--llm record points the agent's default (Responses) model at the recording proxy, without code
    changes; the recorded cassette then replays the same agent with zero divergence."""
    from fake_openai import start_server

    (workdir / "sc" / "llm.cassette.json").unlink()
    (workdir / "crm_agent_rec.py").write_text((workdir / "crm_agent_mod.py").read_text())
    server, port = start_server()
    try:
        res = CliRunner().invoke(main, ["run", "sc", "--runtime", "openai-agents:crm_agent_rec:agent", "--llm",
                                        "record", "--llm-upstream", f"http://127.0.0.1:{port}/v1",
                                        "--universe-port", "0", "--llm-port", "0", "--runs-dir", "runs-record"],
                                 catch_exceptions=False)  # its own runs dir: sweep ids sort by the second only
    finally:
        server.shutdown()
        server.server_close()
    assert res.exit_code == 0, res.output
    assert not (workdir / "LIVE_TOOL_RAN").exists()
    code, out, traces = run(workdir, "openai-agents:crm_agent_rec:agent")
    assert code == 0, out
    assert traces[-1].turns[0].reply == FIRST_ANSWER
    assert [c.match for c in traces[-1].llm_calls] == ["exact", "exact"]
