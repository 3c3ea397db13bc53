"""The span index's cost per span, side by side in one process, as ratios to a bare upb ParseFromString:
native (C), the pure-Python fallback (upb on a lean schema + a Python read of the few fields), the wire walk
in Python (the fallback before; now its reference on hostile input), and what the index stands in front of
(ParseFromString plus today's conversion into SpanRecords); serve's runs (`scan_runs_native`: the walk
without the GIL, then the runs, no object per span). Also the wire check serve runs before it
acknowledges a request kept by reference (wt_otel/ingest/wirecheck.py: does every byte decode?), native
and without the GIL, next to the ParseFromString it replaces.

Two requests of ~500 spans:
  agent  the ingest benchmark's request (bench/ingest_throughput.py: 50 agent sessions of 10 spans, chat
         spans with ~2 KB message attributes); 9 spans in 10 are GenAI.
  noise  500 HTTP server spans with the usual dozen semconv attributes; none is GenAI: the request serve
         now acknowledges after the index alone.

Each figure is the median of --rounds rounds (default 3), the implementations interleaved within a round so
machine noise hits them alike; absolute µs drift between machines, the ratios are the result.

    python bench/spanindex.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

sys.path.insert(0, str(Path(__file__).parent))
from import_throughput import kv  # noqa: E402
from ingest_throughput import build_request  # noqa: E402

from wt_otel.ingest import spanindex  # noqa: E402
from wt_otel.ingest.otlp import check_protobuf_backend, spans_from_request  # noqa: E402
from wt_otel.ingest.wirecheck import WireCheck  # noqa: E402


def noise_request(n: int = 500) -> bytes:
    spans = []
    for i in range(n):
        spans.append(Span(trace_id=(i // 5 + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                          parent_span_id=b"" if i % 5 == 0 else (i // 5 * 5 + 1).to_bytes(8, "big"),
                          name=f"GET /api/orders/{i}", kind=2, start_time_unix_nano=i, end_time_unix_nano=i + 9,
                          attributes=[kv("http.request.method", "GET"), kv("url.path", f"/api/orders/{i}"),
                                      kv("url.scheme", "https"), kv("server.address", "shop.example"),
                                      kv("server.port", 443), kv("http.route", "/api/orders/{id}"),
                                      kv("http.response.status_code", 200), kv("network.protocol.version", "1.1"),
                                      kv("user_agent.original", "Mozilla/5.0 (X11; Linux x86_64)"),
                                      kv("client.address", "10.0.0.7"), kv("db.system", "postgresql")]))
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource={"attributes": [kv("service.name", "shop")]}, scope_spans=[ScopeSpans(spans=spans)])]
    ).SerializeToString()


def decode(body: bytes) -> object:
    return list(spans_from_request(ExportTraceServiceRequest.FromString(body)))


def parse_only(body: bytes) -> object:
    return ExportTraceServiceRequest.FromString(body)


def measure(fns: dict[str, Callable[[bytes], object]], body: bytes, n_spans: int, rounds: int) -> dict[str, float]:
    """Median µs per span of each function over `rounds` interleaved rounds; a round repeats each function
    for ~50 ms, so a fast one is not timed on a single call."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    reps = {}
    for name, fn in fns.items():  # warm-up, and how many calls make ~50 ms
        t = time.perf_counter()
        fn(body)
        reps[name] = max(1, int(0.05 / max(time.perf_counter() - t, 1e-6)))
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(reps[name]):
                fn(body)
            times[name].append((time.perf_counter() - t) / reps[name] / n_spans * 1e6)
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    fns: dict[str, Callable[[bytes], object]] = {"parse": parse_only, "decode": decode}
    if spanindex.native_available():
        fns["native"] = spanindex.scan_native
        fns["runs"] = spanindex.scan_runs_native
        fns["check"] = WireCheck(ExportTraceServiceRequest, native=True).problem
    else:
        print("the native span index is not built (no C compiler at install): only the Python walks are measured")
    fns["python"] = spanindex.scan_python
    fns["wire"] = spanindex.scan_wire
    agent_body, agent_spans = build_request()
    workloads = {"agent": (agent_body, agent_spans), "noise": (noise_request(), 500)}
    print(f"protobuf backend: {check_protobuf_backend()}; median of {args.rounds} interleaved rounds\n")
    labels = {"parse": "bare ParseFromString (upb)", "decode": "ParseFromString + spans_from_request",
              "native": "span index, native (C)", "python": "span index, Python fallback (upb lean)",
              "wire": "span index, Python wire walk (before)", "check": "wire check, native (no GIL)",
              "runs": "serve's runs, native (walk without GIL)"}
    for workload, (body, n) in workloads.items():
        us = measure(fns, body, n, args.rounds)
        genai = sum(e.genai for e in spanindex.scan_python(body))
        print(f"{workload}: {n} spans ({genai} GenAI), {len(body) / 1024:.0f} KiB")
        print(f"  {'':40} {'µs/span':>8} {'x parse':>8}")
        for name in fns:
            print(f"  {labels[name]:40} {us[name]:8.2f} {us[name] / us['parse']:8.2f}")
        print(f"  the fallback is {us['wire'] / us['python']:.1f}x faster than the wire walk"
              + (f"; native is {us['python'] / us['native']:.1f}x faster than the fallback" if "native" in us else ""))
        print()


if __name__ == "__main__":
    main()
