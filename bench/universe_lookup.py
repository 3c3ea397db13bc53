"""Universe lookups and MCP round trips, each next to the cheapest thing that could do the same job.

  (1) lookups/s against a universe of 10k recordings (10 tools x 1k), through
      `RecordedUniverse.call` (the whole path: canonical key, index hit, call
      log entry, lock), for an exact hit and for a keyed hit (an extra argument
      defeats the exact key), next to a plain dict holding the same canonical
      keys (canonical_json of the args, then `dict.get`). The ratio is the
      price of the engine's bookkeeping over the bare lookup.
  (2) `tools/call` round trips on loopback with the real `mcp` client over
      streamable HTTP (p50/p99, sequential), next to a bare HTTP POST echo
      served by the same web stack (starlette + uvicorn in a thread, the
      client the mcp SDK uses, `httpx2`), carrying a JSON-RPC body of the same
      size. The ratio is the price of MCP (JSON-RPC, session, SSE framing,
      result validation) over plain HTTP.

    python bench/universe_lookup.py [--recordings 10000] [--lookups 200000] [--round-trips 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import threading
import time
from typing import Any

import httpx2
import uvicorn
from mcp import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from wt_otel.contracts.universe import load_universe
from wt_otel.model.parts import canonical_json
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse

TOOLS = 10
RT_RECORDINGS = 1000  # the served universe for round trips


def build_universe(n: int) -> dict[str, Any]:
    tools = [{"name": f"tool_{t}", "input_schema": {"type": "object"}, "result_schema": {"type": "object"}}
             for t in range(TOOLS)]
    recordings = [
        {"tool_name": f"tool_{i % TOOLS}",
         "args": {"query": f"client {i}", "region": ["eu", "us", "apac"][i % 3], "limit": i % 50,
                  "filters": {"active": True, "tags": ["a", "b"]}},
         "result": {"id": i, "name": f"client {i}", "email": f"c{i}@example.test"}}
        for i in range(n)
    ]
    arg_keys = {t["name"]: ["query"] for t in tools}
    return {"windtunnel_universe": 1, "tools": tools, "recordings": recordings, "matching": {"arg_keys": arg_keys}}


def rate(fn: Any, queries: list[tuple[str, dict]], before: Any = None, repeat: int = 3) -> float:
    """Best-of-`repeat` calls per second of `fn(tool, args)` over `queries`; `before()` runs untimed per pass."""
    best = float("inf")
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        for tool, args in queries:
            fn(tool, args)
        best = min(best, time.perf_counter() - t0)
    return len(queries) / best


def bench_lookups(n: int, lookups: int) -> None:
    data = build_universe(n)
    engine = RecordedUniverse(load_universe(data))
    recs = data["recordings"]
    rng = random.Random(7)
    # fresh dicts in another key order, as a decoded request would be
    exact_q = [(r["tool_name"], dict(reversed(list(r["args"].items())))) for r in rng.choices(recs, k=lookups)]
    keyed_q = [(t, {**a, "verbose": True}) for t, a in exact_q]

    plain_exact = {(r["tool_name"], canonical_json(r["args"])): r["result"] for r in recs}
    plain_keyed = {(r["tool_name"], canonical_json({"query": r["args"]["query"]})): r["result"] for r in recs}

    def engine_call(tool: str, args: dict) -> Any:
        return engine.call(tool, args)

    def plain_exact_get(tool: str, args: dict) -> Any:
        return plain_exact.get((tool, canonical_json(args)))

    def plain_keyed_get(tool: str, args: dict) -> Any:
        return plain_keyed.get((tool, canonical_json({"query": args["query"]})))

    assert engine.call(*exact_q[0]).match == "exact" and engine.call(*keyed_q[0]).match == "keyed"
    print(f"lookups: {n:,} recordings, {lookups:,} lookups per pass, best of 3")
    for label, queries, plain in (("exact", exact_q, plain_exact_get), ("keyed", keyed_q, plain_keyed_get)):
        ours = rate(engine_call, queries, before=engine.reset)  # a fresh call log per pass, as per run
        base = rate(plain, queries)
        print(f"  {label}: engine {ours:>12,.0f}/s   plain dict {base:>12,.0f}/s   ratio {base / ours:5.2f}x")
    engine.reset()


# ---------------------------------------------------------------- round trips


def serve(app: Any) -> tuple[uvicorn.Server, threading.Thread, int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio sets TCP_NODELAY
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, sock.getsockname()[1]


def pct(samples: list[float], p: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[p - 1] if p < 100 else max(samples)


async def mcp_round_trips(url: str, n: int, mode: str) -> list[float]:
    out = []
    async with Client(url, mode=mode) as client:
        await client.list_tools()
        for i in range(50):  # warm-up
            await client.call_tool("tool_0", {"query": f"client {i * TOOLS}"})
        for i in range(n):
            k = i % RT_RECORDINGS
            t0 = time.perf_counter()
            r = await client.call_tool(f"tool_{k % TOOLS}", {"query": f"client {k}", "verbose": True})
            out.append(time.perf_counter() - t0)
            assert not r.is_error
    return out


async def echo_round_trips(url: str, n: int, body: bytes) -> list[float]:
    out = []
    async with httpx2.AsyncClient() as client:
        for _ in range(50):
            await client.post(url, content=body, headers={"content-type": "application/json"})
        for _ in range(n):
            t0 = time.perf_counter()
            r = await client.post(url, content=body, headers={"content-type": "application/json"})
            r.json()
            out.append(time.perf_counter() - t0)
    return out


def bench_round_trips(n: int) -> None:
    data = build_universe(RT_RECORDINGS)
    server = UniverseMCPServer(RecordedUniverse(load_universe(data)), port=0)
    url = server.start()

    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    echo_server, echo_thread, port = serve(Starlette(routes=[Route("/echo", echo, methods=["POST"])]))
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "tool_1", "arguments": {"query": "client 1", "verbose": True}}}).encode()
    try:
        print(f"tools/call round trips on loopback: {n:,} sequential calls (keyed hits), after 50 warm-up")
        base = asyncio.run(echo_round_trips(f"http://127.0.0.1:{port}/echo", n, body))
        b50, b99 = pct(base, 50) * 1e3, pct(base, 99) * 1e3
        print(f"  bare HTTP POST echo (starlette/uvicorn, httpx2): p50 {b50:6.2f} ms   p99 {b99:6.2f} ms")
        for mode in ("legacy", "auto"):
            server.reset()
            ours = asyncio.run(mcp_round_trips(url, n, mode))
            o50, o99 = pct(ours, 50) * 1e3, pct(ours, 99) * 1e3
            print(f"  MCP tools/call, client mode {mode:<6}:              p50 {o50:6.2f} ms   p99 {o99:6.2f} ms"
                  f"   ratio p50 {o50 / b50:4.1f}x  p99 {o99 / b99:4.1f}x")
    finally:
        server.stop()
        echo_server.should_exit = True
        echo_thread.join(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recordings", type=int, default=10_000)
    ap.add_argument("--lookups", type=int, default=200_000)
    ap.add_argument("--round-trips", type=int, default=2_000)
    args = ap.parse_args()
    bench_lookups(args.recordings, args.lookups)
    bench_round_trips(args.round_trips)


if __name__ == "__main__":
    main()
