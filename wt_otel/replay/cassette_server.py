"""Replay an LLM cassette as an OpenAI-compatible chat-completions server.

The agent under test keeps its real OpenAI client and only points its base URL
here (`http://127.0.0.1:8649/v1` by default), so a replay exercises the same
request building, streaming and tool-call parsing code as production. This
module is only the HTTP surface: which recording answers a request, and the
call log, are `wt_otel.replay.cassette`'s (its docstring has the matching rules).

Routes
    POST /v1/chat/completions   JSON, or SSE with `stream: true`
    GET  /v1/models             the models the replayed run recorded (clients probe it)
    GET  /wt/llm-calls          the call log of the current run
    POST /wt/reset              start a new run: cursors and call log cleared
(the same routes without `/v1` are accepted too, for clients given a bare host).

Status codes
    200  a recorded answer
    400  a request body that is not a chat-completions request; 404 an unknown route
    422  `llm_divergence`: no recording for this request (exact) or past the end of
         the recording (sequence); the body says what was expected vs received.
    4xx/5xx  a recorded `exception_boundary`, mapped by `http_status`. A recorded
         call that streamed frames before failing replays them, then an SSE
         `{"error": ...}` event, and closes.
Every error carries `x-should-retry: false`: a replayed error is the outcome the
recording had (the client's own retries happened inside the recorded call).
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from wt_otel.contracts.cassette import Cassette, CassetteCall
from wt_otel.replay.cassette import (
    CASSETTE_FILE,
    DIVERGENCE_CODE,
    DIVERGENCE_STATUS,
    ERROR_STATUS,
    IGNORED_FIELDS,
    KEY_FIELDS,
    MATCH_MODES,
    CassetteReplay,
    MatchMode,
    Reply,
    chunks,
    completion,
    http_status,
    message_key,
    read_cassette,
    recorded_error,
    request_key,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8649


class _CassetteHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive for JSON; streams use chunked encoding
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.server.connections.add(self.connection)

    def finish(self) -> None:
        self.server.connections.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: every call goes to the call log (and `on_call`) instead."""

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path[3:] if path.startswith("/v1/") else path

    def do_GET(self) -> None:
        owner, route = self.server.owner, self._route()
        if route == "/models":
            self._json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": p or "wt-otel-cassette"}
                for m, p in owner.replay.models()]})
        elif route == "/wt/llm-calls":
            self._json(200, {"run": owner.replay.run, "match": owner.replay.match, "calls": owner.call_log()})
        else:
            self._error(404, {"message": f"no route GET {self.path}", "type": "invalid_request_error",
                              "param": None, "code": "unknown_url"})

    def do_POST(self) -> None:
        owner, route = self.server.owner, self._route()
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if route == "/wt/reset":
            owner.reset()
            self._json(200, {"ok": True, "run": owner.replay.run})
            return
        if route != "/chat/completions":
            self._error(404, {"message": f"no route POST {self.path}", "type": "invalid_request_error",
                              "param": None, "code": "unknown_url"})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            messages, tools = body.get("messages"), body.get("tools")
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise ValueError("messages must be an array of message objects")
            if tools is not None and not isinstance(tools, list):
                raise ValueError("tools must be an array")
        except ValueError as exc:
            self._error(400, {"message": f"invalid request body: {exc}", "type": "invalid_request_error",
                              "param": None, "code": "invalid_request"})
            return
        owner.serve(self, body)

    def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, error: dict[str, Any]) -> None:
        self._json(status, {"error": error}, {"x-should-retry": "false"})

    def _stream(self, events: Iterator[tuple[float, dict[str, Any] | str]], pace: bool) -> None:
        """SSE over chunked transfer encoding, so the connection can be kept."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for delay_ms, event in events:
                if pace and delay_ms > 0:
                    time.sleep(delay_ms / 1000)
                data = f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client hung up: its business
            self.close_connection = True


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: CassetteServer

    def __init__(self, address: tuple[str, int], owner: CassetteServer) -> None:
        super().__init__(address, _CassetteHandler)
        self.owner = owner
        self.connections: set[socket.socket] = set()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up on a kept-alive connection is routine; anything else is printed."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class CassetteServer:
    """An OpenAI-compatible server answering from one recorded run of a cassette.

    `start()` serves on a background thread and returns the base URL (port 0
    picks a free port); `stop()` closes the listener and open connections.
    `on_call(entry)` sees every call-log entry as it is made (the CLI prints them).
    """

    def __init__(self, cassette: Cassette | str | Path, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 match: MatchMode = "exact", run: str | None = None, pace: bool = False,
                 on_call: Callable[[dict[str, Any]], None] | None = None) -> None:
        if not isinstance(cassette, Cassette):
            cassette = read_cassette(cassette)
        self.replay = CassetteReplay(cassette, match, run)
        self.host, self.port, self.pace, self.on_call = host, port, pace, on_call
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> str:
        if self._httpd is None:
            self._httpd = _HTTPServer((self.host, self.port), self)
            self.port = self._httpd.server_address[1]
            # a short poll interval: stop() waits for it, and tests start and stop many servers
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="wt-cassette-server", daemon=True)
            self._thread.start()
        return self.base_url

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        for conn in list(self._httpd.connections):
            with contextlib.suppress(OSError):  # already closed by the client
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> CassetteServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset(self) -> None:
        self.replay.reset()

    def call_log(self) -> list[dict[str, Any]]:
        return self.replay.call_log()

    def serve(self, handler: _CassetteHandler, body: dict[str, Any]) -> None:
        """Answer one chat-completions request (called on the handler's thread)."""
        reply = self.replay.answer(body)
        if self.on_call and reply.entry:
            self.on_call(reply.entry)
        call = reply.call
        if call is None or reply.status != 200:
            if call is not None and self.pace:
                time.sleep(_duration_ms(call) / 1000)
            handler._error(reply.status, reply.error or {})
            return
        completion_id = f"chatcmpl-wt{self.replay.run[:8]}{reply.recorded_index:04d}"
        created = int(time.time())
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            tail: list[tuple[float, dict[str, Any] | str]] = (
                [(0.0, {"error": reply.error})] if reply.error else [(0.0, "[DONE]")])
            handler._stream(_chain(chunks(call, completion_id, created, include_usage), tail), self.pace)
            return
        if self.pace:
            time.sleep(_duration_ms(call) / 1000)
        handler._json(200, completion(call, completion_id, created))


def _chain(first: Iterator[Any], rest: list[Any]) -> Iterator[Any]:
    yield from first
    yield from rest


def _duration_ms(call: CassetteCall) -> float:
    metrics = call.network_metrics
    return metrics.total_duration_ms if metrics and metrics.total_duration_ms else sum(
        f.delta_ms for f in call.response_timeline)


__all__ = [  # the replay names are re-exported: callers may import them from here
    "CASSETTE_FILE", "DEFAULT_HOST", "DEFAULT_PORT", "DIVERGENCE_CODE", "DIVERGENCE_STATUS", "ERROR_STATUS",
    "IGNORED_FIELDS", "KEY_FIELDS", "MATCH_MODES", "CassetteReplay", "CassetteServer", "MatchMode", "Reply",
    "chunks", "completion", "http_status", "message_key", "read_cassette", "recorded_error", "request_key",
]
