"""The universe MCP server expires sessions clients never close (issue 13, item 6): 3,000 abandoned sessions
used to grow it by ~104 MB for good. An idle session is ended; its id then answers 404."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from wt_otel.contracts.universe import load_universe
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse

UNIVERSE = {"windtunnel_universe": 1, "tools": [{"name": "count", "input_schema": {"type": "object"}}]}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def _post(url: str, payload: dict, **headers: str) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={**HEADERS, **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.status, {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, {}


def _open_session(url: str) -> str:
    status, headers = _post(url, INIT)
    assert status == 200, status
    return headers["mcp-session-id"]


def _ping(url: str, session: str) -> int:
    return _post(url, {"jsonrpc": "2.0", "id": 2, "method": "ping"},
                 **{"mcp-session-id": session, "mcp-protocol-version": "2025-03-26"})[0]


def test_abandoned_sessions_expire_and_are_bounded() -> None:
    server = UniverseMCPServer(RecordedUniverse(load_universe(UNIVERSE)), port=0, session_idle_timeout=0.3,
                               max_sessions=5)
    url = server.start()
    try:
        sessions = [_open_session(url) for _ in range(5)]  # never closed
        assert _ping(url, sessions[0]) == 200
        assert _post(url, INIT)[0] == 503  # the bound
        deadline = time.monotonic() + 10
        while _post(url, INIT)[0] == 503:  # room again once the idle ones expire (a ping would keep one alive)
            assert time.monotonic() < deadline, "idle MCP sessions never expired"
            time.sleep(0.2)
        assert _ping(url, sessions[1]) == 404  # its id is gone: the client re-initializes
    finally:
        server.stop()
