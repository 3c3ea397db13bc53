"""Record -> import -> replay, end to end, with the reference agent (examples/agent).

Record: the reference agent runs "live" as its own process (its GenAI
instrumentations patch openai and the Agents SDK process-wide), its model the
scripted fake LLM (tests/fixtures/producers/_common/fake_openai.py: one
`client_lookup` call, then text), its tools a hand-made MCP server standing in
for production, and its telemetry written to an OTLP/JSON file.
Import: `wt-otel import` turns the file into a scenario directory.
Replay: `wt-otel run --llm replay` over http_inject, the agent (in a thread,
telemetry off) configured with the ports the runner serves the universe and
the cassette on. Then the three ways a replay must not pass quietly: a changed
system prompt (cassette misses, recorded as LLM divergence), an agent wired to
the live tools (INVALID), and an endpoint that is down (ERROR, exit 1).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from junitparser import JUnitXml

from tests.support.paths import ROOT
from tests.support.producers import FIRST_ANSWER, Handler
from wt_otel.cli import main
from wt_otel.contracts.run import Trace, load_trace
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse
from wt_otel.scoring.verdict import BYPASS

pytest.importorskip("agents", reason="openai-agents is a test dependency")

from examples.agent import AgentConfig, start_in_thread  # noqa: E402

INSTRUCTIONS = "You are the CRM assistant. Answer from client_lookup only."
TURNS = ("What is the email on file for Bluewing?", "And its phone?")
LOOKUP = {"query": "Bluewing"}
PRODUCTION = {  # the "live" tools, as a universe served over real MCP
    "windtunnel_universe": 1,
    "tools": [{"name": "client_lookup", "description": "Look up a client record by name.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}],
    "recordings": [{"tool_name": "client_lookup", "args": LOOKUP,
                    "result": {"name": "Bluewing", "email": "ops@bluewing.example", "phone": "+1-555-0100"}}],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def inject(base: str, session_id: str, text: str) -> dict[str, Any]:
    body = json.dumps({"wt_inject": 1, "session_id": session_id, "text": text, "timeout_s": 20}).encode()
    request = urllib.request.Request(base + "/wt/inject", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def production() -> Iterator[UniverseMCPServer]:
    with UniverseMCPServer(RecordedUniverse(load_universe(PRODUCTION)), port=0) as server:
        yield server


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, production: UniverseMCPServer) -> Path:
    """Record the agent live (its own process, telemetry to a file), then import the file."""
    tmp = tmp_path_factory.mktemp("e2e")
    llm = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    llm.daemon_threads = True
    threading.Thread(target=llm.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    dump = tmp / "agent.otlp.jsonl"
    env = {**os.environ, "WT_AGENT_MCP_URL": production.url, "PYTHONUNBUFFERED": "1",
           "WT_AGENT_OPENAI_BASE_URL": f"http://127.0.0.1:{llm.server_address[1]}/v1",
           "WT_AGENT_OTLP_FILE": str(dump), "WT_AGENT_INSTRUCTIONS": INSTRUCTIONS}
    proc = subprocess.Popen([sys.executable, "-m", "examples.agent", "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        match = re.search(r"listening on (http://\S+)", lines[1])
        assert match, lines + [proc.stderr.read() if proc.poll() is not None else ""]
        replies = [inject(match.group(1), "conv-e2e", text) for text in TURNS]
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
        llm.shutdown()
        llm.server_close()
    assert replies[0]["reply"] == FIRST_ANSWER
    assert [r["tool_calls"] for r in replies] == [[{"name": "client_lookup", "arguments": LOOKUP}]] * 2
    production.reset()  # the recording's calls are not the replay's evidence
    res = CliRunner().invoke(main, ["import", str(dump), "--out", str(tmp / "scenarios")])
    assert res.exit_code == 0, res.output
    [directory] = (tmp / "scenarios").iterdir()
    # the review step the import asks for: the stub scorer fails until a human writes the outcome check
    (directory / "scorer.py").write_text("from wt_otel.scorers import all_of, substantiated_by_tools, target_facts\n"
                                         "outcome = all_of(target_facts(['+1-555-0100']), "
                                         "substantiated_by_tools())\n")
    # ...and the authored assertion suite: trajectory and constraint layers join the gate
    spec = yaml.safe_load((directory / "scenario.yaml").read_text())
    spec["tags"] = [t for t in spec.get("tags", []) if t != "unreviewed"]  # reviewed now: a PASS can be a PASS
    spec["assertions"] = [
        {"type": "tool-sequence", "mode": "exact", "tools": ["client_lookup", "client_lookup"]},
        {"type": "tool-arguments", "tool": "client_lookup",
         "arguments": {"type": "object", "shape": {"query": {"type": "string", "equals": "Bluewing"}}}},
        {"type": "output", "contains": "+1-555-0100"},
        {"type": "policy", "rule": "no-divergence"},
    ]
    (directory / "scenario.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return directory


@pytest.fixture
def ports() -> tuple[int, int]:
    return free_port(), free_port()


def agent_config(ports: tuple[int, int], *, instructions: str = INSTRUCTIONS, mcp_url: str | None = None
                 ) -> AgentConfig:
    """The agent as a bench configures it out-of-band: the runner's universe and cassette URLs (an agent given
    another tool URL is pinned to it, ignoring the reset's: one that bypasses the recorded tools)."""
    universe_port, llm_port = ports
    return AgentConfig(mcp_url=mcp_url or f"http://127.0.0.1:{universe_port}/mcp",
                       openai_base_url=f"http://127.0.0.1:{llm_port}/v1", instructions=instructions,
                       follow_reset_urls=mcp_url is None)


def replay(scenario: Path, agent_url: str, ports: tuple[int, int], runs_dir: Path, *extra: str
           ) -> tuple[Any, list[Trace]]:
    res = CliRunner().invoke(main, [
        "run", str(scenario), "--llm", "replay", "--inject-url", agent_url, "--universe-port", str(ports[0]),
        "--llm-port", str(ports[1]), "--runs-dir", str(runs_dir), *extra], catch_exceptions=False)
    traces = [load_trace(json.loads(p.read_text())) for p in sorted(runs_dir.rglob("*.trace.json"))]
    return res, traces


def test_replay_reproduces_the_recording_with_zero_divergence(scenario: Path, ports: tuple[int, int],
                                                               tmp_path: Path) -> None:
    with start_in_thread(agent_config(ports), port=0) as agent:
        res, [trace] = replay(scenario, agent.url, ports, tmp_path / "runs", "--out", str(tmp_path / "r.xml"))
    assert res.exit_code == 0, res.output
    assert re.search(r"^PASS +\S+ +1/1( +\d+%)*$", res.output, re.M), res.output  # no divergence note either
    [score] = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("*.score.json")]
    assert score["gate"] == ["outcome", "trajectory", "constraint"] and score["passed"] is True
    suite = next(iter(JUnitXml.fromfile(str(tmp_path / "r.xml"))))
    assert (suite.tests, suite.failures, suite.errors) == (1, 0, 0)
    [row] = [json.loads(line) for line in (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert row["verdict"] == "PASS" and row["origin"] and row["layer_pass_rates"]["trajectory"] == 1.0
    assert [t.text for t in trace.turns] == list(TURNS)
    assert trace.turns[0].reply == FIRST_ANSWER and all(t.error is None for t in trace.turns)
    assert [(c.tool_name, c.args, c.match, c.divergence) for c in trace.mcp_calls] == [
        ("client_lookup", LOOKUP, "exact", None)] * 2
    assert trace.llm_calls and all(c.match == "exact" and c.status == 200 for c in trace.llm_calls)
    assert trace.evidence.witness == "available" and trace.evidence.llm == "replay"
    assert trace.surface.status == "reported"
    assert trace.surface.surface.system_instructions[0].content == INSTRUCTIONS
    assert trace.warnings == []


def test_a_changed_system_prompt_is_recorded_as_llm_divergence(scenario: Path, ports: tuple[int, int],
                                                               tmp_path: Path) -> None:
    """The cassette no longer answers: every model request misses, the agent reports a model error.

    Integrity holds (the run completed, hermetically: no tool reached
    production); the outcome fails, since the agent never answered. The
    divergence must not be lost either: it is in llm_calls, the warnings and
    the summary line.
    """
    with start_in_thread(agent_config(ports, instructions="You are a pirate. Say arr."), port=0) as agent:
        res, [trace] = replay(scenario, agent.url, ports, tmp_path / "runs")
    assert res.exit_code == 1, res.output
    assert re.search(r"^FAIL .* run 1: outcome: the agent gave no final reply .* divergence: 2 LLM miss\(es\)$",
                     res.output, re.M), res.output
    assert [c.match for c in trace.llm_calls] == ["miss", "miss"]  # one per turn: each failed at its first request
    assert all(c.event == "llm_divergence" and c.status == 422 for c in trace.llm_calls)
    assert trace.llm_calls[0].divergence["at"] == "messages[0]"  # the system prompt
    assert "You are a pirate" in trace.llm_calls[0].divergence["received"]
    assert all(t.error for t in trace.turns) and trace.mcp_calls == []
    assert any(w.startswith("llm divergence: 2 model request(s)") for w in trace.warnings)
    assert trace.integrity.status == "PASS"


def test_an_agent_on_the_live_tools_is_invalid(scenario: Path, production: UniverseMCPServer,
                                               ports: tuple[int, int], tmp_path: Path) -> None:
    production.reset()
    with start_in_thread(agent_config(ports, mcp_url=production.url), port=0) as agent:
        res, [trace] = replay(scenario, agent.url, ports, tmp_path / "runs")
    assert res.exit_code == 1
    assert re.search(rf"^INVALID +\S+ +0/1 .* run 1: {BYPASS}", res.output, re.M), res.output
    assert [c["tool_name"] for c in production.call_log()] == ["client_lookup"] * 2  # production was reached
    assert trace.integrity.status == "INVALID" and trace.mcp_calls == []
    assert trace.evidence.witness == "unavailable"
    assert "client_lookup" in trace.integrity.detail


def test_a_stopped_endpoint_is_an_error_and_exit_1(scenario: Path, ports: tuple[int, int], tmp_path: Path) -> None:
    agent = start_in_thread(agent_config(ports), port=0)
    agent.stop()
    res, [trace] = replay(scenario, agent.url, ports, tmp_path / "runs", "--out", str(tmp_path / "r.xml"))
    assert res.exit_code == 1
    assert re.search(r"^ERROR +\S+ +0/1 .* run 1: the agent at \S+ is unreachable", res.output, re.M), res.output
    assert trace.integrity.status == "ERROR" and trace.turns == []
    suite = next(iter(JUnitXml.fromfile(str(tmp_path / "r.xml"))))
    assert (suite.tests, suite.failures, suite.errors) == (1, 0, 1)
    [row] = [json.loads(line) for line in (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert row["verdict"] == "ERROR" and f"the agent at {agent.url} is unreachable" in row["detail"]
