"""A scripted OpenAI-compatible model (stdlib only): the "production" LLM of the demo, the tests and the bench.

It stands outside wt-otel's boundary: wt-otel never calls it, it only records what the agent did with it.
Deterministic, Chat Completions only (JSON, or SSE with `stream: true`):

- tools offered and no tool result since the latest user turn: one `client_lookup` call for Bluewing;
- then a text answer: the e-mail (right) or, asked for the phone, a number that is NOT what the tool
  returned (+1-555-0199 instead of +1-555-0100): the bad answer a user flags, and the incident the demo
  turns into a scenario that replays, hermetically, to the same FAIL;
- unless the system prompt carries the fix (`FIX`, docs/fix-loop.md): then it quotes the tool's phone.
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOL_NAME = "client_lookup"
TOOL_ARGS = {"query": "Bluewing"}
EMAIL_ANSWER = "The email on file for Bluewing is ops@bluewing.example."
WRONG_PHONE_ANSWER = "The phone number on file for Bluewing is +1-555-0199."
FIX = "Quote phone numbers exactly as the tools return them."
CREATED = 1767225600  # 2026-01-01T00:00:00Z: stable recordings


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def decide(messages: list[dict[str, Any]], tools_offered: bool) -> dict[str, Any]:
    """{"tool_call": (name, arguments)} or {"text": answer}, from the chat history alone."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    last = users[-1] if users else -1
    if tools_offered and not any(m.get("role") == "tool" for m in messages[last + 1:]):
        return {"tool_call": (TOOL_NAME, TOOL_ARGS)}
    asked = _text(messages[last].get("content")).lower() if users else ""
    if "phone" not in asked:
        return {"text": EMAIL_ANSWER}
    system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    phone = _tool_field(messages[last + 1:], "phone")
    if FIX in system and phone:
        return {"text": f"The phone number on file for Bluewing is {phone}."}
    return {"text": WRONG_PHONE_ANSWER}


def _tool_field(messages: list[dict[str, Any]], field: str) -> str | None:
    """`field` of the latest tool result that is a JSON object holding it."""
    for m in reversed(messages):
        if m.get("role") != "tool":
            continue
        try:
            data = json.loads(_text(m.get("content")))
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get(field), str):
            return data[field]
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ids = itertools.count(1)

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())
        n = next(self.ids)
        d = decide(body.get("messages") or [], bool(body.get("tools")))
        if "tool_call" in d:
            name, args = d["tool_call"]
            call = {"id": f"call_{n:04d}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": d["text"]}, "stop"
        base = {"id": f"chatcmpl-demo{n:04d}", "created": CREATED, "model": body.get("model", "gpt-4o-mini")}
        usage = {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}
        if not body.get("stream"):
            return self._send(200, json.dumps({**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": finish}]}).encode())
        delta = ({"role": "assistant", "tool_calls": [{"index": 0, **message["tool_calls"][0]}]}
                 if finish == "tool_calls" else {"role": "assistant", "content": message["content"]})
        chunks = [{**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]},
                  {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {},
                                                                          "finish_reason": finish}]}]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
        sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send(200, sse.encode(), "text/event-stream")


class FakeLLM:
    """The server on a free loopback port, from a daemon thread; `base_url` ends in /v1."""

    def __init__(self, port: int = 0) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
