"""`wt-otel run`: serving each scenario's universe, driving the agent, integrity verdicts, traces on disk.

The agents here are real MCP clients (the `mcp` SDK's `Client`) of the universe
the runner serves: `ScriptedAgent` in-process (python runtime) and
`McpEndpoint`, a stdlib Contract C endpoint (http_inject). A "bypass" agent
answers from its own dict instead, the way an agent wired to production tools
would, and must come out INVALID.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from mcp import Client

from tests.support.inject_endpoint import JsonEndpoint, Reply
from wt_otel.cli import main
from wt_otel.contracts.run import McpCall, ToolCall, Trace, Turn, load_trace
from wt_otel.replay.runner import ENV_LLM_BASE_URL, ENV_UNIVERSE_URL, RunOptions, Sweep, SweepRun, load_all
from wt_otel.replay.runtimes import HttpInjectRuntime, PythonRuntime
from wt_otel.replay.scenarios import NoScenarios, find_scenarios
from wt_otel.scoring.verdict import BYPASS, check_witness, run_integrity

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
UNIVERSE = {
    "windtunnel_universe": 1,
    "tools": [
        {"name": "lookup_order", "description": "Find an order by id.",
         "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
        {"name": "refund", "input_schema": {"type": "object"}},
    ],
    "recordings": [
        {"tool_name": "lookup_order", "args": {"order_id": "A-1"}, "result": {"status": "shipped"}},
        {"tool_name": "refund", "args": {"order_id": "A-1"}, "result": "refunded"},
    ],
}
CASSETTE = {
    "wt_cassette": 1, "scenario": "s", "latest_trace_id": TRACE_ID, "history_keys": [TRACE_ID],
    "traces": {TRACE_ID: {
        "trace_id": TRACE_ID,
        "request_context": {"model": "gpt-test", "messages": [{"role": "user", "content": "Where is A-1?"}]},
        "response_timeline": [{"delta_ms": 0, "chunk": "It shipped."}],
        "exception_boundary": {"occurred": False},
    }},
}
LIVE_TOOLS = {"lookup_order": {"status": "live production answer"}}


def write_scenario(root: Path, sid: str, turns: tuple[str, ...] = ("Where is A-1?",), runs: int = 1,
                   universe: Any = UNIVERSE, cassette: Any = None) -> Path:
    d = root / sid
    d.mkdir(parents=True)
    fixtures: dict[str, str] = {}
    if universe is not None:
        (d / "fixture.universe.json").write_text(universe if isinstance(universe, str) else json.dumps(universe))
        fixtures["universe"] = "fixture.universe.json"
    if cassette is not None:
        (d / "llm.cassette.json").write_text(json.dumps(cassette))
        fixtures["cassette"] = "llm.cassette.json"
    (d / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": sid, "user_turns": list(turns),
                                                     "fixtures": fixtures, "runs": runs}))
    return d


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _call_tools(url: str, calls: list[tuple[str, dict]]) -> list[Any]:
    async with Client(url) as client:
        return [(await client.call_tool(name, args)).structured_content for name, args in calls]


def mcp_turn(url: str, calls: list[tuple[str, dict]]) -> list[Any]:
    """Call the served universe over real MCP, as an agent's MCP client would."""
    return asyncio.run(_call_tools(url, calls))


class ScriptedAgent:
    """An in-process agent: each turn calls `lookup_order` through the universe at $WT_UNIVERSE_URL.

    bypass: answer from LIVE_TOOLS instead (never touching the universe);
    over_report: also report a `refund` call it never made;
    reset_error: the reset hook raises.
    """

    def __init__(self, *, bypass: bool = False, over_report: bool = False, reset_error: bool = False,
                 calls: list[tuple[str, dict]] | None = None) -> None:
        self.bypass, self.over_report, self.reset_error = bypass, over_report, reset_error
        self.calls = calls if calls is not None else [("lookup_order", {"order_id": "A-1"})]
        self.resets = 0
        self.sessions: list[str] = []
        self.memory: dict[str, list[str]] = {}

    def __call__(self, text: str, session_id: str) -> dict[str, Any]:
        self.sessions.append(session_id)
        self.memory.setdefault(session_id, []).append(text)
        if self.bypass:
            results = [LIVE_TOOLS.get(name) for name, _ in self.calls]
        else:
            results = mcp_turn(os.environ[ENV_UNIVERSE_URL], self.calls) if self.calls else []
        reported = list(self.calls) + ([("refund", {"order_id": "A-1"})] if self.over_report else [])
        return {"reply": f"turn {len(self.memory[session_id])}: {json.dumps(results)}",
                "tool_calls": [{"name": n, "arguments": a} for n, a in reported]}

    def reset(self) -> None:
        self.resets += 1
        if self.reset_error:
            raise RuntimeError("the memory store is read-only")
        self.memory.clear()


# module-level agents for `--runtime test_run:...` (importable: the repository root is on sys.path)
AGENT = ScriptedAgent()
AGENT_RUNTIME = f"python:{__name__}:AGENT"  # this module, importable from the repository root
BYPASS_AGENT = ScriptedAgent(bypass=True)


class McpEndpoint(JsonEndpoint):
    """A Contract C endpoint whose turns call the universe at `universe_url` over MCP."""

    def __init__(self, universe_url: str, *, bypass: bool = False, reset_status: int = 200) -> None:
        super().__init__()
        self.universe_url, self.bypass, self.reset_status = universe_url, bypass, reset_status
        self.resets = 0

    def handle(self, route: str, body: Any) -> Reply:
        if route == "/wt/reset":
            self.resets += 1
            return self.reset_status, {"wt_inject": 1}
        if route == "/wt/surface":
            return 200, {"wt_inject": 1, "surface": {"system_instructions": [], "tool_definitions": [],
                                                     "extra_segments": []}}
        if route == "/wt/inject":
            calls = [("lookup_order", {"order_id": "A-1"})]
            results = [LIVE_TOOLS["lookup_order"]] if self.bypass else mcp_turn(self.universe_url, calls)
            return 200, {"wt_inject": 1, "reply": json.dumps(results),
                         "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}
        return 404, {"error": "no route"}


def sweep(paths: list[Path], runtime: Any, tmp_path: Path, **kwargs: Any) -> SweepRun:
    kwargs.setdefault("universe_port", 0)
    kwargs.setdefault("llm_port", 0)
    options = RunOptions(runtime=runtime, runs_dir=tmp_path / "runs", emit=lambda line: None, **kwargs)
    return Sweep(options).run(load_all(find_scenarios(paths), options.llm))


def traces_on_disk(result: SweepRun) -> list[Trace]:
    return [load_trace(json.loads(p.read_text())) for s in result.scenarios for p in s.trace_paths]


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# ---------------------------------------------------------------- PASS paths


def test_python_runtime_pass_multiple_runs_one_session_per_run(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "orders", turns=("Where is A-1?", "And now?"), runs=3)
    agent = ScriptedAgent()
    result = sweep([tmp_path / "sc"], PythonRuntime(agent), tmp_path)
    assert result.exit_code == 0
    [scenario] = result.scenarios
    assert (scenario.status, len(scenario.traces)) == ("PASS", 3)
    assert agent.resets == 3  # the first run too
    assert len(set(agent.sessions)) == 3 and len(agent.sessions) == 6  # one session per run, all turns in it
    for n, trace in enumerate(traces_on_disk(result), 1):
        assert trace.run_index == n and trace.integrity.status == "PASS"
        assert trace.evidence.witness == "available" and trace.evidence.llm == "live"
        assert [t.reply.split(":")[0] for t in trace.turns] == ["turn 1", "turn 2"]  # memory reset between runs
        assert [(c.tool_name, c.match) for c in trace.mcp_calls] == [("lookup_order", "exact")] * 2
        assert trace.mcp_calls[0].result == {"status": "shipped"}
        assert trace.session_id == agent.sessions[2 * n - 1]
        assert trace.universe_url and trace.universe_url.endswith("/mcp")
        assert trace.timings.total_ms is not None and trace.timings.turns_ms is not None
        assert trace.surface is not None and trace.surface.status == "unavailable"
    assert scenario.trace_paths[0] == result.directory / "orders" / "run-1.trace.json"
    summary = json.loads((result.directory / "summary.json").read_text())
    assert summary["passed"] is True and summary["scenarios"][0]["traces"][2] == "orders/run-3.trace.json"


def test_http_inject_pass_with_the_universe_on_a_given_port(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    port = free_port()
    with McpEndpoint(f"http://127.0.0.1:{port}/mcp") as endpoint:
        result = sweep([tmp_path / "orders"], HttpInjectRuntime(endpoint.url, 10), tmp_path, universe_port=port)
    [trace] = traces_on_disk(result)
    assert result.exit_code == 0 and endpoint.resets == 1
    assert trace.integrity.status == "PASS" and trace.inject_url == endpoint.url
    assert trace.universe_url == f"http://127.0.0.1:{port}/mcp" and trace.surface.status == "reported"
    assert [c.tool_name for c in trace.mcp_calls] == ["lookup_order"]


def test_cli_pass_prints_urls_summary_and_traces_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_scenario(tmp_path / "sc", "b-second")
    write_scenario(tmp_path / "sc" / "nested", "a-first", runs=2)
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0", "--label", "ci-42")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any(line.startswith("a-first: universe at http://127.0.0.1:") for line in lines)
    summary = [line for line in lines if line.startswith("PASS")]
    assert [line.split()[1] for line in summary] == ["b-second", "a-first"]  # sorted by path: sc/b-second < sc/nested
    assert summary[1].split()[2] == "2/2"  # runs passed / runs
    assert lines[-1].startswith("2 pass; traces in runs/")
    traces = sorted((tmp_path / "runs").rglob("*.trace.json"))
    assert len(traces) == 3 and all(json.loads(p.read_text())["label"] == "ci-42" for p in traces)
    validated = cli("validate", "runs")
    assert validated.exit_code == 0 and validated.output.count("OK ") == 3


# ---------------------------------------------------------------- INVALID: the universe was bypassed


def test_agent_on_live_tools_is_invalid(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders", runs=2)
    result = sweep([tmp_path / "orders"], PythonRuntime(ScriptedAgent(bypass=True)), tmp_path)
    [scenario] = result.scenarios
    assert result.exit_code == 1 and scenario.status == "INVALID"
    assert BYPASS in scenario.detail and 'lookup_order({"order_id":"A-1"})' in scenario.detail
    for trace in traces_on_disk(result):
        assert trace.integrity.status == "INVALID" and trace.mcp_calls == []
        assert trace.evidence.witness == "unavailable"
        assert any("saw no MCP request" in w for w in trace.warnings)


def test_one_reported_call_more_than_witnessed_is_invalid(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    result = sweep([tmp_path / "orders"], PythonRuntime(ScriptedAgent(over_report=True)), tmp_path)
    [trace] = traces_on_disk(result)
    assert trace.integrity.status == "INVALID" and trace.evidence.witness == "available"
    assert 'refund({"order_id":"A-1"})' in trace.integrity.detail and "witnessed 1 call(s)" in trace.integrity.detail


def test_http_endpoint_on_live_tools_is_invalid_via_cli(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    with McpEndpoint("http://127.0.0.1:1/mcp", bypass=True) as endpoint:
        res = cli("run", str(tmp_path / "orders"), "--inject-url", endpoint.url, "--universe-port", "0",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1
    row = res.output.splitlines()[-2]
    assert row.split()[:3] == ["INVALID", "orders", "0/1"] and f"  run 1: {BYPASS}: reported" in row


def test_witness_check_is_a_multiset_and_tolerates_reshaped_arguments() -> None:
    def turn(*calls: tuple[str, dict]) -> Turn:
        return Turn(text="t", reply="r", latency_ms=1, tool_calls=[ToolCall(name=n, arguments=a) for n, a in calls])

    def seen(name: str, args: dict) -> McpCall:
        return McpCall(tool_name=name, args=args, match="exact")

    twice = [turn(("a", {"x": 1}), ("a", {"x": 1}))]
    assert check_witness(twice, [seen("a", {"x": 1})]).unwitnessed == ['a({"x":1})']
    assert check_witness(twice, [seen("a", {"x": 1})] * 2).unwitnessed == []
    reshaped = check_witness([turn(("a", {"x": 1}))], [seen("a", {"x": 1, "limit": 10})])
    assert (reshaped.unwitnessed, reshaped.args_differ) == ([], ['a({"x":1})'])
    integrity, warnings = run_integrity([turn(("a", {"x": 1}))], [seen("a", {"x": 1}), seen("b", {})])
    assert integrity.status == "PASS" and "did not report" in warnings[0] and "b({})" in warnings[0]
    integrity, _ = run_integrity(twice, [], error="reset failed: boom")
    assert integrity.status == "ERROR"  # ERROR wins: an unfinished run proves nothing


# ---------------------------------------------------------------- ERROR: it could not run


def test_endpoint_down_is_error_with_a_trace_and_exit_1(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders", runs=3)
    down = f"http://127.0.0.1:{free_port()}"
    res = cli("run", str(tmp_path / "orders"), "--inject-url", down, "--universe-port", "0",
              "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1
    line = next(line for line in res.output.splitlines() if line.startswith("ERROR"))
    # checked once, up front (issue 12): one short line naming the URL given, not a connection error per run
    assert line.split()[1:3] == ["orders", "0/1"] and f"the agent at {down} is unreachable" in line
    [path] = (tmp_path / "runs").rglob("*.trace.json")
    trace = load_trace(json.loads(path.read_text()))
    assert trace.integrity.status == "ERROR" and trace.turns == [] and trace.inject_url == down


def test_reset_failure_is_error_and_skips_later_runs(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders", runs=3)
    agent = ScriptedAgent(reset_error=True)
    result = sweep([tmp_path / "orders"], PythonRuntime(agent), tmp_path)
    [scenario] = result.scenarios
    assert scenario.status == "ERROR" and len(scenario.traces) == 1 and agent.sessions == []
    assert scenario.detail.startswith("run 1: reset failed:") and "read-only" in scenario.detail


def test_http_reset_500_is_error(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    with McpEndpoint("http://127.0.0.1:1/mcp", reset_status=500) as endpoint:
        result = sweep([tmp_path / "orders"], HttpInjectRuntime(endpoint.url, 10), tmp_path)
    [trace] = traces_on_disk(result)
    assert trace.integrity.status == "ERROR" and "HTTP 500" in trace.integrity.detail


def test_inject_contract_violation_mid_scenario_is_error(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders", turns=("one", "two"))
    calls = iter([{"reply": "fine", "tool_calls": []}, {"reply": "no tool_calls key"}])

    def agent(text: str, session_id: str) -> Any:
        return next(calls)

    agent.reset = lambda: None  # type: ignore[attr-defined]
    [trace] = traces_on_disk(sweep([tmp_path / "orders"], PythonRuntime(agent), tmp_path))
    assert trace.integrity.status == "ERROR" and trace.integrity.detail.startswith("turn 2 of 2:")
    assert [t.reply for t in trace.turns] == ["fine"]  # what happened before the failure is kept


def test_agent_level_error_is_recorded_not_an_error(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")

    def agent(text: str, session_id: str) -> Any:
        return {"reply": "", "tool_calls": [], "error": "model timed out"}

    agent.reset = lambda: None  # type: ignore[attr-defined]
    [trace] = traces_on_disk(sweep([tmp_path / "orders"], PythonRuntime(agent), tmp_path))
    assert trace.integrity.status == "PASS" and trace.turns[0].error == "model timed out"


def test_bad_fixtures_are_errors_and_the_others_still_run(tmp_path: Path) -> None:
    write_scenario(tmp_path, "a-good")
    write_scenario(tmp_path, "b-bad-universe", universe="{not json")
    (tmp_path / "c-bad-yaml").mkdir()
    (tmp_path / "c-bad-yaml" / "scenario.yaml").write_text("wt_scenario: 1\nid: Not A Slug\nuser_turns: []\n")
    write_scenario(tmp_path, "d-good")
    result = sweep([tmp_path], PythonRuntime(ScriptedAgent()), tmp_path)
    assert [(s.id, s.status) for s in result.scenarios] == [
        ("a-good", "PASS"), ("b-bad-universe", "ERROR"), ("c-bad-yaml", "ERROR"), ("d-good", "PASS")]
    bad = result.scenarios[1]
    assert "bad fixture:" in bad.detail and "fixture.universe.json" in bad.detail
    assert "id must be a slug" in result.scenarios[2].detail
    assert len(traces_on_disk(result)) == 4  # an ERROR never vanishes: it has its trace
    assert result.stopped is None and result.exit_code == 1


def test_port_in_use_is_error(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = sweep([tmp_path / "orders"], PythonRuntime(ScriptedAgent()), tmp_path, universe_port=port)
    [scenario] = result.scenarios
    assert scenario.status == "ERROR" and "cannot serve" in scenario.detail and str(port) in scenario.detail


def test_circuit_breaker_after_three_consecutive_errors(tmp_path: Path) -> None:
    for sid in ("s1", "s2", "s3", "s4", "s5"):
        write_scenario(tmp_path / "sc", sid)
    with McpEndpoint("http://127.0.0.1:1/mcp", reset_status=500) as endpoint:  # reachable, and every reset fails
        res = cli("run", str(tmp_path / "sc"), "--inject-url", endpoint.url,
                  "--universe-port", "0", "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1
    rows = [line for line in res.output.splitlines() if line.startswith("ERROR")]
    assert [row.split()[1] for row in rows] == ["s1", "s2", "s3", "s4", "s5"]  # the not-run ones never vanish
    assert ["not run: circuit breaker" in row for row in rows] == [False] * 3 + [True] * 2
    assert "circuit breaker: 3 consecutive scenarios errored" in res.output
    assert "2 scenario(s) not run" in res.output
    assert len(list((tmp_path / "runs").rglob("*.trace.json"))) == 3
    [summary] = (tmp_path / "runs").rglob("summary.json")
    data = json.loads(summary.read_text())
    assert [s["verdict"] for s in data["scenarios"]] == ["ERROR"] * 3 + ["NOT RUN"] * 2
    assert data["stopped"].startswith("circuit breaker")


def test_a_pass_resets_the_breaker(tmp_path: Path) -> None:
    for sid, universe in (("s1", "{"), ("s2", "{"), ("s3", UNIVERSE), ("s4", "{"), ("s5", "{")):
        write_scenario(tmp_path, sid, universe=universe)
    result = sweep([tmp_path], PythonRuntime(ScriptedAgent()), tmp_path)
    assert [s.status for s in result.scenarios] == ["ERROR", "ERROR", "PASS", "ERROR", "ERROR"]
    assert result.stopped is None


# ---------------------------------------------------------------- the LLM cassette


def _chat(base_url: str, content: str) -> int:
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": content}]}
    req = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def llm_agent(text: str, session_id: str) -> Any:
    status = _chat(os.environ[ENV_LLM_BASE_URL], text)
    return {"reply": f"model answered {status}", "tool_calls": []}


llm_agent.reset = lambda: None  # type: ignore[attr-defined]


def test_llm_replay_records_hits_and_divergence_without_failing_integrity(tmp_path: Path) -> None:
    write_scenario(tmp_path, "hit", turns=("Where is A-1?",), cassette=CASSETTE)
    write_scenario(tmp_path, "miss", turns=("Something else",), cassette=CASSETTE)
    result = sweep([tmp_path], PythonRuntime(llm_agent), tmp_path, llm="replay")
    hit, miss = traces_on_disk(result)
    assert hit.turns[0].reply == "model answered 200" and hit.evidence.llm == "replay"
    assert [(c.match, c.recorded_index) for c in hit.llm_calls] == [("exact", 0)]
    assert hit.llm_url and hit.llm_url.endswith("/v1")
    assert [c.match for c in miss.llm_calls] == ["miss"] and miss.llm_calls[0].event == "llm_divergence"
    assert miss.integrity.status == "PASS"  # integrity alone: divergence is recorded, scored later
    assert any(w.startswith("llm divergence: 1 model request(s)") for w in miss.warnings)
    assert result.scenarios[1].note == "divergence: 1 LLM miss(es)"
    assert os.environ.get(ENV_LLM_BASE_URL) is None  # only set while a scenario runs


def test_llm_replay_without_a_cassette_is_a_bad_fixture(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    result = sweep([tmp_path / "orders"], PythonRuntime(ScriptedAgent()), tmp_path, llm="replay")
    assert result.scenarios[0].status == "ERROR" and "names no fixtures.cassette" in result.scenarios[0].detail


def test_universe_divergence_is_noted_on_a_pass(tmp_path: Path) -> None:
    write_scenario(tmp_path, "orders")
    agent = ScriptedAgent(calls=[("lookup_order", {"order_id": "Z-9"})])
    result = sweep([tmp_path / "orders"], PythonRuntime(agent), tmp_path)
    [trace] = traces_on_disk(result)
    assert trace.integrity.status == "PASS" and trace.mcp_calls[0].match == "fail_call"
    assert result.scenarios[0].note == "divergence: 1 universe miss(es)"


# ---------------------------------------------------------------- selection and usage


def test_scenario_selection(tmp_path: Path) -> None:
    write_scenario(tmp_path / "pack", "b")
    write_scenario(tmp_path / "pack" / "deeper", "a")
    write_scenario(tmp_path / "pack" / ".hidden", "c")
    found = find_scenarios([tmp_path / "pack"])
    assert [p.name for p in found] == ["b", "a"]
    assert find_scenarios([tmp_path / "pack" / "b" / "scenario.yaml", tmp_path / "pack"]) == [
        tmp_path / "pack" / "b", tmp_path / "pack" / "deeper" / "a"]  # each once, in the order given
    with pytest.raises(NoScenarios):
        find_scenarios([tmp_path / "nope"])


def test_scenarios_with_the_same_id_get_separate_folders(tmp_path: Path) -> None:
    write_scenario(tmp_path / "x", "same")
    write_scenario(tmp_path / "y", "same")
    result = sweep([tmp_path], PythonRuntime(ScriptedAgent()), tmp_path)
    assert [p.parent.name for s in result.scenarios for p in s.trace_paths] == ["same", "same-2"]


@pytest.mark.parametrize("args", [
    ["run", "{tmp}/empty"],
    ["run", "{tmp}/missing"],
    ["run", "{tmp}/sc", "--runtime", "nonsense"],
    ["run", "{tmp}/sc", "--runtime", "python:no_such_module_here:agent"],
    ["run", "{tmp}/sc", "--runtime", AGENT_RUNTIME, "--inject-url", "http://127.0.0.1:1"],
    ["run", "{tmp}/sc", "--runs", "0"],
    ["run", "{tmp}/sc", "--llm", "cached"],
])
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    write_scenario(tmp_path, "sc")
    res = CliRunner().invoke(main, [a.format(tmp=tmp_path) for a in args])
    assert res.exit_code == 2, res.output
    assert not (tmp_path / "runs").exists()  # refused before anything ran
