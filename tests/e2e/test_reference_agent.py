"""The reference agent (examples/agent): Contract C on the OpenAI Agents SDK, driven over real HTTP.

Its tools are a recorded universe served over real MCP (`UniverseMCPServer`) and its model is the scripted
OpenAI-compatible fake from the producer fixtures (one `client_lookup` call, then text; the second user turn
of a conversation is answered "You asked: ..."), recording every chat request so memory is asserted on what
the model was actually sent. The agent runs in a thread for the wire tests; the telemetry test runs it as
`python -m examples.agent` in a subprocess, because the GenAI instrumentations patch `openai` and the Agents
SDK process-wide and must not leak into the rest of the suite.
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
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from examples.agent import AgentConfig, start_in_thread  # noqa: E402
from examples.agent.reference import parse_arguments  # noqa: E402
from tests.support.paths import ROOT
from tests.support.producers import FIRST_ANSWER, Handler
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse

LOOKUP = {"query": "Bluewing"}
RECORDED = {"name": "Bluewing", "email": "ops@bluewing.example"}
UNIVERSE = {
    "windtunnel_universe": 1,
    "tools": [
        {"name": "client_lookup", "description": "Look up a client record by name.",
         "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
    ],
    "recordings": [{"tool_name": "client_lookup", "args": LOOKUP, "result": RECORDED}],
}
INSTRUCTIONS = "You are the CRM assistant for tests. Answer from client_lookup only."


# --------------------------------------------------------------------------- the boundaries


class RecordingHandler(Handler):
    """The scripted fake LLM, keeping every chat request; it can stall the answer to a turn's tool result."""

    def _chat(self, body: dict) -> None:
        self.server.requests.append(body)
        roles = [m.get("role") for m in body.get("messages", [])]
        if self.server.stall_after_tool_s and roles[-1] == "tool":
            time.sleep(self.server.stall_after_tool_s)
        super()._chat(body)


class FakeLLM:
    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), RecordingHandler)
        self.httpd.requests, self.httpd.stall_after_tool_s = [], 0.0
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def requests(self) -> list[dict]:
        return self.httpd.requests

    def user_texts(self, request: dict) -> list[str]:
        return [m["content"] for m in request["messages"] if m["role"] == "user"]


@pytest.fixture(scope="module")
def universe() -> Iterator[UniverseMCPServer]:
    with UniverseMCPServer(RecordedUniverse(load_universe(UNIVERSE)), port=0) as server:
        yield server


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    fake = FakeLLM()
    threading.Thread(target=fake.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield fake
    fake.httpd.shutdown()


@pytest.fixture(scope="module")
def shared_agent(universe: UniverseMCPServer, llm: FakeLLM) -> Iterator[str]:
    config = AgentConfig(mcp_url=universe.url, openai_base_url=llm.base_url, instructions=INSTRUCTIONS)
    with start_in_thread(config, port=0) as server:
        yield server.url


@pytest.fixture
def agent(shared_agent: str, universe: UniverseMCPServer, llm: FakeLLM) -> str:
    """The module's agent with every boundary wiped: agent memory (through /wt/reset), call log, requests."""
    assert post(shared_agent, "/wt/reset", {"wt_inject": 1}) == (200, {"wt_inject": 1})
    universe.reset()
    llm.requests.clear()
    llm.httpd.stall_after_tool_s = 0.0
    return shared_agent


def post(base: str, path: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def inject(base: str, session_id: str, text: str, timeout_s: float = 20, **extra: Any) -> dict:
    status, body = post(base, "/wt/inject",
                         {"wt_inject": 1, "session_id": session_id, "text": text, "timeout_s": timeout_s, **extra})
    assert status == 200, body
    assert body["wt_inject"] == 1 and "tool_calls" in body and isinstance(body["reply"], str)
    return body


# --------------------------------------------------------------------------- the wire


def test_inject_returns_reply_and_object_arguments_the_universe_witnessed(agent: str, universe: UniverseMCPServer):
    body = inject(agent, "s-1", "What is the email on file for Bluewing?")
    assert body.pop("model") == "gpt-4o-mini"  # additive: the model that answered, for the driver's ledger
    assert body == {"wt_inject": 1, "reply": FIRST_ANSWER, "tool_calls": [{"name": "client_lookup",
                                                                            "arguments": LOOKUP}]}
    [call] = universe.call_log()
    assert (call["tool_name"], call["args"], call["match"]) == ("client_lookup", LOOKUP, "exact")


def test_memory_is_per_session_and_reset_wipes_it(agent: str, llm: FakeLLM):
    inject(agent, "s-1", "first question")
    second = inject(agent, "s-1", "second question")
    assert second["reply"].startswith('You asked: "second question"')  # the model saw two user turns
    assert llm.user_texts(llm.requests[-1]) == ["first question", "second question"]
    tool_results = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [json.loads(m["content"]) for m in tool_results] == [RECORDED, RECORDED]  # the result as it was served

    inject(agent, "s-2", "another conversation")  # a new session id is a fresh session
    assert llm.user_texts(llm.requests[-1]) == ["another conversation"]

    assert post(agent, "/wt/reset", {"wt_inject": 1}) == (200, {"wt_inject": 1})
    assert post(agent, "/wt/reset", {"wt_inject": 1}) == (200, {"wt_inject": 1})  # idempotent
    after = inject(agent, "s-1", "after reset")
    assert llm.user_texts(llm.requests[-1]) == ["after reset"]
    assert after["reply"] == FIRST_ANSWER


def test_surface_reports_instructions_and_mcp_tools(agent: str):
    status, body = post(agent, "/wt/surface", {"wt_inject": 1})
    assert status == 200
    tool = UNIVERSE["tools"][0]
    assert body.pop("model") == "gpt-4o-mini"  # additive, for surface goldens
    assert body == {"wt_inject": 1, "surface": {
        "system_instructions": [{"type": "text", "content": INSTRUCTIONS}],
        "tool_definitions": [{"name": tool["name"], "description": tool["description"],
                              "input_schema": tool["input_schema"]}],
        "extra_segments": [],
    }}


def test_without_tools_every_key_is_still_present(llm: FakeLLM):
    with start_in_thread(AgentConfig(mcp_url=None, openai_base_url=llm.base_url, instructions=""), port=0) as srv:
        assert post(srv.url, "/wt/surface", {"wt_inject": 1}) == (200, {"wt_inject": 1, "surface": {
            "system_instructions": [], "tool_definitions": [], "extra_segments": []}, "model": "gpt-4o-mini"})
        assert {k: v for k, v in inject(srv.url, "s-1", "hello").items() if k != "model"} == {
            "wt_inject": 1, "reply": FIRST_ANSWER, "tool_calls": []}


def test_a_reset_naming_replay_urls_points_the_agent_there_until_a_reset_names_none(universe: UniverseMCPServer,
                                                                                    llm: FakeLLM):
    """`wt-otel run` serves each scenario on free ports and names them in /wt/reset: the agent, configured with
    no reachable tools or model, follows them; a reset naming none brings its configuration back."""
    dead = f"http://127.0.0.1:{_closed_port()}"
    config = AgentConfig(mcp_url=f"{dead}/mcp", openai_base_url=f"{dead}/v1", instructions=INSTRUCTIONS)
    with start_in_thread(config, port=0) as srv:
        assert post(srv.url, "/wt/reset", {"wt_inject": 1, "universe_url": universe.url,
                                           "llm_base_url": llm.base_url}) == (200, {"wt_inject": 1})
        universe.reset()
        body = inject(srv.url, "s-1", "What is the email on file for Bluewing?")
        assert "error" not in body, body
        assert body["tool_calls"] == [{"name": "client_lookup", "arguments": LOOKUP}]
        assert [c["tool_name"] for c in universe.call_log()] == ["client_lookup"]
        assert post(srv.url, "/wt/reset", {"wt_inject": 1}) == (200, {"wt_inject": 1})
        status, answer = post(srv.url, "/wt/surface", {"wt_inject": 1})
        assert status == 503 and f"{dead}/mcp" in answer["error"]  # back on the configured (dead) tools
        assert post(srv.url, "/wt/reset", {"wt_inject": 1, "universe_url": "localhost:1"})[0] == 400


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("route", "body", "message"), [
    ("/wt/inject", {"wt_inject": 2, "session_id": "s", "text": "t", "timeout_s": 5}, "unsupported protocol version 2"),
    ("/wt/inject", {"wt_inject": "1", "session_id": "s", "text": "t", "timeout_s": 5}, "wt_inject: required integer"),
    ("/wt/inject", {"session_id": "s", "text": "t", "timeout_s": 5}, "wt_inject: required integer"),
    ("/wt/inject", {"wt_inject": 1, "text": "t", "timeout_s": 5}, "session_id: required"),
    ("/wt/inject", {"wt_inject": 1, "session_id": "s", "timeout_s": 5}, "text: required"),
    ("/wt/inject", {"wt_inject": 1, "session_id": "s", "text": "t"}, "timeout_s: required"),
    ("/wt/inject", {"wt_inject": 1, "session_id": "s", "text": "t", "timeout_s": True}, "timeout_s: required"),
    ("/wt/inject", {"wt_inject": 1, "session_id": "s", "text": "t", "timeout_s": 0}, "timeout_s: required"),
    ("/wt/inject", b"{not json", "not JSON"),
    ("/wt/inject", [1], "must be a JSON object"),
    ("/wt/reset", {"wt_inject": 2}, "unsupported protocol version 2"),
    ("/wt/surface", {}, "wt_inject: required integer"),
])
def test_contract_level_problems_are_400_with_a_message(agent: str, route: str, body: Any, message: str):
    status, answer = post(agent, route, body)
    assert status == 400 and message in answer["error"]


def test_unknown_request_fields_are_ignored(agent: str):
    assert inject(agent, "s-1", "hi", future_field={"x": 1}, wt_incident="INC-7")["reply"] == FIRST_ANSWER


def test_own_deadline_becomes_an_error_envelope_listing_the_calls_made(agent: str, llm: FakeLLM):
    llm.httpd.stall_after_tool_s = 3.0  # the tool ran; the model's answer to its result never comes in time
    started = time.monotonic()
    body = inject(agent, "s-1", "What is the email on file for Bluewing?", timeout_s=0.8)
    assert time.monotonic() - started < 2.5  # well inside the driver's 5 s grace
    assert body["reply"] == "" and "timed out after timeout_s=0.8" in body["error"]
    assert body["tool_calls"] == [{"name": "client_lookup", "arguments": LOOKUP}]


def test_reset_cancels_a_turn_in_flight_before_answering(agent: str, llm: FakeLLM):
    """Synchronous means no turn can write its history back after the wipe."""
    inject(agent, "s-1", "remember this")
    llm.httpd.stall_after_tool_s = 3.0
    answers: list[dict] = []
    worker = threading.Thread(target=lambda: answers.append(inject(agent, "s-1", "slow question")))
    worker.start()
    deadline = time.monotonic() + 10
    while len(llm.requests) < 4 and time.monotonic() < deadline:  # 2 for the first turn, then tool call, stall
        time.sleep(0.02)
    assert post(agent, "/wt/reset", {"wt_inject": 1}) == (200, {"wt_inject": 1})
    worker.join(10)
    assert answers[0]["error"] == "the turn was cancelled by /wt/reset"
    assert answers[0]["tool_calls"] == [{"name": "client_lookup", "arguments": LOOKUP}]
    llm.httpd.stall_after_tool_s = 0.0
    inject(agent, "s-1", "fresh start")
    assert llm.user_texts(llm.requests[-1]) == ["fresh start"]


def test_tiny_deadline_still_answers_with_tool_calls_present(agent: str):
    body = inject(agent, "s-1", "hi", timeout_s=0.001)
    assert body["tool_calls"] == [] and body["reply"] == "" and body["error"]


def test_model_failure_is_an_agent_level_error(universe: UniverseMCPServer):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    with start_in_thread(AgentConfig(mcp_url=universe.url, openai_base_url=dead), port=0) as srv:
        body = inject(srv.url, "s-1", "hello")
    assert body["reply"] == "" and body["tool_calls"] == [] and "APIConnectionError" in body["error"]


def test_arguments_are_objects_never_blanked():
    assert parse_arguments('{"query": "Bluewing"}') == LOOKUP
    assert parse_arguments("") == {} and parse_arguments(None) == {}
    assert parse_arguments('{"query": ') == {"_unparsed_arguments": '{"query": '}  # undecodable stays visible
    assert parse_arguments("[1, 2]") == {"_unparsed_arguments": "[1, 2]"}


def test_config_from_env():
    config = AgentConfig.from_env({"WT_AGENT_MCP_URL": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/",
                                   "WT_AGENT_INSTRUCTIONS": "Be brief."})
    assert config.mcp_url is None and config.otlp_endpoint == "http://c:4318/v1/traces"
    assert config.instructions == "Be brief." and config.model == "gpt-4o-mini"
    grpc = AgentConfig.from_env({"WT_AGENT_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert grpc.mcp_url == "http://127.0.0.1:8648/mcp" and grpc.otlp_endpoint == "http://c:4317"
    assert config.otlp_extra_endpoints == () and grpc.otlp_extra_endpoints == ()
    both = AgentConfig.from_env({"WT_AGENT_OTLP_ENDPOINT": "http://c:4318",
                                 "WT_AGENT_OTLP_EXTRA_ENDPOINTS": " http://ui:6006/, ,http://d:4318"})
    assert both.otlp_extra_endpoints == ("http://ui:6006/v1/traces", "http://d:4318/v1/traces")


# --------------------------------------------------------------------------- telemetry: the "record" half


def spans_of(dump: Path) -> list[dict]:
    spans = []
    for line in dump.read_text().splitlines():
        for resource in json.loads(line).get("resourceSpans", []):
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    attrs = {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}
                    spans.append({"name": span["name"], "parent": span.get("parentSpanId"), "attrs": attrs})
    return spans


def test_telemetry_to_a_file_imports_as_a_scenario(tmp_path: Path, universe: UniverseMCPServer, llm: FakeLLM):
    dump = tmp_path / "agent.otlp.jsonl"
    env = {**os.environ, "WT_AGENT_MCP_URL": universe.url, "WT_AGENT_OPENAI_BASE_URL": llm.base_url,
           "WT_AGENT_OTLP_FILE": str(dump), "WT_AGENT_INSTRUCTIONS": INSTRUCTIONS, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "examples.agent", "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        match = re.search(r"listening on (http://\S+)", lines[1])
        assert match, lines + [proc.stderr.read() if proc.poll() is not None else ""]
        inject(match.group(1), "conv-42", "What is the email on file for Bluewing?", wt_incident="INC-42")
        inject(match.group(1), "conv-42", "And its phone?")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()

    spans = spans_of(dump)
    roots = [s for s in spans if s["parent"] is None]
    assert [s["name"] for s in roots] == ["invoke_workflow wt-reference-agent"] * 2  # one trace per turn
    assert [s["attrs"].get("wt.incident") for s in roots] == ["INC-42", None]
    assert {s["attrs"].get("gen_ai.conversation.id") for s in spans if not s["name"].startswith("execute_tool")} \
        == {"conv-42"}
    chats = [s for s in spans if s["name"].startswith("chat ")]
    assert chats and all("gen_ai.input.messages" in s["attrs"] and "gen_ai.output.messages" in s["attrs"]
                         for s in chats)
    tools = [s["attrs"] for s in spans if s["name"] == "execute_tool client_lookup"]
    assert [json.loads(t["gen_ai.tool.call.result"]) for t in tools] == [RECORDED, RECORDED]

    out = tmp_path / "scenarios"
    done = subprocess.run([sys.executable, "-m", "wt_otel.cli", "import", "--flagged-only", "--out", str(out),
                           str(dump)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [scenario] = list(out.iterdir())
    envelope = json.loads((scenario / "incident.wtin.json").read_text())
    messages = envelope["messages"]
    users = [p["content"] for m in messages if m["role"] == "user" for p in m["parts"]]
    assert users == ["What is the email on file for Bluewing?", "And its phone?"]
    calls = [p for m in messages if m["role"] == "assistant" for p in m["parts"] if p["type"] == "tool_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("client_lookup", LOOKUP)] * 2
    assert [(w["tool_name"], w["args"], w["result"]) for w in envelope["witnessed_calls"]] \
        == [("client_lookup", LOOKUP, RECORDED)] * 2
    assert envelope["provenance"]["conversation_id"] == "conv-42"
    recordings = json.loads((scenario / "fixture.universe.json").read_text())["recordings"]
    assert [(r["tool_name"], r["args"], r["result"]) for r in recordings] == [("client_lookup", LOOKUP, RECORDED)]


def test_wt_otel_conformance_passes_against_the_reference_agent(agent: str):
    """The reference agent is the paved path: `wt-otel conformance` must call it conforming."""
    from click.testing import CliRunner

    from wt_otel.cli import main

    result = CliRunner().invoke(main, ["conformance", "--url", agent], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output
    assert "PASS reset.canary" in result.output
