"""The universe served over real MCP (streamable HTTP): the `mcp` SDK client, the OpenAI Agents SDK's
MCP client, the call log over HTTP, and `wt-otel universe serve`."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse

OBJ = {"type": "object"}
UNIVERSE = {
    "windtunnel_universe": 1,
    "tools": [
        {"name": "client_lookup", "description": "Look up a client.",
         "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
         "result_schema": {"type": "object", "properties": {"name": {"type": "string"}}}},
        {"name": "search", "input_schema": {"properties": {"q": {"type": "string"}}},
         "result_schema": {"type": "array"}},
        {"name": "capital", "description": "Capital of a country.", "input_schema": OBJ},
        {"name": "count", "input_schema": OBJ},
        {"name": "flaky", "input_schema": OBJ},
        {"name": "audit", "input_schema": OBJ},
    ],
    "recordings": [
        {"tool_name": "client_lookup", "args": {"query": "Bluewing"}, "result": {"name": "Bluewing", "tier": 2}},
        {"tool_name": "search", "args": {"q": "x"}, "result": [{"id": 1}, {"id": 2}]},
        {"tool_name": "capital", "args": {"country": "France"}, "result": "Paris"},
        {"tool_name": "count", "args": {}, "result": 42},
        {"tool_name": "flaky", "args": {}, "result": "upstream timed out", "error": True},
        {"tool_name": "audit", "args": {}, "result": {"error": "none found", "ok": True}},
    ],
    "matching": {"on_miss": "fail_call", "arg_keys": {"client_lookup": ["query"]},
                 "per_tool_on_miss": {"search": "empty"}},
}


@pytest.fixture
def server() -> Iterator[UniverseMCPServer]:
    srv = UniverseMCPServer(RecordedUniverse(load_universe(UNIVERSE)), port=0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def http_json(url: str, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


async def call_all(url: str, mode: str, calls: list[tuple[str, dict]]) -> tuple[Any, list[Any]]:
    async with Client(url, mode=mode) as client:
        listed = await client.list_tools()
        return listed, [await client.call_tool(name, args) for name, args in calls]


# ---------------------------------------------------------------- mcp SDK client


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # initialize handshake era, and the 2026 discover era
def test_tools_list_serves_schemas_and_output_schema_only_for_objects(server: UniverseMCPServer, mode: str) -> None:
    listed, _ = run(call_all(server.url, mode, []))
    tools = {t.name: t for t in listed.tools}
    assert list(tools) == [t["name"] for t in UNIVERSE["tools"]]
    assert tools["client_lookup"].description == "Look up a client."
    assert tools["client_lookup"].input_schema == UNIVERSE["tools"][0]["input_schema"]
    assert tools["client_lookup"].output_schema == UNIVERSE["tools"][0]["result_schema"]
    assert tools["search"].input_schema == {"type": "object", "properties": {"q": {"type": "string"}}}  # type added
    assert tools["search"].output_schema is None  # array result schema: no outputSchema
    assert tools["capital"].output_schema is None


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_tools_call_structured_content_for_every_result_type(server: UniverseMCPServer, mode: str) -> None:
    _, (obj, keyed, arr, text, num) = run(call_all(server.url, mode, [
        ("client_lookup", {"query": "Bluewing"}),
        ("client_lookup", {"query": "Bluewing", "verbose": True}),
        ("search", {"q": "x"}),
        ("capital", {"country": "France"}),
        ("count", {}),
    ]))
    assert obj.structured_content == {"name": "Bluewing", "tier": 2} and not obj.is_error
    assert json.loads(obj.content[0].text) == {"name": "Bluewing", "tier": 2}
    assert keyed.structured_content == obj.structured_content
    assert arr.structured_content == {"result": [{"id": 1}, {"id": 2}]}
    assert json.loads(arr.content[0].text) == [{"id": 1}, {"id": 2}]
    assert text.structured_content == {"result": "Paris"}
    assert text.content[0].text == "Paris"  # unquoted
    assert num.structured_content == {"result": 42} and num.content[0].text == "42"
    assert not any(r.is_error for r in (keyed, arr, text, num))


def test_is_error_exactly_for_fail_call_and_recorded_errors(server: UniverseMCPServer) -> None:
    _, (miss, recorded, data_error, empty) = run(call_all(server.url, "legacy", [
        ("capital", {"country": "Spain"}),
        ("flaky", {}),
        ("audit", {}),
        ("search", {"q": "nothing"}),
    ]))
    assert miss.is_error
    assert miss.structured_content == {"error": "no_recorded_result", "tool": "capital", "args": {"country": "Spain"}}
    assert recorded.is_error and recorded.content[0].text == "upstream timed out"
    assert not data_error.is_error and data_error.structured_content == {"error": "none found", "ok": True}
    assert not empty.is_error and empty.structured_content == {"result": []}  # an `empty` miss is no error


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_repeated_hits_answer_alike_and_a_perturbation_still_wins(server: UniverseMCPServer, mode: str) -> None:
    """A recording's wire answer is built once and reused: repeats get the same answer, and a robustness run
    that perturbs the tool gets its perturbed answer, not the one built for the recording."""
    hit = ("client_lookup", {"query": "Bluewing"})
    _, (first, again) = run(call_all(server.url, mode, [hit, hit]))
    assert first.model_dump() == again.model_dump() and first.structured_content == {"name": "Bluewing", "tier": 2}
    server.engine.perturbation = Perturbation(kind="error", tool="client_lookup", message="down")
    _, (perturbed,) = run(call_all(server.url, mode, [hit]))
    assert perturbed.is_error and perturbed.structured_content == {"error": "down", "tool": "client_lookup"}
    server.engine.perturbation = None
    _, (after,) = run(call_all(server.url, mode, [hit]))
    assert after.model_dump() == first.model_dump()
    assert [c["match"] for c in server.call_log()] == ["exact"] * 4


def test_call_log_in_process_and_over_http(server: UniverseMCPServer) -> None:
    run(call_all(server.url, "auto", [("capital", {"country": "France"}), ("capital", {"country": "Spain"}),
                                      ("client_lookup", {"query": "Bluewing", "x": 1})]))
    base = server.url.removesuffix("/mcp")
    over_http = http_json(f"{base}/wt/calls")
    assert over_http["count"] == 3 and over_http["calls"] == server.call_log()
    assert [c["match"] for c in over_http["calls"]] == ["exact", "fail_call", "keyed"]
    assert over_http["calls"][1]["extra"]["divergence"] == {"policy": "fail_call", "matched": None}
    assert http_json(f"{base}/wt/reset-calls", "POST") == {"reset": True}
    assert http_json(f"{base}/wt/calls") == {"calls": [], "count": 0}


def test_restart_and_port_in_use() -> None:
    srv = UniverseMCPServer(RecordedUniverse(load_universe(UNIVERSE)), port=0)
    url = srv.start()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    clash = UniverseMCPServer(RecordedUniverse(load_universe(UNIVERSE)), port=port)
    with pytest.raises(OSError, match="in use"):
        clash.start(timeout=5)
    srv.stop()
    with srv:  # a stopped server starts again
        _, (r,) = run(call_all(srv.url, "legacy", [("count", {})]))
        assert r.structured_content == {"result": 42}


def test_sse_responses_work_too() -> None:
    """JSON bodies are the default; the SSE flavour of streamable HTTP answers the same."""
    with UniverseMCPServer(RecordedUniverse(load_universe(UNIVERSE)), port=0, json_response=False) as srv:
        for mode in ("legacy", "auto"):
            _, (r,) = run(call_all(srv.url, mode, [("capital", {"country": "France"})]))
            assert r.content[0].text == "Paris" and r.structured_content == {"result": "Paris"}


def test_no_nagle_stall(server: UniverseMCPServer) -> None:
    """Responses must not wait ~40 ms on Nagle + delayed ACK (a socket bound without proto=TCP does)."""
    conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1].split("/")[0]), timeout=10)
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        conn.request("GET", "/wt/calls")
        conn.getresponse().read()
        times.append(time.perf_counter() - t0)
    conn.close()
    assert sorted(times)[len(times) // 2] < 0.025


# ---------------------------------------------------------------- a real agent framework's MCP client


def test_openai_agents_sdk_mcp_client_lists_and_calls(server: UniverseMCPServer) -> None:
    pytest.importorskip("agents", reason="openai-agents is a test dependency")
    from agents import RunContextWrapper
    from agents.mcp import MCPServerStreamableHttp, MCPUtil

    async def go() -> tuple[list, Any, Any, Any]:
        async with MCPServerStreamableHttp(params={"url": server.url}, name="universe") as mcp_server:
            tools = {t.name: t for t in await mcp_server.list_tools()}
            raw = await mcp_server.call_tool("client_lookup", {"query": "Bluewing"})
            ctx = RunContextWrapper(context=None)
            text = await MCPUtil.invoke_mcp_tool(mcp_server, tools["capital"], ctx, '{"country": "France"}')
            miss = await mcp_server.call_tool("capital", {"country": "Atlantis"})
            return list(tools), raw, text, miss

    names, raw, text, miss = run(go())
    assert names == [t["name"] for t in UNIVERSE["tools"]]
    assert raw.structured_content == {"name": "Bluewing", "tier": 2} and not raw.is_error
    assert "Paris" in str(text) and '"Paris"' not in str(text)
    assert miss.is_error
    assert [c["match"] for c in server.call_log()] == ["exact", "exact", "fail_call"]


# ---------------------------------------------------------------- wt-otel universe serve


def test_cli_serve_prints_url_and_each_call(tmp_path: Path) -> None:
    path = tmp_path / "fixture.universe.json"
    path.write_text(json.dumps(UNIVERSE))
    proc = subprocess.Popen(
        [sys.executable, "-m", "wt_otel.cli", "universe", "serve", str(path), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        first = proc.stdout.readline()
        assert "serving 6 tool(s), 6 recording(s) at http://127.0.0.1:" in first
        url = first.split(" at ")[1].split()[0]
        run(call_all(url, "legacy", [("capital", {"country": "France"}), ("capital", {"country": "Spain"})]))
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines[0].startswith("exact") and 'capital({"country": "France"})' in lines[0]
        assert lines[1].startswith("fail_call") and lines[1].endswith("ERROR DIVERGENCE")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    assert proc.returncode == 0, proc.stderr.read()


def test_cli_serve_rejects_an_invalid_universe(tmp_path: Path) -> None:
    path = tmp_path / "bad.universe.json"
    path.write_text(json.dumps({**UNIVERSE, "recordings": [{"tool_name": "nope", "args": {}}]}))
    proc = subprocess.run([sys.executable, "-m", "wt_otel.cli", "universe", "serve", str(path), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "recordings[0].tool_name" in proc.stderr


# ---------------------------------------------------------------- stdio: the transport most MCP client configs name


def test_cli_serve_stdio_answers_as_http_does_and_writes_the_call_log(tmp_path: Path,
                                                                     server: UniverseMCPServer) -> None:
    """An MCP client that launches its server as a command (the SDK's stdio client) gets the same tools and
    answers as over HTTP; stdout carries only the protocol (the lines go to stderr); the call log is written
    when the client closes stdin."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    path, calls_out, errlog = tmp_path / "fixture.universe.json", tmp_path / "calls.json", tmp_path / "stderr.txt"
    path.write_text(json.dumps(UNIVERSE))
    calls = [("client_lookup", {"query": "Bluewing"}), ("search", {"q": "x"}), ("capital", {"country": "Spain"})]
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "wt_otel.cli", "universe", "serve", str(path), "--stdio", "--calls-out", str(calls_out)])

    async def over_stdio() -> tuple[Any, list[Any]]:
        with errlog.open("w") as err:
            async with Client(stdio_client(params, errlog=err), mode="legacy") as client:
                return await client.list_tools(), [await client.call_tool(n, a) for n, a in calls]

    listed, answers = run(over_stdio())
    http_listed, http_answers = run(call_all(server.url, "legacy", calls))
    assert [t.model_dump() for t in listed.tools] == [t.model_dump() for t in http_listed.tools]
    assert [a.model_dump() for a in answers] == [a.model_dump() for a in http_answers]
    deadline = time.monotonic() + 15
    while not calls_out.exists() and time.monotonic() < deadline:  # the server writes it as it exits
        time.sleep(0.05)
    log = json.loads(calls_out.read_text())
    assert log["count"] == 3 and [c["match"] for c in log["calls"]] == ["exact", "exact", "fail_call"]
    said = errlog.read_text()
    assert "serving 6 tool(s), 6 recording(s) on stdin/stdout" in said
    assert 'fail_call  capital({"country": "Spain"}) ERROR DIVERGENCE' in said


def test_cli_serve_writes_the_call_log_on_sigterm_and_refuses_a_missing_folder(tmp_path: Path) -> None:
    path, calls_out = tmp_path / "fixture.universe.json", tmp_path / "calls.json"
    path.write_text(json.dumps(UNIVERSE))
    missing = subprocess.run([sys.executable, "-m", "wt_otel.cli", "universe", "serve", str(path), "--port", "0",
                              "--calls-out", str(tmp_path / "nope" / "calls.json")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "its folder does not exist" in missing.stderr
    proc = subprocess.Popen(
        [sys.executable, "-m", "wt_otel.cli", "universe", "serve", str(path), "--port", "0", "--calls-out",
         str(calls_out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = proc.stdout.readline().split(" at ")[1].split()[0]
        run(call_all(url, "legacy", [("capital", {"country": "France"})]))
    finally:
        proc.send_signal(signal.SIGTERM)  # how a process manager (or an MCP client) stops it
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "wrote 1 call(s)" in out
    assert [c["args"] for c in json.loads(calls_out.read_text())["calls"]] == [{"country": "France"}]


def test_cli_serve_stdio_stopped_with_sigterm_exits_cleanly_and_writes_the_call_log(tmp_path: Path) -> None:
    """An MCP client may stop its server with SIGTERM instead of closing stdin: serve ends as on Ctrl-C."""
    path, calls_out = tmp_path / "fixture.universe.json", tmp_path / "calls.json"
    path.write_text(json.dumps(UNIVERSE))
    proc = subprocess.Popen(
        [sys.executable, "-m", "wt_otel.cli", "universe", "serve", str(path), "--stdio", "--calls-out", str(calls_out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert "on stdin/stdout" in proc.stderr.readline()  # stdin stays open: only the signal can end it
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert out == ""  # stdout is the protocol's: nothing else was written there
    assert json.loads(calls_out.read_text()) == {"calls": [], "count": 0}
