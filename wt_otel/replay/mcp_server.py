"""Serve a recorded universe as a real MCP server (streamable HTTP or stdio, `mcp` SDK 2.x).

The agent under test connects to it exactly as it would to its production
tools, so replay exercises the agent's real MCP client. The low-level
`mcp.server.lowlevel.Server` is used rather than `MCPServer` decorators because
the tool list and the answers are data (the universe), not Python functions.

Wire rules (the reasons are the gaps Wind Tunnel left, see ARCHITECTURE.md):

- `tools/list` serves each tool's `input_schema` (given `"type": "object"` when
  the universe left the type out, since MCP requires an object root) and
  description; `outputSchema` only when `result_schema` is an object schema.
- `tools/call` always returns structured content. Up to protocol 2025-11-25
  `structuredContent` must be a JSON object, so objects go as they are and any
  other result (array, string, number, boolean, null) is wrapped as
  `{"result": value}`. The wrap is applied on every protocol version (2026-07-28
  would accept a bare value) so the shape a runner or agent sees never depends
  on what the client negotiated.
- Text content: a string result is the text itself (not JSON-quoted); anything
  else is its JSON text.
- `isError` is true exactly when the engine answered with an error (a
  `fail_call` miss or a recorded failure), never because a normal result
  happens to hold an `"error"` key.

Next to `/mcp` the same server answers `GET /wt/calls` (the call log, for a
runner in another process) and `POST /wt/reset-calls` (start a new run: clear
the log, rewind sequence tools).

`serve_stdio` answers the same protocol on stdin/stdout, for an agent whose MCP
client launches its tool server as a command (stdio is the transport most MCP
client configurations name): the agent's `command` becomes
`wt-otel universe serve FILE --stdio`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from typing import Any

import anyio
import mcp.types as types
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from wt_otel import __version__
from wt_otel.replay.universe import Answer, RecordedUniverse

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8648
MCP_PATH = "/mcp"
# A client that never closes its session must not grow the server without bound (issue 13): sessions idle
# this long are ended (their id then answers 404 and the client re-initializes), and at most
# MAX_SESSIONS are open at once (503 for one more). A replay's sessions live for one run, seconds to minutes.
SESSION_IDLE_TIMEOUT = 300.0
MAX_SESSIONS = 1_000


def _cancelled(exc: BaseException | None) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, asyncio.CancelledError)


class QuietShutdown(logging.Filter):
    """Drops uvicorn's lines about requests it cut at shutdown: `stop()` asks for that (a held `slow` answer
    must not keep it waiting), so "Cancel N running task(s)" and the `CancelledError` traceback of each cut
    request are expected, not errors, and must not reach the user's terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Cancel %s running task(s)"):
            return False
        return not (record.exc_info and _cancelled(record.exc_info[1]))


def _quiet_uvicorn_shutdown() -> None:
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, QuietShutdown) for f in log.filters):
        log.addFilter(QuietShutdown())


def is_object_schema(schema: dict[str, Any] | None) -> bool:
    return schema is not None and schema.get("type") == "object"


def structured(result: Any) -> dict[str, Any]:
    """`structuredContent` for any result: objects as they are, anything else as `{"result": value}`."""
    return result if isinstance(result, dict) else {"result": result}


def as_text(result: Any) -> str:
    """Text content: strings verbatim (an agent must read `Paris`, not `"Paris"`), the rest as JSON."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False)


def call_result(answer: Answer) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=as_text(answer.result))],
        structured_content=structured(answer.result),
        is_error=answer.is_error,
    )


def mcp_tools(engine: RecordedUniverse) -> list[types.Tool]:
    tools = []
    for t in engine.universe.tools:
        schema = {"type": "object", **t.input_schema}
        tools.append(
            types.Tool(
                name=t.name,
                description=t.description or None,
                input_schema=schema,
                output_schema=t.result_schema if is_object_schema(t.result_schema) else None,
            )
        )
    return tools


def build_server(engine: RecordedUniverse) -> Server[Any]:
    """The MCP protocol side: `tools/list` and `tools/call` answered from `engine`."""
    tools = mcp_tools(engine)
    # A recording's answer is built once by the engine and shared by every hit on it, so its wire form (the
    # dump the SDK would make of `call_result(answer)`; the SDK copies and re-validates what a handler
    # returns) is built once too. At most two per recording (exact, keyed); misses and perturbed answers
    # are built per call.
    wire: dict[tuple[str, int], dict[str, Any]] = {}

    def result_for(answer: Answer) -> Any:
        if answer.recording is None or not engine.is_recorded(answer):
            return call_result(answer)
        key = (answer.match, answer.recording)
        dumped = wire.get(key)
        if dumped is None:
            dumped = wire[key] = call_result(answer).model_dump(by_alias=True, mode="json", exclude_none=True)
        return dumped

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        answer = engine.call(params.name, params.arguments or {})  # witnessed on arrival
        delay = engine.delay_for(params.name)  # a `slow` robustness run: answer past the agent's deadline
        if delay:
            await anyio.sleep(delay)
        return result_for(answer)

    # The 2026-07-28 transport checks a call's `Mcp-Param-*` headers against the tool's input schema; without
    # this lookup the SDK finds the schema by running the whole tools/list handler on every tools/call.
    schemas = {t.name: t.input_schema for t in tools}
    return Server("wt-otel-universe", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool,
                  get_tool_input_schema=schemas.get)


def serve_stdio(engine: RecordedUniverse) -> None:
    """Answer MCP on this process's stdin/stdout until the client closes stdin. stdout is the protocol's
    alone: nothing else may write to it meanwhile (log to stderr)."""
    from mcp.server.stdio import stdio_server

    server = build_server(engine)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


class UniverseMCPServer:
    """A universe served over streamable HTTP from a background thread.

    `start()` returns the bound MCP URL (port 0 picks a free one); `stop()`
    shuts uvicorn down and joins the thread. A stopped server can be started
    again (the SDK's session manager runs once, so each start builds a new app).

    `json_response=True` (the default) answers each POST with one JSON body
    instead of an SSE stream: both are streamable HTTP, the universe never
    sends mid-call notifications, and JSON is the faster round trip for
    handshake-era clients (bench/mcp_roundtrip.py measures tools/call).
    """

    def __init__(
        self, engine: RecordedUniverse, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, json_response: bool = True,
        session_idle_timeout: float = SESSION_IDLE_TIMEOUT, max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.engine = engine
        self.session_idle_timeout = session_idle_timeout
        self.max_sessions = max_sessions
        self.host = host
        self.port = port
        self.json_response = json_response
        self.url: str | None = None
        self._uvicorn: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ HTTP app

    def app(self) -> Any:
        """The ASGI app: `/mcp` plus the call-log routes."""

        async def calls(request: Request) -> JSONResponse:
            log = self.engine.call_log()
            return JSONResponse({"calls": log, "count": len(log)})

        async def reset_calls(request: Request) -> JSONResponse:
            self.engine.reset()
            return JSONResponse({"reset": True})

        routes = [Route("/wt/calls", calls, methods=["GET"]), Route("/wt/reset-calls", reset_calls, methods=["POST"])]
        return build_server(self.engine).streamable_http_app(
            streamable_http_path=MCP_PATH, host=self.host, json_response=self.json_response,
            custom_starlette_routes=routes, session_idle_timeout=self.session_idle_timeout,
            max_sessions=self.max_sessions,
        )

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 10.0) -> str:
        """Bind, serve from a daemon thread, and return the MCP URL once uvicorn accepts connections.

        The socket is bound here, in the caller's thread, so a port in use
        raises `OSError` at once instead of dying inside the server thread, and
        the bound port (for port 0) is known without asking uvicorn.
        """
        if self._thread is not None:
            raise RuntimeError("the universe server is already running")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # proto must say TCP: asyncio sets TCP_NODELAY on accepted connections only when it does, and
        # without it every response stalls ~40 ms on Nagle + delayed ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        # a held answer (a `slow` robustness run) must not keep stop() waiting: cut in-flight calls after 1 s,
        # quietly (QuietShutdown)
        _quiet_uvicorn_shutdown()
        # log_config=None: uvicorn's lines go through the process's logging (the CLI's one handler), not a
        # handler of uvicorn's own bound to whatever stderr was at start
        config = uvicorn.Config(self.app(), log_level="warning", log_config=None, lifespan="on",
                                timeout_graceful_shutdown=1)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="wt-otel-universe", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                thread.join(2)
                sock.close()
                raise RuntimeError(f"the universe server did not start on {self.host}:{self.port}")
            time.sleep(0.005)
        self._uvicorn, self._thread = server, thread
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{sock.getsockname()[1]}{MCP_PATH}"
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        if self._uvicorn is None or self._thread is None:
            return
        self._uvicorn.should_exit = True
        self._thread.join(timeout)
        self._uvicorn, self._thread, self.url = None, None, None

    def __enter__(self) -> UniverseMCPServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ the runner's view

    def call_log(self) -> list[dict[str, Any]]:
        return self.engine.call_log()

    def reset(self) -> None:
        self.engine.reset()
