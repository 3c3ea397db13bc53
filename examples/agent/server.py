"""The Contract C wire (../shared/seeds/0002-inject-protocol.md) in front of `ReferenceAgent`, on starlette.

    POST /wt/inject   {"wt_inject": 1, "session_id", "text", "timeout_s"} -> {"wt_inject": 1, "reply", "tool_calls"}
    POST /wt/reset    {"wt_inject": 1, "universe_url"?, "llm_base_url"?} -> {"wt_inject": 1}, only once every
                      session is gone; the agent then uses the tools and model at the URLs given (the ones a
                      replay serves on free ports), or its configured ones when none are given
    POST /wt/surface  {"wt_inject": 1} -> {"wt_inject": 1, "surface": {...}}

A malformed request is a contract-level failure (400 with a message naming the field and the rule); anything
that goes wrong while the agent runs is an agent-level failure (200, `error` set, `tool_calls` still listed).
Unknown request fields are ignored, except the demo extra `"wt_incident": "<id>"`, which marks the turn's
root span with `wt.incident` when telemetry is on.

Run it with `python -m examples.agent [--host H] [--port P]` from the repository root; tests use
`create_app(config)` or `start_in_thread(config, port=0)`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from wt_otel import recording

from .config import DEFAULT_HOST, DEFAULT_PORT, AgentConfig
from .reference import ReferenceAgent

VERSION = 1


class BadRequest(Exception):
    """A contract-level problem with a request; its message names the field and how to fix it."""


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object with a supported `wt_inject` version, else `BadRequest`."""
    try:
        body = await request.json()
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON ({exc}); send a JSON object like {{\"wt_inject\": 1}}") from exc
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object, not {type(body).__name__}")
    version = body.get("wt_inject")
    if type(version) is not int:
        raise BadRequest(f"wt_inject: required integer protocol version, got {version!r}; send \"wt_inject\": 1")
    if version != VERSION:
        raise BadRequest(f"wt_inject: unsupported protocol version {version}; this endpoint speaks version {VERSION}")
    return body


def _inject_fields(body: dict[str, Any]) -> tuple[str, str, float, str | None]:
    session_id, text, timeout_s = body.get("session_id"), body.get("text"), body.get("timeout_s")
    incident = body.get("wt_incident")
    if not isinstance(session_id, str) or not session_id:
        raise BadRequest(f"session_id: required non-empty string (minted by the driver), got {session_id!r}")
    if not isinstance(text, str):
        raise BadRequest(f"text: required string (the newest user turn only), got {text!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise BadRequest(f"timeout_s: required positive number of seconds, got {timeout_s!r}")
    if incident is not None and (not isinstance(incident, str) or not incident):
        raise BadRequest(f"wt_incident: optional non-empty string (an incident id), got {incident!r}")
    return session_id, text, float(timeout_s), incident


def _reset_urls(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The optional `universe_url` and `llm_base_url` of a reset: where the driver serves this run's tools and
    model (its servers bind free ports, so it says where)."""
    urls = []
    for key in ("universe_url", "llm_base_url"):
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not value.startswith(("http://", "https://"))):
            raise BadRequest(f"{key}: optional http(s) URL (where the driver serves this run's "
                             f"{'tools' if key == 'universe_url' else 'model'}), got {value!r}")
        urls.append(value)
    return urls[0], urls[1]


def _bad_request(exc: BadRequest) -> JSONResponse:
    return JSONResponse({"wt_inject": VERSION, "error": str(exc)}, status_code=400)


def create_app(config: AgentConfig) -> Starlette:
    """The ASGI app. Its lifespan configures telemetry (process-wide) and starts and closes the agent."""
    agent = ReferenceAgent(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tel = recording.configure(service_name=config.service_name, otlp_file=config.otlp_file,
                                  otlp_endpoints=[e for e in (config.otlp_endpoint, *config.otlp_extra_endpoints) if e],
                                  otlp_protocol=config.otlp_protocol)
        await agent.start()
        try:
            yield
        finally:
            await agent.aclose()
            tel.shutdown()

    async def inject(request: Request) -> JSONResponse:
        try:
            session_id, text, timeout_s, incident = _inject_fields(await _body(request))
        except BadRequest as exc:
            return _bad_request(exc)
        outcome = await agent.inject(session_id, text, timeout_s, incident)
        response: dict[str, Any] = {"wt_inject": VERSION, "reply": outcome.reply, "tool_calls": outcome.tool_calls}
        if outcome.model:  # additive: the model the response named, so the driver's ledger can name it
            response["model"] = outcome.model
        if outcome.error:
            response["error"] = outcome.error
        return JSONResponse(response)

    async def reset(request: Request) -> JSONResponse:
        try:
            universe_url, llm_base_url = _reset_urls(await _body(request))
        except BadRequest as exc:
            return _bad_request(exc)
        await agent.reset()
        await agent.retarget(universe_url, llm_base_url)
        return JSONResponse({"wt_inject": VERSION})

    async def surface(request: Request) -> JSONResponse:
        try:
            await _body(request)
        except BadRequest as exc:
            return _bad_request(exc)
        try:
            reported = await agent.surface()
        except Exception as exc:  # the tool server is down: an honest failure, never a partial surface
            return JSONResponse({"wt_inject": VERSION, "error": f"cannot list tools at {agent.config.mcp_url}: "
                                 f"{type(exc).__name__}: {exc}"}, status_code=503)
        # `model` is additive: surface goldens (`wt-otel surface`) then catch a model swap too
        return JSONResponse({"wt_inject": VERSION, "surface": reported, "model": agent.config.model})

    app = Starlette(lifespan=lifespan, routes=[
        Route("/wt/inject", inject, methods=["POST"]),
        Route("/wt/reset", reset, methods=["POST"]),
        Route("/wt/surface", surface, methods=["POST"]),
    ])
    app.state.agent = agent
    return app


class AgentServer:
    """The app served by uvicorn from a daemon thread; `url` is the base URL once started."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, url: str) -> None:
        self._server, self._thread, self.url = server, thread, url

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> AgentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bind(host: str, port: int) -> socket.socket:
    """Bind in the caller's thread, so a port in use fails at once and port 0's choice is known.

    proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets only then (else ~40 ms Nagle stalls).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def start_in_thread(config: AgentConfig, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                    timeout: float = 20.0) -> AgentServer:
    """Serve `create_app(config)` from a daemon thread and return once it accepts connections."""
    sock = bind(host, port)
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="wt-reference-agent", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(2)
            sock.close()
            raise RuntimeError(f"the reference agent did not start on {host}:{port}")
        time.sleep(0.01)
    return AgentServer(server, thread, _url(sock))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=int(os.environ.get("WT_AGENT_PORT") or DEFAULT_PORT),
                        help="0 picks a free port (printed) [$WT_AGENT_PORT, else %(default)s]")
    args = parser.parse_args(argv)
    config = AgentConfig.from_env()
    sock = bind(args.host, args.port)
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", lifespan="on"))
    tools = config.mcp_url or "no tools"
    model = f"{config.model} at {config.openai_base_url or 'the OpenAI default'}"
    sinks = [s for s in (config.otlp_endpoint, *config.otlp_extra_endpoints, config.otlp_file) if s]
    print(f"reference agent: tools {tools}; model {model}; telemetry {', '.join(sinks) or 'off'}", flush=True)

    async def serve() -> None:  # announce only once uvicorn accepts, so a parent can wait for this line
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started:
            print(f"Contract C endpoint listening on {_url(sock)}", flush=True)
        await task

    with contextlib.suppress(KeyboardInterrupt):  # uvicorn shuts down gracefully, then re-raises Ctrl-C
        asyncio.run(serve())
    return 0 if server.started else 1
