"""Record mode: a proxy between an agent and its live model provider that writes what it sees as a cassette.

The agent points its base URL here (as in replay); each model call is passed
through to `upstream` unchanged (headers, body, streaming) and answered with
the provider's own bytes, while the call is recorded in the canonical,
provider-agnostic layer (`model_apis`: the request as chat messages, the answer
as frames coalesced by `record_tick_ms`, `ttfb_ms` measured, `raw_payload`
kept). One proxy session, or one run between two `POST /wt/reset`, is one run
of the cassette's ring buffer (`add_run`: `latest_trace_id`, `history_keys`
capped at 5, the oldest evicted).

Recording cannot hurt the baseline: a run is held in memory and written once,
atomically (temp file, fsync, rename), when it ends within its `RecordBudget`
(`commit`: at `POST /wt/reset`, at the end of a `wt-otel run` run that did not
error, when `wt-otel cassette record` is stopped). A run that goes over budget
(calls, seconds since its first model call, bytes recorded) is refused from then
on (HTTP 400 `record_budget_exceeded`, which no SDK retries) and never written;
nor is a run that errored or a process that was killed: the file, its ring
buffer included, keeps its last good state.

Routes: POST /v1/chat/completions, /v1/responses, /v1/messages are recorded;
any other path is passed through unrecorded (GET /v1/models...);
POST /wt/reset ends the run (written if within budget) and starts a new one;
GET /wt/llm-calls is this run's record log.
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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from wt_otel._util.background_http import BackgroundHTTPServer
from wt_otel._util.fsutil import atomic_write, fsync_dir
from wt_otel.contracts.cassette import add_run, load_cassette
from wt_otel.replay.cassette import tool_definition
from wt_otel.replay.model_apis import API_ROUTES
from wt_otel.replay.model_apis._record import CallRecording
from wt_otel.replay.record_budget import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CALLS,
    DEFAULT_MAX_SECONDS,
    RecordBudget,
)

RECORD_TICK_MS = 100.0  # the spec's example window
UPSTREAM_TIMEOUT_S = 600.0
HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host",
                        "content-length", "accept-encoding", "proxy-authorization", "proxy-connection"})
MAX_BODY = 64 * 1024 * 1024  # a request body larger than this is refused (413), not buffered
BUDGET_ERROR = "record_budget_exceeded"  # the error code of a model call refused over budget


class CassetteFile:
    """The cassette being recorded into: runs are held in memory and appended to the file's history
    (its ring buffer) only by `commit`, one atomic write per finished run."""

    def __init__(self, path: Path, scenario: str | None = None) -> None:
        self.path = Path(path)
        self.scenario = scenario or self.path.stem.split(".")[0] or "auto"
        self._lock = threading.Lock()
        self._read()  # refuse now, not after the run, a file we could not append to
        self.run = ""
        self.calls: list[dict[str, Any]] = []
        self.new_run()

    def _read(self) -> dict[str, Any]:
        """The file as it is now (re-read at commit: what another writer added since is kept)."""
        if not self.path.exists():
            return {"wt_cassette": 1, "scenario": self.scenario}
        data = json.loads(self.path.read_text(encoding="utf-8"))  # refuse to clobber what we cannot read
        load_cassette(data)
        return data

    def new_run(self) -> str:
        """Start a new run; what the current one recorded and was not committed is dropped."""
        with self._lock:
            self.run, self.calls = uuid.uuid4().hex, []
            return self.run

    def add(self, call: dict[str, Any]) -> int:
        """Append one call to the current run (memory only); returns the call's index."""
        with self._lock:
            self.calls.append(call)
            return len(self.calls) - 1

    def commit(self) -> bool:
        """Write the current run into the file (ring buffer, validated, atomic, fsynced) and start a new
        run; False (nothing written) when the run recorded no call."""
        with self._lock:
            if not self.calls:
                return False
            data = self._read()
            entry: dict[str, Any] = {"trace_id": self.run, **{k: v for k, v in self.calls[0].items() if k in (
                "request_context", "network_metrics", "response_timeline", "exception_boundary", "usage")},
                "calls": self.calls}
            add_run(data, entry)
            load_cassette(data)  # never write a file replay would refuse
            atomic_write(self.path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            fsync_dir(self.path.parent)
            self.run, self.calls = uuid.uuid4().hex, []
            return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out as separate writes: with Nagle on, a kept-alive client's delayed ACK cost
    # ~40 ms per model call (measured: 46 ms a call through the proxy, 3 ms with TCP_NODELAY)
    disable_nagle_algorithm = True
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
            try:
                ended = owner.end_run(keep=True)
            except (OSError, ValueError) as exc:  # the file changed under us into one we cannot append to
                self._send(500, {"ok": False, "error": f"the run was not written: {exc}"})
                return
            self._send(200, {"ok": True, "run": owner.cassette.run, "ended": ended.to_dict()})
            return
        owner.forward(self, API_ROUTES.get(route), raw)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
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


@dataclass(frozen=True)
class EndedRun:
    """How a recorded run ended: written into the cassette, or dropped (over budget, errored, empty)."""

    run: str
    calls: int
    written: bool
    path: Path
    stopped_by: str | None = None  # the budget that stopped it

    def describe(self) -> str:
        if self.written:
            return f"recorded run {self.run} ({self.calls} LLM call(s)) into {self.path}"
        if self.stopped_by:
            return f"recording stopped: {self.stopped_by}; nothing written, {self.path} is unchanged"
        if self.calls:
            return (f"recording discarded: the run did not finish ({self.calls} LLM call(s) dropped); "
                    f"{self.path} is unchanged")
        return f"the run made no LLM call: nothing recorded, {self.path} is unchanged"

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "calls": self.calls, "written": self.written, "stopped_by": self.stopped_by}


class RecordingProxy(BackgroundHTTPServer):
    """Pass model calls through to `upstream` and record each into `out` (see the module docstring)."""

    thread_name = "wt-record-proxy"

    def __init__(self, upstream: str, out: Path, *, host: str = "127.0.0.1", port: int = 8649,
                 tick_ms: float = RECORD_TICK_MS, scenario: str | None = None,
                 on_call: Callable[[dict[str, Any]], None] | None = None,
                 budget: RecordBudget | None = None) -> None:
        if not upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream must be an http(s) URL, got {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self.cassette = CassetteFile(out, scenario)
        self.host, self.port, self.tick_ms, self.on_call = host, port, tick_ms, on_call
        self.budget = budget or RecordBudget()
        self._log: list[dict[str, Any]] = []
        self._log_lock = threading.Lock()
        self._budget_lock = threading.Lock()
        self._spent_calls, self._spent_bytes, self._first_call_at = 0, 0, 0.0
        self.stopped_by: str | None = None  # set when this run went over budget: it will not be written
        self.ended: list[EndedRun] = []  # every run ended so far, in order

    def _make_server(self) -> _ProxyHTTPServer:
        return _ProxyHTTPServer((self.host, self.port), self)

    def end_run(self, keep: bool) -> EndedRun:
        """End the current run and start the next: written into the cassette when `keep` and within budget,
        dropped otherwise. Raises OSError or ContractError when the file cannot take it (nothing written)."""
        with self._budget_lock:
            stopped, self.stopped_by = self.stopped_by, None
            self._spent_calls, self._spent_bytes, self._first_call_at = 0, 0, 0.0
        with self._log_lock:
            self._log = []
        run, calls = self.cassette.run, len(self.cassette.calls)
        written = keep and not stopped and self.cassette.commit()
        if not written:
            self.cassette.new_run()
        ended = EndedRun(run, calls, written, self.cassette.path, stopped)
        self.ended.append(ended)
        return ended

    def reset(self) -> str:
        """A new run, the current one dropped (the runner ends each run explicitly with `end_run`)."""
        self.end_run(keep=False)
        return self.cassette.run

    def _admit(self) -> str | None:
        """Count one more model call against the budget; why it is refused, or None."""
        with self._budget_lock:
            if self.stopped_by is None:
                now = time.monotonic()
                seconds = now - self._first_call_at if self._spent_calls else 0.0
                self.stopped_by = self.budget.refuses_call(self._spent_calls, seconds)
                if self.stopped_by is None:
                    self._first_call_at = self._first_call_at if self._spent_calls else now
                    self._spent_calls += 1
            return self.stopped_by

    def _spent(self, size: int, final: bool) -> str | None:
        """Add `size` recorded bytes (`final`: the call is complete); why the run is now over budget, or None."""
        with self._budget_lock:
            if self.stopped_by is None:
                total = self._spent_bytes + size
                if final:
                    self._spent_bytes = total
                seconds = time.monotonic() - self._first_call_at if self._spent_calls else 0.0
                self.stopped_by = (self.budget.over_bytes(total, self._spent_calls)
                                   or self.budget.over_time(seconds))
            return self.stopped_by

    def _refuse(self, handler: _Handler, why: str) -> None:
        self._note({"event": "budget_exceeded", "path": handler.path, "error": why})
        handler._send(400, {"error": {"message": f"wt-otel record proxy: recording stopped: {why}; the cassette "
                                                 "is left unchanged", "type": "invalid_request_error",
                                      "code": BUDGET_ERROR}}, headers={"x-should-retry": "false"})

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
            why = self._admit()
            if why is not None:
                self._refuse(handler, why)
                return
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
                streamed = 0
                for name, data, raw_event in _sse_events(response):
                    streamed += len(raw_event)
                    if rec is not None and self._spent(streamed, final=False):
                        handler.close_connection = True  # cut mid-stream: the client sees an error, not an answer
                        return
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
        self._spent(len(json.dumps(call, ensure_ascii=False)), final=True)
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


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_CALLS", "DEFAULT_MAX_SECONDS", "RECORD_TICK_MS", "CassetteFile",
           "EndedRun", "RecordBudget", "RecordingProxy"]
