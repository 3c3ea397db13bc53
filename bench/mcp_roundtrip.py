"""MCP `tools/call` round trips: the universe MCP server next to a bare MCP SDK server with one echo tool.

Both servers are the real `mcp` SDK (`mcp.server.lowlevel.Server`, streamable HTTP with JSON responses,
uvicorn in a thread, the socket bound the same way), in one child process, called by the same real MCP
client (`mcp.Client`) from this process over loopback, sequentially. The bare server has one tool, `echo`,
which answers its arguments as text and structured content (the shape the universe answers in), and is
given `get_tool_input_schema`, so the SDK never lists tools to check a call: the least an SDK server can
do per call. Ours serves a universe of 1,000 recordings (10 tools) and is called with keyed hits (an
extra argument defeats the exact key), as an agent's retries and rephrasings are.

The two servers are called in alternating blocks of `--block` calls (two clients open at once), so drift
on a shared machine (other processes, CPU frequency) lands on both alike. For each client mode (`legacy`:
the initialize handshake; `auto`: the 2026-07-28 per-request protocol where the SDK offers it) it prints
p50/p99 for each server and the ratio ours / bare (issue 15's goal: p50 <= 1.2x), and the servers'
process CPU time per call over each server's blocks (from /proc: unlike latency, it does not move with the
load other processes put on a shared machine).

    python bench/mcp_roundtrip.py [--calls 2000] [--block 100] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import httpx2
import mcp.types as types
import uvicorn
from mcp import Client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from wt_otel.contracts.universe import load_universe
from wt_otel.replay.mcp_server import MCP_PATH, UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse

TOOLS, RECORDINGS = 10, 1_000
ECHO_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}


def universe() -> dict[str, Any]:
    tools = [{"name": f"tool_{t}", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
              "result_schema": {"type": "object"}} for t in range(TOOLS)]
    recordings = [{"tool_name": f"tool_{i % TOOLS}", "args": {"query": f"client {i}", "region": "eu"},
                   "result": {"id": i, "name": f"client {i}", "email": f"c{i}@example.test"}}
                  for i in range(RECORDINGS)]
    return {"windtunnel_universe": 1, "tools": tools, "recordings": recordings,
            "matching": {"arg_keys": {t["name"]: ["query"] for t in tools}}}


def bare_echo_server() -> Server[Any]:
    """The least an MCP SDK server can do per call: one tool that hands its arguments back."""
    tool = types.Tool(name="echo", description="answers its arguments", input_schema=ECHO_SCHEMA)

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        args = params.arguments or {}
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(args))], structured_content=args)

    return Server("bare-echo", on_list_tools=list_tools, on_call_tool=call_tool,
                  get_tool_input_schema=lambda name: ECHO_SCHEMA if name == "echo" else None)


def serve(app: Any) -> tuple[uvicorn.Server, threading.Thread, str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio sets TCP_NODELAY
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}{MCP_PATH}"


def pct(samples: list[float], p: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1]


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU time (/proc, clock ticks): what the servers spent, whatever the load."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Samples:
    """One server's round-trip latencies and the server process's CPU time over its blocks."""

    def __init__(self) -> None:
        self.latency: list[float] = []
        self.cpu = 0.0


async def round_trips(ours_url: str, bare_url: str, mode: str, calls: int, block: int, pid: int
                      ) -> tuple[Samples, Samples]:
    ours, bare = Samples(), Samples()
    async with Client(ours_url, mode=mode) as ours_client, Client(bare_url, mode=mode) as bare_client:
        await ours_client.list_tools()
        await bare_client.list_tools()
        for i in range(50):  # warm-up
            await ours_client.call_tool(f"tool_{i % TOOLS}", {"query": f"client {i}"})
            await bare_client.call_tool("echo", {"query": f"client {i}"})
        i = 0
        while i < calls:
            cpu = cpu_seconds(pid)
            for _ in range(block):
                k = i % RECORDINGS
                t0 = time.perf_counter()
                r = await ours_client.call_tool(f"tool_{k % TOOLS}", {"query": f"client {k}", "verbose": True})
                ours.latency.append(time.perf_counter() - t0)
                assert not r.is_error and r.structured_content["id"] == k, r
                i += 1
            cpu, ours.cpu = cpu_seconds(pid), ours.cpu + cpu_seconds(pid) - cpu
            for j in range(block):
                t0 = time.perf_counter()
                r = await bare_client.call_tool("echo", {"query": f"client {j}", "verbose": True})
                bare.latency.append(time.perf_counter() - t0)
                assert not r.is_error
            bare.cpu += cpu_seconds(pid) - cpu
    return ours, bare


def serve_both(conn: Connection) -> None:
    """The servers' process: both servers up, their URLs sent back, then serve until told to stop."""
    ours_server = UniverseMCPServer(RecordedUniverse(load_universe(universe())), port=0)
    ours_url = ours_server.start()
    bare, bare_thread, bare_url = serve(bare_echo_server().streamable_http_app(streamable_http_path=MCP_PATH,
                                                                               json_response=True))
    conn.send((ours_url, bare_url))
    conn.recv()
    ours_server.stop()
    bare.should_exit = True
    bare_thread.join(5)


def run_once(calls: int, block: int) -> dict[str, tuple[float, float, float]]:
    """One measurement per client mode: the ours / bare ratios of p50, p99 and server CPU per call.

    The servers run in another process, as they do for an agent under test: in one process the client and
    the server would take turns on the GIL, and the wait would be counted as the server's.
    """
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=serve_both, args=(there,), daemon=True)
    proc.start()
    ours_url, bare_url = here.recv()
    assert proc.pid is not None
    out = {}
    try:
        for mode in ("legacy", "auto"):
            httpx2.post(ours_url.removesuffix(MCP_PATH) + "/wt/reset-calls")
            o, b = asyncio.run(round_trips(ours_url, bare_url, mode, calls, block, proc.pid))
            o50, o99 = pct(o.latency, 50) * 1e3, pct(o.latency, 99) * 1e3
            b50, b99 = pct(b.latency, 50) * 1e3, pct(b.latency, 99) * 1e3
            ocpu, bcpu = o.cpu / len(o.latency) * 1e6, b.cpu / len(b.latency) * 1e6
            out[mode] = (o50 / b50, o99 / b99, ocpu / bcpu)
            print(f"  client mode {mode}")
            print(f"    bare MCP echo: p50 {b50:6.3f} ms  p99 {b99:6.3f} ms  server CPU {bcpu:5.0f} us/call")
            print(f"    universe:      p50 {o50:6.3f} ms  p99 {o99:6.3f} ms  server CPU {ocpu:5.0f} us/call   "
                  f"ratio p50 {o50 / b50:4.2f}x  p99 {o99 / b99:4.2f}x  CPU {ocpu / bcpu:4.2f}x")
    finally:
        here.send("stop")
        proc.join(15)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=2_000, help="calls per server and client mode")
    ap.add_argument("--block", type=int, default=100, help="calls to one server before switching to the other")
    ap.add_argument("--runs", type=int, default=1, help="repeat the whole measurement; print the medians")
    args = ap.parse_args()
    print(f"tools/call round trips on loopback: {args.calls:,} sequential calls per server and client mode, "
          f"alternating blocks of {args.block}, after 50 warm-up")
    runs = [run_once(args.calls, args.block) for _ in range(args.runs)]
    if args.runs > 1:
        for mode in runs[0]:
            p50, p99, cpu = (statistics.median(r[mode][k] for r in runs) for k in range(3))
            print(f"medians of {args.runs} runs, client mode {mode}: universe / bare MCP  p50 {p50:4.2f}x  "
                  f"p99 {p99:4.2f}x  server CPU {cpu:4.2f}x")


if __name__ == "__main__":
    main()
