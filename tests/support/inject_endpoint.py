"""Contract C endpoints on the standard library: `JsonEndpoint`, the HTTP part every test endpoint shares, and
`Endpoint`, a small one with switchable behaviours for conformance tests.

It keeps per-session memory (so the canary has something to find), an `archive` of every turn that
survives `/wt/reset` unless `wipe_archive` (the spec's search-index incident: state the replies never
show), and can be slow on turns that mention "slow", honour or ignore `timeout_s`, and ask a model.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Reply = tuple[int, Any]


class JsonEndpoint:
    """A Contract C endpoint on the standard library's HTTP server, on a free loopback port: each POST's JSON
    body goes to `handle(path, body)`, whose (status, JSON) is the answer, so a test's endpoint says only what
    its routes do. Serves from `with` (or `start()`) to `close()`."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def handle(self, path: str, body: Any) -> Reply:
        return 404, {"error": "not implemented"}

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler(endpoint: JsonEndpoint) -> type[BaseHTTPRequestHandler]:
    """The request handler class that hands `endpoint` each POST (an empty body reads as `{}`)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            status, out = endpoint.handle(self.path, body)
            raw = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler


class Endpoint(JsonEndpoint):
    """The conformance tests' agent: memory per session, an archive, and the behaviours of the module docstring."""

    def __init__(self, *, slow_s: float = 0.0, honour_deadline: bool = True, model_url: str | None = None,
                 fabricate: bool = False, wipe_archive: bool = True, surface: Any = None) -> None:
        super().__init__()
        self.slow_s, self.honour_deadline = slow_s, honour_deadline
        self.model_url, self.fabricate, self.wipe_archive = model_url, fabricate, wipe_archive
        self.surface = surface  # the /wt/surface body (a dict), or None: 404 (not implemented)
        self.memory: dict[str, list[str]] = {}
        self.archive: list[str] = []

    def handle(self, path: str, body: Any) -> Reply:
        if path == "/wt/reset":
            self.memory.clear()
            if self.wipe_archive:
                self.archive.clear()
            return 200, {"wt_inject": 1}
        if path == "/wt/inject":
            return 200, self.turn(body)
        if path == "/wt/surface" and self.surface is not None:
            return 200, self.surface
        return super().handle(path, body)

    def turn(self, body: dict) -> dict:
        session, text, timeout_s = body["session_id"], body["text"], float(body["timeout_s"])
        seen = self.memory.setdefault(session, [])
        seen.append(text)
        self.archive.append(text)
        if "slow" in text and self.slow_s:
            if self.honour_deadline and self.slow_s > timeout_s:
                time.sleep(timeout_s)
                return {"wt_inject": 1, "reply": "", "tool_calls": [], "error": f"timed out after {timeout_s:g} s"}
            time.sleep(self.slow_s)
        if self.model_url:
            return self.ask_model(text)
        return {"wt_inject": 1, "reply": "I remember: " + " | ".join(seen), "tool_calls": []}

    def ask_model(self, text: str) -> dict:
        request = urllib.request.Request(self.model_url + "/chat/completions", method="POST",
                                         data=json.dumps({"model": "m", "messages": [
                                             {"role": "user", "content": text}]}).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                answer = json.loads(response.read())["choices"][0]["message"]["content"]
        except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
            if self.fabricate:
                return {"wt_inject": 1, "reply": "Everything is fine, your order shipped.", "tool_calls": []}
            return {"wt_inject": 1, "reply": "", "tool_calls": [], "error": f"model failed: {exc}"}
        return {"wt_inject": 1, "reply": answer or "(empty)", "tool_calls": []}
