"""Record mode: a proxy between an agent and its live model provider that writes what it sees as a cassette.

The agent points its base URL here (as in replay); each model call is passed
through to `upstream` unchanged (headers, body, streaming) and answered with
the provider's own bytes, while the call is recorded in the canonical,
provider-agnostic layer (`model_apis`: the request as chat messages, the answer
as frames coalesced by `record_tick_ms`, `ttfb_ms` measured, `raw_payload`
kept). One proxy session, or one run between two `POST /wt/reset`, is one run
of the cassette's ring buffer (`add_run`: `latest_trace_id`, `history_keys`
capped at 5, the oldest evicted). The file is rewritten atomically after every
call, so a crashed agent still leaves what it did.

Routes: POST /v1/chat/completions, /v1/responses, /v1/messages are recorded;
any other path is passed through unrecorded (GET /v1/models...);
POST /wt/reset starts a new run; GET /wt/llm-calls is this run's record log.
A dead upstream is a 502 to the agent and nothing recorded.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from wt_otel._util.background_http import BackgroundHTTPServer
from wt_otel._util.fsutil import atomic_write
from wt_otel.contracts.cassette import add_run, load_cassette
from wt_otel.replay.cassette import tool_definition
from wt_otel.replay.model_apis import API_ROUTES
from wt_otel.replay.model_apis._record import CallRecording

RECORD_TICK_MS = 100.0  # the spec's example window
UPSTREAM_TIMEOUT_S = 600.0
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
                        "content-length", "accept-encoding", "proxy-authorization", "proxy-connection"})
MAX_BODY = 64 * 1024 * 1024  # a request body larger than this is refused (413), not buffered


class CassetteFile:
    """The cassette being recorded into: an existing file's history is kept, its newest runs appended."""

    def __init__(self, path: Path, scenario: str | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        if self.path.exists():  # refuse to clobber what we cannot read: the user's data, not ours to replace
            self.data = json.loads(self.path.read_text(encoding="utf-8"))
            load_cassette(self.data)
        else:
            self.data = {"wt_cassette": 1, "scenario": scenario or self.path.stem.split(".")[0] or "auto"}
        self.run = ""
        self.calls: list[dict[str, Any]] = []
        self.new_run()

    def new_run(self) -> str:
        with self._lock:
            self.run, self.calls = uuid.uuid4().hex, []
            return self.run

    def add(self, call: dict[str, Any]) -> int:
        """Append one call to the current run and rewrite the file; returns the call's index."""
        with self._lock:
            self.calls.append(call)
            entry: dict[str, Any] = {"trace_id": self.run, **{k: v for k, v in self.calls[0].items() if k in (
                "request_context", "network_metrics", "response_timeline", "exception_boundary", "usage")},
                "calls": self.calls}
            add_run(self.data, entry)
            load_cassette(self.data)  # never write a file replay would refuse
            atomic_write(self.path, json.dumps(self.data, indent=2, ensure_ascii=False) + "\n")
            return len(self.calls) - 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: `on_call` reports each recorded call."""

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        while path.startswith("/v1/"):
            path = path[3:]
        return path

    def do_GET(self) -> None:
        owner = self.server.owner
        if self._route() == "/wt/llm-calls":
            self._send(200, {"run": owner.cassette.run, "calls": owner.call_log()})
        else:
            owner.forward(self, None, b"")

    def do_POST(self) -> None:
        owner, route = self.server.owner, self._route()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            self._send(413, {"error": {"message": f"request body over {MAX_BODY} bytes",
                                       "type": "invalid_request_error"}})
            return
        raw = self.rfile.read(length)
        if route == "/wt/reset":
            self._send(200, {"ok": True, "run": owner.reset()})
            return
        owner.forward(self, API_ROUTES.get(route), raw)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _ProxyHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], owner: RecordingProxy) -> None:
        super().__init__(address, _Handler)
        self.owner = owner
        self.connections: set[socket.socket] = set()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _sse_events(response: Any) -> Any:
    """Yield (event name, data text, the event's raw bytes) per SSE event as it arrives."""
    name: str | None = None
    data: list[str] = []
    raw: list[bytes] = []
    for line in iter(response.readline, b""):
        raw.append(line)
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        if not text:
            yield name, "\n".join(data), b"".join(raw)
            name, data, raw = None, [], []
        elif text.startswith("event:"):
            name = text[6:].strip()
        elif text.startswith("data:"):
            data.append(text[5:].lstrip())
    if raw:
        yield name, "\n".join(data), b"".join(raw)


class RecordingProxy(BackgroundHTTPServer):
    """Pass model calls through to `upstream` and record each into `out` (see the module docstring)."""

    thread_name = "wt-record-proxy"

    def __init__(self, upstream: str, out: Path, *, host: str = "127.0.0.1", port: int = 8649,
                 tick_ms: float = RECORD_TICK_MS, scenario: str | None = None,
                 on_call: Callable[[dict[str, Any]], None] | None = None) -> None:
        if not upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream must be an http(s) URL, got {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self.cassette = CassetteFile(out, scenario)
        self.host, self.port, self.tick_ms, self.on_call = host, port, tick_ms, on_call
        self._log: list[dict[str, Any]] = []
        self._log_lock = threading.Lock()

    def _make_server(self) -> _ProxyHTTPServer:
        return _ProxyHTTPServer((self.host, self.port), self)

    def reset(self) -> str:
        with self._log_lock:
            self._log = []
        return self.cassette.new_run()

    def call_log(self) -> list[dict[str, Any]]:
        with self._log_lock:
            return [dict(e) for e in self._log]

    def _url(self, path: str) -> str:
        if self.upstream.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        return self.upstream + path

    def forward(self, handler: _Handler, api: Any, raw: bytes) -> None:
        """Pass one request through; record it when `api` is a model API and the body is its request."""
        chat = None
        if api is not None:
            with contextlib.suppress(ValueError):
                chat = api.to_chat(json.loads(raw or b"{}"))
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        request = urllib.request.Request(self._url(handler.path), data=raw if handler.command == "POST" else None,
                                         headers=headers, method=handler.command)
        started = time.monotonic()
        try:
            response = urllib.request.urlopen(request, timeout=UPSTREAM_TIMEOUT_S)
        except urllib.error.HTTPError as exc:
            response = exc
        except (OSError, ValueError) as exc:  # noted before the reply: a client that sees the 502 finds the note
            self._note({"event": "upstream_error", "path": handler.path, "error": str(exc)})
            handler._send(502, {"error": {"message": f"wt-otel record proxy: upstream {self.upstream} "
                                                     f"unreachable: {exc}", "type": "api_error",
                                          "code": "upstream_unreachable"}})
            return
        status = response.status if hasattr(response, "status") else response.code
        stream = "text/event-stream" in (response.headers.get("Content-Type") or "")
        rec = (CallRecording(chat, api.PROVIDER, self.tick_ms, stream)
               if chat is not None and api is not None else None)
        chat = chat or {}
        handler.send_response(status)
        for name, value in response.headers.items():
            if name.lower() not in HOP_BY_HOP:
                handler.send_header(name, value)
        since = lambda: (time.monotonic() - started) * 1000  # noqa: E731
        try:
            if stream:
                handler.send_header("Transfer-Encoding", "chunked")
                handler.end_headers()

                def write(line: bytes) -> None:
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    handler.wfile.flush()

                # each event is passed on when the next one arrives, the last one after the call is saved:
                # a client returns on the final event ([DONE], response.completed, message_stop)
                state: dict[Any, Any] = {}
                held = b""
                for name, data, raw_event in _sse_events(response):
                    if held:
                        write(held)
                    held = raw_event
                    if rec is None or not data or data.startswith("[DONE]"):
                        continue
                    try:
                        event = json.loads(data)
                    except ValueError:
                        continue
                    if isinstance(event, dict):
                        rec.chunk_seen(since(), event)
                        api.record_event(rec, state, name, event, since())
                if rec is not None:
                    api.record_end(rec, state, since())
                    self._save(rec, api, chat, since(), stream, status)
                if held:
                    write(held)
                handler.wfile.write(b"0\r\n\r\n")
            else:
                body = response.read()
                if rec is not None:
                    try:
                        parsed = json.loads(body or b"{}")
                    except ValueError:
                        parsed = {"error": {"message": body[:2000].decode("utf-8", "replace")}}
                    rec.chunk_seen(since())
                    if status >= 400:
                        rec.failed(status, parsed)
                    elif isinstance(parsed, dict):
                        rec.raw_sync = parsed
                        api.record_json(rec, parsed, since())
                    self._save(rec, api, chat, since(), stream, status)  # before the client has its answer
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
        finally:
            response.close()

    def _save(self, rec: CallRecording, api: Any, chat: dict[str, Any], total_ms: float, stream: bool,
              status: int) -> None:
        if chat.get("tools"):
            chat["tools"] = [tool_definition(t) for t in chat["tools"]]
        call = rec.result(total_ms)
        index = self.cassette.add(call)
        self._note({"event": "llm_record", "api": api.NAME, "run": self.cassette.run, "recorded_index": index,
                        "model": call["request_context"]["model"], "stream": stream, "status": status,
                        "frames": len(call["response_timeline"]),
                        "ttfb_ms": call["network_metrics"]["ttfb_ms"]})

    def _note(self, entry: dict[str, Any]) -> None:
        with self._log_lock:
            entry = {"seq": len(self._log), **entry}
            self._log.append(entry)
        if self.on_call:
            self.on_call(entry)


__all__ = ["RECORD_TICK_MS", "CassetteFile", "RecordingProxy"]
