"""The chat-completions replay server against malformed requests (issue 13, item 6): each used to get no
answer and a traceback; every one now gets a 4xx with a message that says what is wrong, and bodies are capped."""

from __future__ import annotations

import json
import socket

import pytest

from wt_otel.contracts.cassette import load_cassette
from wt_otel.replay.cassette_server import CassetteServer

RUN = "0af7651916cd43dd8448eb211c80319c"
ASK = {"role": "user", "content": "hi"}
CASSETTE = {"wt_cassette": 1, "scenario": "t", "latest_trace_id": RUN, "history_keys": [RUN],
            "traces": {RUN: {"trace_id": RUN, "calls": [{
                "request_context": {"model": "gpt-x", "provider": "openai", "messages": [ASK]},
                "response_timeline": [{"delta_ms": 0, "chunk": "hello", "tool_calls": [], "finish_reason": "stop"}],
                "exception_boundary": {"occurred": False},
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}]}}}


@pytest.fixture
def server(capsys):
    s = CassetteServer(load_cassette(CASSETTE), port=0)
    s.start()
    yield s
    s.stop()
    assert "Traceback" not in capsys.readouterr().err  # nothing printed a traceback


def _raw(server: CassetteServer, head: str, body: bytes = b"") -> tuple[int, dict]:
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(head.encode() + b"\r\n\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    payload = data.split(b"\r\n\r\n", 1)[1]
    return status, json.loads(payload)


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def _post(server: CassetteServer, body: bytes, length: str | None = None) -> tuple[int, dict]:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length if length is not None else len(body)}\r\nConnection: close")
    return _raw(server, head, body)


def _chat(**fields) -> bytes:
    return json.dumps({"model": "gpt-x", "messages": [ASK], **fields}).encode()


@pytest.mark.parametrize(("body", "length", "status", "says"), [
    (_chat(messages=[{"role": "assistant", "tool_calls": [{"function": 5}]}]), None, 400, "tool_calls"),
    (b"[" * 100_000 + b"]" * 100_000, None, 400, "nested too deeply"),
    (b"{}", "abc", 400, "Content-Length"),
    (b"{}", "1e15", 400, "Content-Length"),
    (b"{}", "-5", 400, "Content-Length"),
    (b"", str(10**15), 413, "exceeds"),
    (_chat(messages="hi"), None, 400, "messages"),
    (_chat(messages=[{"role": 5, "content": {"x": [1]}}]), None, 400, "role"),
    (b"\xff\xfe", None, 400, "invalid request body"),
])
def test_malformed_requests_get_a_4xx_with_a_clear_message(server, body, length, status, says):
    got, payload = _post(server, body, length)
    assert got == status, payload
    assert says in payload["error"]["message"], payload


def test_the_server_still_answers_after_them(server):
    _post(server, b"[" * 100_000)
    status, payload = _post(server, _chat())
    assert status == 200 and payload["choices"][0]["message"]["content"] == "hello"
