"""Scale-out: N `wt-otel serve` processes behind a conversation-keyed split, side by side with N bare grpcio sinks.

The split is what `collector-config/otelcol-loadbalancing.yaml` does (the Collector's `loadbalancing` exporter
on the routing key its transform writes: `conv:<conversation id>`, else `trace:<trace id>`), done in the load
generator: every request's spans are regrouped by that key and each group goes to the backend the key
hashes to, so all spans of a conversation (a session) reach the same serve. (Plain SO_REUSEPORT balances
connections, not conversations: a session's spans would land on several serves and each would write a
fragment.) Each serve runs with its default process count (`processes.receivers: auto`).
It is done at the byte level, so the router costs next to nothing and the figures are the backends': each
session of the request of `ingest_throughput.py` (50 agent sessions x 10 spans) is pre-serialized as one
`ResourceSpans` entry, protobuf concatenation of entries is a valid request, and per send the fresh ids
(trace and conversation ids, as in ingest_throughput) are written in and the entries grouped by
`crc32(routing key) % N`.

For each N of `--ns`: N serves (data dirs on /dev/shm), `--threads` clients sending back to back for
`--seconds` (refused sends back off 50 ms, as in ingest_throughput), then the same against N bare sinks.
It prints, per N, serve's sessions written/s (counted over the window after `--settle` seconds) and accepted
spans/s, the sinks' spans/s, serve / sink, and the speed-up over N=1; and checks the split: every session
of a request is written by exactly one serve (no key is written by two serves). The serves are killed after
their window (what they would write at SIGTERM is not the point here).

    python bench/scaleout.py [--ns 1,2,4] [--seconds 15] [--settle 4] [--threads 4] [--data-root /dev/shm]
                             [--serve-config FILE]

On a 2-core machine N = 2 gained a little when one serve was one process (1.38x the sessions written a
second, measured at stop 23, its GIL shared by the receivers and the pipeline thread); a serve is two
processes now (receivers, session core), so the cores are taken at N = 1 already; beyond that the serves
share the cores with each other and the load, and the run shows the routing works and what N costs. Run it
on a machine with cores to spare for the scaling.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

sys.path.insert(0, str(Path(__file__).parent))
from import_throughput import kv, session_spans  # noqa: E402
from ingest_throughput import EXPORT, MARK, SESSIONS_PER_REQUEST, Server, start_serve  # noqa: E402


def session_entries() -> list[tuple[bytes, bytes]]:
    """(session number as 8 bytes, one serialized `resource_spans` entry) per session of a request."""
    entries = []
    for n in range(1, SESSIONS_PER_REQUEST + 1):
        spans = []
        for span in session_spans(n, 1_700_000_000_000_000_000 + n * 1_000_000):
            span.trace_id = MARK + n.to_bytes(8, "big")
            for a in span.attributes:
                if a.key == "gen_ai.conversation.id":
                    a.value.string_value = f"conv-{MARK.decode()}-{n}"
            spans.append(span)
        entry = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
            resource={"attributes": [kv("service.name", "bench-agent")]},
            scope_spans=[ScopeSpans(spans=spans)])]).SerializeToString()
        entries.append((n.to_bytes(8, "big"), entry))
    return entries


class TraceSplit:
    """Per send: fresh ids into every entry, entries grouped by their routing key's hash (the conversation id
    the collector config routes on; every bench session has one); returns one request body per backend (empty
    when no key hashed to it)."""

    def __init__(self, backends: int) -> None:
        self.backends = backends
        self.entries = session_entries()
        self.spans_per_entry = len(ExportTraceServiceRequest.FromString(self.entries[0][1])
                                   .resource_spans[0].scope_spans[0].spans)

    def split(self, send: int) -> list[tuple[bytes, int]]:
        fresh = f"{send:08x}".encode()
        parts: list[list[bytes]] = [[] for _ in range(self.backends)]
        for suffix, entry in self.entries:
            key = b"conv:conv-" + fresh + b"-" + str(int.from_bytes(suffix, "big")).encode()
            parts[zlib.crc32(key) % self.backends].append(entry.replace(MARK, fresh))
        return [(b"".join(p), len(p) * self.spans_per_entry) for p in parts]


@dataclass
class Result:
    seconds: float = 0.0
    accepted_spans: int = 0
    refused: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def load(targets: list[str], seconds: float, threads: int, counter) -> Result:
    """`threads` clients, each with a channel per backend, send split requests back to back."""
    split = TraceSplit(len(targets))
    result, lock = Result(), threading.Lock()
    deadline = time.monotonic() + seconds

    def client() -> None:
        channels = [grpc.insecure_channel(t, options=[("grpc.use_local_subchannel_pool", 1)]) for t in targets]
        stubs = [c.unary_unary(EXPORT, request_serializer=None,
                               response_deserializer=ExportTraceServiceResponse.FromString) for c in channels]
        ok, refused, errors = 0, 0, {}
        while time.monotonic() < deadline:
            for stub, (body, spans) in zip(stubs, split.split(next(counter)), strict=True):
                if not spans:
                    continue
                try:
                    stub(body, timeout=30)
                    ok += spans
                except grpc.RpcError as e:
                    if e.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                        refused += 1
                    else:
                        errors[e.code().name] = errors.get(e.code().name, 0) + 1
                    time.sleep(0.05)
        for c in channels:
            c.close()
        with lock:
            result.accepted_spans += ok
            result.refused += refused
            for k, v in errors.items():
                result.errors[k] = result.errors.get(k, 0) + v

    workers = [threading.Thread(target=client) for _ in range(threads)]
    start = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    result.seconds = time.monotonic() - start
    return result


def written(serves: list[Server]) -> float:
    return sum(s.metrics().get("wt_otel_sessions_written_total", 0) for s in serves)


def run_serves(n: int, root: Path, args, counter) -> tuple[Result, float, list[set[str]]]:
    """N serves under load; (load result, sessions written/s in the window, keys written per serve)."""
    serves: list[Server] = []
    try:
        for i in range(n):
            serves.append(start_serve(root / f"serve{i}", args.serve_config))
        box: dict[str, Result] = {}
        runner = threading.Thread(target=lambda: box.setdefault(
            "r", load([s.grpc for s in serves], args.settle + args.seconds, args.threads, counter)))
        runner.start()
        time.sleep(args.settle)
        t0, w0 = time.monotonic(), written(serves)
        runner.join()
        t1, w1 = time.monotonic(), written(serves)
        keys = []
        for i in range(n):  # what was written by now (each line is one session's whole revision)
            index = root / f"serve{i}" / "sessions.ndjsonl"
            keys.append({json.loads(line)["key"] for line in index.open() if line.endswith("\n")}
                        if index.exists() else set())
    finally:
        for s in serves:  # killed, not stopped: writing the backlog at SIGTERM takes minutes and proves nothing
            s.proc.kill()
            s.proc.wait()
    return box["r"], (w1 - w0) / (t1 - t0), keys


def run_sinks(n: int, args, counter) -> Result:
    sinks: list[Server] = []
    try:
        for _ in range(n):
            sinks.append(Server([sys.executable, str(Path(__file__).parent / "ingest_throughput.py"),
                                 "--bare-server"]))
        return load([s.grpc for s in sinks], args.seconds, args.threads, counter)
    finally:
        for s in sinks:
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ns", default="1,2,4", help="numbers of processes to run, comma-separated (default 1,2,4)")
    ap.add_argument("--seconds", type=float, default=15, help="measured window per N (default 15)")
    ap.add_argument("--settle", type=float, default=4, help="load before serve's window opens (default 4)")
    ap.add_argument("--threads", type=int, default=4, help="client threads (default 4)")
    ap.add_argument("--data-root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--serve-config", metavar="FILE", help="a `wt-otel serve --config` YAML (default: none)")
    args = ap.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="wt-scaleout-", dir=args.data_root))
    counter = itertools.count(1)
    print(f"requests of {SESSIONS_PER_REQUEST} sessions x 10 spans split by conversation id; {args.threads} client "
          f"threads, {args.seconds:g} s windows; cpu count {os.cpu_count()}; data dirs under {tmp}", flush=True)
    print(f"  {'N':>3} {'serve sessions/s':>17} {'serve spans/s':>14} {'sink spans/s':>13} {'serve/sink':>11} "
          f"{'speed-up':>9}  notes", flush=True)
    base = None
    try:
        for n in ns:
            served, sessions_s, keys = run_serves(n, tmp / f"n{n}", args, counter)
            sink = run_sinks(n, args, counter)
            shared = [k for k, c in Counter(k for ks in keys for k in ks).items() if c > 1]
            per_serve = "/".join(str(len(k)) for k in keys)
            base = base or sessions_s
            notes = (f"sessions per serve {per_serve}; {len(shared)} written by more than one; "
                     f"{served.refused} sends refused{f', errors {served.errors}' if served.errors else ''}")
            print(f"  {n:>3} {sessions_s:>17,.0f} {served.accepted_spans / served.seconds:>14,.0f} "
                  f"{sink.accepted_spans / sink.seconds:>13,.0f} "
                  f"{served.accepted_spans / served.seconds / (sink.accepted_spans / sink.seconds):>11.2f} "
                  f"{sessions_s / base:>8.2f}x  {notes}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
