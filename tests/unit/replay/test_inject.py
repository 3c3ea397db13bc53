"""The Contract C driver (`http_inject`) and the in-process `python` runtime.

`FakeAgent` is a small conforming endpoint (stdlib http.server in a thread)
with per-session memory that recalls what it was told, so the state checks
mean something; each fault breaks one rule. test_conformance.py reuses it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from wt_otel.contracts.inject import DEFAULT_URL, ContractViolation, ResetFailed, RuntimeSpecError, ToolCall, TurnResult
from wt_otel.contracts.run import Turn
from wt_otel.replay.runtimes import HttpInjectRuntime, PythonRuntime, Runtime, new_session_id, resolve_runtime

VALID_SURFACE = {
    "system_instructions": [{"type": "text", "content": "You are the operations assistant for Bluewing."}],
    "tool_definitions": [{"name": "client_lookup", "description": "Look up a client.",
                          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}],
    "extra_segments": [{"name": "narration:tool_started", "content": "Checking {tool_name} for you…"}],
}


class FakeAgent:
    """A Contract C endpoint. Faults (keyword flags) break one rule each:

    no_tool_calls, string_arguments, wrong_echo, inject_status (int), garbage_body, slow (seconds),
    error_turn, empty_error, empty_reply, leaky_reset (reset keeps memory), async_reset (clears
    after a delay), leaky_index (a global index reset never clears), shared_memory (not keyed by
    session), reset_status (int), reset_no_echo, echo_any_version, surface (dict | 404 | 501 | 500 | "garbage").
    """

    def __init__(self, **faults: Any) -> None:
        self.faults = faults
        self.memory: dict[str, list[str]] = {}
        self.index: list[str] = []
        self.requests: list[tuple[str, Any]] = []
        self.lock = threading.Lock()

    def fault(self, name: str, default: Any = None) -> Any:
        return self.faults.get(name, default)

    def handle(self, route: str, body: Any) -> tuple[int, Any]:
        self.requests.append((route, body))
        if route == "/wt/inject":
            return self.inject(body)
        if route == "/wt/reset":
            return self.reset(body)
        if route == "/wt/surface":
            surface = self.fault("surface", 404)
            if isinstance(surface, int):
                return surface, {"error": "not here"}
            if surface == "garbage":
                return 200, b"not json"
            return 200, {"wt_inject": 1, "surface": surface}
        return 404, {"error": "no such route"}

    def inject(self, body: dict[str, Any]) -> tuple[int, Any]:
        if self.fault("inject_status"):
            return self.fault("inject_status"), {"detail": "internal error"}
        if self.fault("garbage_body"):
            return 200, b"<html>oops</html>"
        if self.fault("slow"):
            time.sleep(self.fault("slow"))
        version = body.get("wt_inject")
        if version != 1 and not self.fault("echo_any_version"):
            return 400, {"error": f"unsupported wt_inject {version}"}
        session = "shared" if self.fault("shared_memory") else body["session_id"]
        text = body["text"]
        with self.lock:
            remembered = self.memory.setdefault(session, [])
            if "what did i just tell you" in text.lower() or "repeat" in text.lower():
                known = remembered + (self.index if self.fault("leaky_index") else [])
                reply = ("You told me: " + " | ".join(known)) if known else "You have not told me anything yet."
                calls: list[dict[str, Any]] = []
            else:
                remembered.append(text)
                self.index.append(text)
                reply, calls = "OK", [{"name": "note_save", "arguments": {"chars": len(text)}}]
        out: dict[str, Any] = {"wt_inject": 2 if self.fault("wrong_echo") else version, "reply": reply,
                               "tool_calls": calls, "future_field": "ignored"}
        if self.fault("no_tool_calls"):
            del out["tool_calls"]
        if self.fault("string_arguments"):
            out["tool_calls"] = [{"name": "note_save", "arguments": json.dumps({"chars": 1})}]
        if self.fault("error_turn"):
            out.update(reply="", error="model timed out after 120 s")
        if self.fault("empty_error"):
            out["error"] = ""
        if self.fault("empty_reply"):
            out["reply"] = ""
        return 200, out

    def reset(self, body: dict[str, Any]) -> tuple[int, Any]:
        if self.fault("reset_status"):
            return self.fault("reset_status"), {"detail": "store unavailable"}
        if self.fault("async_reset"):
            threading.Timer(self.fault("async_reset"), self._wipe).start()
        elif not self.fault("leaky_reset"):
            self._wipe()
        return 200, ({} if self.fault("reset_no_echo") else {"wt_inject": body.get("wt_inject")})

    def _wipe(self) -> None:
        with self.lock:
            self.memory.clear()


def _handler(agent: FakeAgent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, out = agent.handle(self.path, json.loads(raw or b"null"))
            data = out if isinstance(out, bytes) else json.dumps(out).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the driver gave up (timeout test)
                pass

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def serve(agent: FakeAgent) -> Iterator[str]:
    """Run `agent` on a free loopback port; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(agent))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def endpoint() -> Iterator[tuple[FakeAgent, str]]:
    agent = FakeAgent()
    with serve(agent) as url:
        yield agent, url


def broken(**faults: Any) -> contextlib.AbstractContextManager[str]:
    return serve(FakeAgent(**faults))


def violation(url: str, call: str = "inject", **kwargs: Any) -> ContractViolation:
    rt = HttpInjectRuntime(url, **kwargs)
    with pytest.raises(ContractViolation) as info:
        rt.inject("wt-s1", "hello") if call == "inject" else rt.reset()
    return info.value


# ---------------------------------------------------------------- http_inject: the happy path


def test_inject_sends_the_contract_request_and_returns_the_turn(endpoint: tuple[FakeAgent, str]) -> None:
    agent, url = endpoint
    rt = HttpInjectRuntime(url, timeout_s=7)
    assert isinstance(rt, Runtime)
    result = rt.inject("wt-abc", "remember Bluewing")
    assert result.reply == "OK" and result.error is None and result.latency_ms >= 0
    assert result.tool_calls == [ToolCall(name="note_save", arguments={"chars": 17})]
    assert agent.requests == [("/wt/inject", {"wt_inject": 1, "session_id": "wt-abc", "text": "remember Bluewing",
                                              "timeout_s": 7.0})]
    assert "Bluewing" in rt.inject("wt-abc", "What did I just tell you?").reply
    assert rt.inject("wt-abc", "Repeat it").tool_calls == []  # [] is a conforming "called nothing"


def test_reset_is_one_post_with_the_version() -> None:
    agent = FakeAgent()
    with serve(agent) as url:
        HttpInjectRuntime(url).reset()
    assert agent.requests == [("/wt/reset", {"wt_inject": 1})]


def test_url_and_timeout_come_from_argument_then_env_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WT_INJECT_URL", raising=False)
    monkeypatch.delenv("WT_INJECT_TIMEOUT_S", raising=False)
    rt = HttpInjectRuntime()
    assert (rt.base, rt.timeout_s, rt.transport_timeout_s) == (DEFAULT_URL, 120.0, 125.0)
    monkeypatch.setenv("WT_INJECT_URL", "http://agent:9000/")
    monkeypatch.setenv("WT_INJECT_TIMEOUT_S", "30")
    rt = HttpInjectRuntime()
    assert (rt.base, rt.timeout_s, rt.transport_timeout_s) == ("http://agent:9000", 30.0, 35.0)
    assert HttpInjectRuntime("http://other:1", timeout_s=2).base == "http://other:1"
    monkeypatch.setenv("WT_INJECT_TIMEOUT_S", "soon")
    with pytest.raises(RuntimeSpecError, match="WT_INJECT_TIMEOUT_S must be a positive number of seconds"):
        HttpInjectRuntime()
    with pytest.raises(RuntimeSpecError, match="must be an http\\(s\\) base URL"):
        HttpInjectRuntime("127.0.0.1:8647", timeout_s=1)


def test_agent_level_error_is_returned_verbatim_never_a_made_up_reply() -> None:
    with broken(error_turn=True) as url:
        result = HttpInjectRuntime(url).inject("wt-1", "hello")
    assert result == TurnResult(reply="", tool_calls=result.tool_calls, error="model timed out after 120 s",
                                latency_ms=result.latency_ms)
    assert [c.name for c in result.tool_calls] == ["note_save"]  # calls witnessed before the failure are kept


def test_turn_result_becomes_a_trace_turn(endpoint: tuple[FakeAgent, str]) -> None:
    result = HttpInjectRuntime(endpoint[1]).inject("wt-1", "hi")
    turn = Turn.from_result("hi", result)
    assert turn.to_dict() == {"text": "hi", "reply": "OK", "latency_ms": result.latency_ms, "error": None,
                              "tool_calls": [{"name": "note_save", "arguments": {"chars": 2}}]}


# ---------------------------------------------------------------- http_inject: contract violations


@pytest.mark.parametrize(
    ("faults", "rule", "expected"),
    [
        ({"no_tool_calls": True}, "shape",
         "tool_calls must be an array, but the key is missing (every tool call of the turn in invocation order, "
         "[] when the agent called none; a missing key and [] mean different things)"),
        ({"string_arguments": True}, "shape",
         "tool_calls[0].arguments must be an object, not a JSON-encoded string (emit the parsed arguments object"),
        ({"wrong_echo": True}, "version_echo",
         "wt_inject echo is 2 but the request sent 1: the endpoint speaks another protocol version"),
        ({"empty_error": True}, "shape", "error must be a non-empty string when present, got string \"\""),
        ({"empty_reply": True}, "shape", "reply must not be empty unless error is set"),
        ({"inject_status": 500}, "http_status", "expected HTTP 200 with a response envelope"),
        ({"garbage_body": True}, "json", "the body is not UTF-8 JSON"),
    ],
)
def test_every_contract_violation_names_its_rule(faults: dict[str, Any], rule: str, expected: str) -> None:
    with broken(**faults) as url:
        exc = violation(url)
    assert exc.rule == rule
    assert expected in str(exc)
    assert str(exc).startswith(f"POST {url}/wt/inject: ")
    if rule != "http_status":
        assert exc.status == 200 and exc.body  # the evidence travels with the error


def test_non_200_carries_status_and_truncated_body_and_is_not_retried() -> None:
    agent = FakeAgent(inject_status=503)
    with serve(agent) as url:
        exc = violation(url)
    assert (exc.status, exc.body) == (503, '{"detail": "internal error"}')
    assert "[HTTP 503, body: {\"detail\": \"internal error\"}]" in str(exc)
    assert len(agent.requests) == 1  # one POST per call, no retry


def test_long_bodies_are_truncated_in_errors() -> None:
    agent = FakeAgent()
    agent.inject = lambda body: (500, {"trace": "x" * 5000})  # type: ignore[method-assign]
    with serve(agent) as url:
        exc = violation(url)
    assert exc.body is not None and len(exc.body) < 600 and exc.body.endswith("chars)")


def test_slow_endpoint_fails_after_deadline_plus_grace_without_retry() -> None:
    agent = FakeAgent(slow=1.0)
    with serve(agent) as url:
        started = time.monotonic()
        exc = violation(url, timeout_s=0.2, grace_s=0.1)
        elapsed = time.monotonic() - started
    assert exc.rule == "timeout"
    assert "no response within 0.3 s (timeout_s 0.2 + 0.1 s grace)" in str(exc)
    assert "enforce timeout_s itself" in str(exc)
    assert 0.25 < elapsed < 0.9 and len(agent.requests) == 1
    assert agent.requests[0][1]["timeout_s"] == 0.2  # the endpoint is told its own deadline


def test_connection_refused_says_how_to_fix_it() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    exc = violation(url)
    assert exc.rule == "unreachable"
    assert f"cannot connect to {url}" in str(exc) and "Is the agent endpoint running there?" in str(exc)
    assert "8647" not in str(exc)  # the URL given, not the default (issue 12)
    assert "WT_INJECT_URL" in str(exc)


@pytest.mark.parametrize(
    ("faults", "rule", "expected"),
    [
        ({"reset_status": 500}, "http_status", "reset failed (a reset must answer 200 only after every store is wiped"),
        ({"reset_no_echo": True}, "version_echo", "wt_inject must be a positive integer, but the key is missing"),
    ],
)
def test_failed_reset_raises_reset_failed(faults: dict[str, Any], rule: str, expected: str) -> None:
    with broken(**faults) as url:
        exc = violation(url, call="reset")
    assert isinstance(exc, ResetFailed) and exc.rule == rule
    assert expected in str(exc)


def test_unreachable_reset_is_a_reset_failure() -> None:
    exc = violation(f"http://127.0.0.1:{free_port()}", call="reset")
    assert isinstance(exc, ResetFailed) and exc.rule == "unreachable"
    assert "reset failed, the run cannot be isolated: cannot connect" in str(exc)


# ---------------------------------------------------------------- http_inject: surface


def test_surface_reported_is_validated() -> None:
    with broken(surface=VALID_SURFACE) as url:
        probe = HttpInjectRuntime(url).surface()
    assert probe.status == "reported" and probe.detail is None
    assert probe.surface is not None and probe.surface.to_dict() == VALID_SURFACE


def test_surface_with_empty_lists_is_reported() -> None:
    empty = {"system_instructions": [], "tool_definitions": [], "extra_segments": []}
    with broken(surface=empty) as url:
        assert HttpInjectRuntime(url).surface().status == "reported"


@pytest.mark.parametrize("status", [404, 501])
def test_surface_not_implemented_is_unavailable(status: int) -> None:
    with broken(surface=status) as url:
        probe = HttpInjectRuntime(url).surface()
    assert (probe.status, probe.surface) == ("unavailable", None)
    assert f"HTTP {status}" in (probe.detail or "")


@pytest.mark.parametrize(
    ("surface", "expected"),
    [
        ({"system_instructions": [], "tool_definitions": []},
         "surface.extra_segments must be an array, but the key is missing"),
        ({**VALID_SURFACE, "tool_definitions": [{"description": "no name"}]},
         "surface.tool_definitions[0].name must be a non-empty string, but the key is missing"),
        ({**VALID_SURFACE, "system_instructions": [{"type": "image", "content": "x"}]},
         'surface.system_instructions[0].type must be "text"'),
        (500, "/wt/surface answered HTTP 500"),
        ("garbage", "/wt/surface body is not UTF-8 JSON"),
    ],
)
def test_malformed_surface_is_invalid_and_never_stored(surface: Any, expected: str) -> None:
    with broken(surface=surface) as url:
        probe = HttpInjectRuntime(url).surface()
    assert (probe.status, probe.surface) == ("invalid", None)
    assert expected in (probe.detail or "")


def test_surface_probe_of_a_dead_endpoint_raises() -> None:
    with pytest.raises(ContractViolation, match="cannot connect"):
        HttpInjectRuntime(f"http://127.0.0.1:{free_port()}").surface()


# ---------------------------------------------------------------- the python runtime


AGENT_MODULE = '''
memory = {}

def agent(text, session_id):
    memory.setdefault(session_id, []).append(text)
    return {"reply": " | ".join(memory[session_id]), "tool_calls": [{"name": "note_save", "arguments": {}}]}

def _reset():
    memory.clear()

agent.reset = _reset
agent.surface = lambda: {"system_instructions": [], "tool_definitions": [{"name": "note_save"}],
                         "extra_segments": []}

def as_tuple(text, session_id):
    return ("echo " + text, [])

def failing(text, session_id):
    return {"reply": "", "tool_calls": [], "error": "the model refused"}

def no_tool_calls(text, session_id):
    return {"reply": "hi"}

def string_args(text, session_id):
    return "hi", [{"name": "x", "arguments": "{}"}]

def crashes(text, session_id):
    raise KeyError("session")

class Agent:
    def __init__(self):
        self.count = 0
    def __call__(self, text, session_id):
        self.count += 1
        return {"reply": str(self.count), "tool_calls": []}
    def reset(self):
        self.count = 0
    def surface(self):
        return {"system_instructions": "oops"}

instance = Agent()
'''


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"wt_test_agent_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.chdir(tmp_path)  # the current directory is importable, as for `python -m`
    yield name
    sys.modules.pop(name, None)
    with contextlib.suppress(ValueError):
        sys.path.remove(str(tmp_path))


def test_python_runtime_dict_result_reset_and_surface(agent_module: str) -> None:
    rt = resolve_runtime(f"python:{agent_module}:agent")
    assert isinstance(rt, PythonRuntime) and isinstance(rt, Runtime)
    assert (rt.name, rt.url, rt.warnings) == (f"python:{agent_module}:agent", None, [])
    assert rt.inject("s1", "a").reply == "a"
    result = rt.inject("s1", "b")
    assert (result.reply, result.tool_calls, result.error) == ("a | b", [ToolCall(name="note_save", arguments={})],
                                                              None)
    rt.reset()
    assert rt.inject("s1", "c").reply == "c"
    probe = rt.surface()
    assert probe.status == "reported" and probe.surface is not None
    assert [t.name for t in probe.surface.tool_definitions] == ["note_save"]


def test_python_runtime_tuple_result_and_bare_module_attr(agent_module: str) -> None:
    rt = resolve_runtime(f"{agent_module}:as_tuple")
    result = rt.inject(new_session_id(), "x")
    assert (result.reply, result.tool_calls) == ("echo x", [])
    assert rt.surface().status == "unavailable"
    assert "no reset hook" in rt.warnings[0]


def test_python_runtime_agent_error_is_scored_not_raised(agent_module: str) -> None:
    result = resolve_runtime(f"{agent_module}:failing").inject("s", "x")
    assert (result.reply, result.error) == ("", "the model refused")


@pytest.mark.parametrize(
    ("attr", "rule", "expected"),
    [
        ("no_tool_calls", "shape", "tool_calls must be an array, but the key is missing"),
        ("string_args", "shape", "tool_calls[0].arguments must be an object, not a JSON-encoded string"),
        ("crashes", "agent_raised", "the agent raised KeyError: 'session'"),
    ],
)
def test_python_runtime_validates_like_the_wire(agent_module: str, attr: str, rule: str, expected: str) -> None:
    rt = resolve_runtime(f"python:{agent_module}:{attr}")
    with pytest.raises(ContractViolation) as info:
        rt.inject("s", "x")
    assert info.value.rule == rule and expected in str(info.value)


def test_python_runtime_instance_hooks(agent_module: str) -> None:
    rt = resolve_runtime(f"{agent_module}:instance")
    assert [rt.inject("s", "x").reply for _ in range(2)] == ["1", "2"]
    rt.reset()
    assert rt.inject("s", "x").reply == "1"
    probe = rt.surface()
    assert probe.status == "invalid" and "system_instructions must be an array" in (probe.detail or "")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("python", "the python runtime needs a target"),
        ("carrier_pigeon", "unknown runtime 'carrier_pigeon'"),
        ("python:no_such_module_xyz:agent", "cannot import 'no_such_module_xyz'"),
        ("python:{mod}:missing", "has no attribute 'missing'"),
        ("python:{mod}:Agent", "is a class, not a callable agent"),
        ("python:{mod}:memory", "is dict, not a callable agent"),
        ("python::agent", "a python runtime target is MODULE:ATTR"),
    ],
)
def test_bad_runtime_specs_are_usage_errors(agent_module: str, spec: str, expected: str) -> None:
    with pytest.raises(RuntimeSpecError, match=expected.replace("(", r"\(")):
        resolve_runtime(spec.format(mod=agent_module))


def test_resolve_runtime_default_is_http_inject(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WT_INJECT_URL", raising=False)
    rt = resolve_runtime(None, url="http://127.0.0.1:9", timeout_s=3)
    assert isinstance(rt, HttpInjectRuntime) and (rt.name, rt.url, rt.timeout_s) == ("http_inject",
                                                                                     "http://127.0.0.1:9", 3.0)
