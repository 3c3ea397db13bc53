"""Replay an LLM cassette as an OpenAI-compatible chat-completions server.

The agent under test keeps its real OpenAI client and only points its base URL
here (`http://127.0.0.1:8649/v1` by default), so a replay exercises the same
request building, streaming and tool-call parsing code as production. This
module is only the HTTP surface: which recording answers a request, and the
call log, are `wt_otel.replay.cassette`'s (its docstring has the matching rules).

Routes
    POST /v1/chat/completions   OpenAI Chat Completions, JSON or SSE } each API a module of
    POST /v1/responses          OpenAI Responses API, JSON or SSE     } `replay.model_apis`,
    POST /v1/messages           Anthropic Messages, JSON or SSE       } all served by `serve_api`
    GET  /v1/models             the models the replayed run recorded (clients probe it)
    GET  /wt/llm-calls          the call log of the current run
    POST /wt/reset              start a new run: cursors and call log cleared
(the same routes without `/v1` are accepted too, for clients given a bare host).

Status codes
    200  a recorded answer
    400  a request body that is not a chat-completions request (the message says
         what: bad Content-Length, invalid or too deeply nested JSON, a message or
         tool call of the wrong shape); 404 an unknown route; 408 a body that does
         not arrive within `read_timeout`; 413 a body above `max_body_bytes`
    422  `llm_divergence`: no recording for this request (exact) or past the end of
         the recording (sequence); the body says what was expected vs received.
    4xx/5xx  a recorded `exception_boundary`, mapped by `http_status`. A recorded
         call that streamed frames before failing replays them, then an SSE
         `{"error": ...}` event, and closes.
Every error carries `x-should-retry: false`: a replayed error is the outcome the
recording had (the client's own retries happened inside the recorded call).
"""

from __future__ import annotations

import json
import logging
import socket
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from wt_otel._util.background_http import BackgroundHTTPServer
from wt_otel.contracts.cassette import Cassette
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
from wt_otel.replay.model_apis import API_ROUTES, openai_chat, serve_api

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8649
MAX_BODY_BYTES = 32 * 1024 * 1024  # a chat request with a long history is a few MB at most
READ_TIMEOUT = 30.0

log = logging.getLogger("wt_otel.replay.cassette_server")


class BadRequest(ValueError):
    """A request this server cannot answer; `status` (4xx) and the message go to the client."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


_shape_problem = openai_chat.shape_problem  # the old name (the fuzz tests call it)


class _CassetteHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive for JSON; streams use chunked encoding
    server: _HTTPServer
    timeout = READ_TIMEOUT  # a client that stops sending frees its thread

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
        while path.startswith("/v1/"):  # `/v1/v1/messages` too: a client given `.../v1` that adds its own
            path = path[3:]
        return path

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

    def _body(self) -> bytes:
        """The request body, at most `max_body_bytes`; raises `BadRequest` (400/408/411/413)."""
        cap = self.server.owner.max_body_bytes
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raise BadRequest("Transfer-Encoding: chunked is not supported: send a Content-Length", 411)
        text = (self.headers.get("Content-Length") or "0").strip()
        if not text.isdigit():
            raise BadRequest(f"invalid Content-Length {text[:40]!r}: must be a non-negative integer")
        length = int(text)
        if length > cap:
            raise BadRequest(f"body of {length} bytes exceeds the {cap}-byte limit", 413)
        try:
            raw = self.rfile.read(length)
        except TimeoutError:
            raise BadRequest(f"the body did not arrive within {self.timeout:g}s", 408) from None
        if len(raw) != length:
            raise BadRequest(f"body ended after {len(raw)} of {length} bytes")
        return raw

    def do_POST(self) -> None:
        owner, route = self.server.owner, self._route()
        try:
            raw = self._body()
        except BadRequest as exc:
            self.close_connection = True  # what is left of the body would be read as the next request
            self._error(exc.status, {"message": str(exc), "type": "invalid_request_error", "param": None,
                                     "code": "invalid_request"})
            return
        if route == "/wt/reset":
            owner.reset()
            self._json(200, {"ok": True, "run": owner.replay.run})
            return
        if route not in API_ROUTES:
            self._error(404, {"message": f"no route POST {self.path}", "type": "invalid_request_error",
                              "param": None, "code": "unknown_url"})
            return
        serve_api(owner, self, API_ROUTES[route], raw)  # every model API, chat completions included

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


class CassetteServer(BackgroundHTTPServer):
    """An OpenAI-compatible server answering from one recorded run of a cassette.

    `start()` serves on a background thread and returns the base URL (port 0
    picks a free port); `stop()` closes the listener and open connections.
    `on_call(entry)` sees every call-log entry as it is made (the CLI prints them).
    """

    thread_name = "wt-cassette-server"

    def __init__(self, cassette: Cassette | str | Path, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 match: MatchMode = "exact", run: str | None = None, pace: bool = False,
                 on_call: Callable[[dict[str, Any]], None] | None = None,
                 max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        if not isinstance(cassette, Cassette):
            cassette = read_cassette(cassette)
        self.replay = CassetteReplay(cassette, match, run)
        self.host, self.port, self.pace, self.on_call = host, port, pace, on_call

    def _make_server(self) -> _HTTPServer:
        return _HTTPServer((self.host, self.port), self)

    def reset(self) -> None:
        self.replay.reset()

    def call_log(self) -> list[dict[str, Any]]:
        return self.replay.call_log()


__all__ = [  # the replay names are re-exported: callers may import them from here
    "CASSETTE_FILE", "DEFAULT_HOST", "DEFAULT_PORT", "DIVERGENCE_CODE", "DIVERGENCE_STATUS", "ERROR_STATUS",
    "IGNORED_FIELDS", "KEY_FIELDS", "MATCH_MODES", "CassetteReplay", "CassetteServer", "MatchMode", "Reply",
    "chunks", "completion", "http_status", "message_key", "read_cassette", "recorded_error", "request_key",
]
