"""serve's CPU per request, in process and without gRPC, next to a bare upb parse of the same request.

bench/ingest_throughput.py measures serve end to end, but on the shared 2-core machines its figures move
by a third from one run to the next (the load generator, gRPC and the sink share the cores). This bench
takes gRPC and the load generator out: it starts `Server` on a data dir (tmpfs by default), sends the
ingest bench's requests (500 spans, 50 agent sessions; fresh ids each) through the receivers' own
`export()` from this thread, waits until every session is written, and reads two threads' CPU clocks:

  receiver   this thread: the span index, the wire check, the segment append (the commit wait is sleep,
             not CPU), the queueing; per request
  pipeline   serve's pipeline thread: the assembler and the data dir keeping each session by reference
             (index line, key table); per request and per session

Both next to the bare baseline, ParseFromString of the same bytes (CPU per request, same process, run
before and after; the lower is used), as ratios: what serve's receive path and pipeline cost per request
in units of the parse the bare sink does. The GIL-held share is not separated (the wire walk of the span
index and the wire check run without it), so these are CPU ratios, the upper bound of the GIL's.

    python bench/pipeline_cost.py [--requests 1500] [--rounds 3] [--data-root /dev/shm]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).parent))
from ingest_throughput import MARK, SESSIONS_PER_REQUEST, build_request  # noqa: E402

from wt_otel._util.tuning import tune_for_serve  # noqa: E402
from wt_otel.serve.config import ServeConfig, load_serve_config  # noqa: E402
from wt_otel.serve.receivers.common import Encoding, Outcome, Signal, export  # noqa: E402
from wt_otel.serve.server import Server  # noqa: E402


def thread_cpu(ident: int) -> float:
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def parse_cpu(bodies: list[bytes]) -> float:
    """CPU seconds per request of a bare upb parse (what the bare sink does)."""
    t = time.thread_time()
    for body in bodies:
        ExportTraceServiceRequest.FromString(body)
    return (time.thread_time() - t) / len(bodies)


def serve_config(data_dir: Path) -> ServeConfig:
    """serve's defaults on `data_dir`, receivers in this process (`processes.receivers: 0`): requests go through
    `export()` from this thread."""
    return load_serve_config(None, {"data_dir": str(data_dir), "receivers.grpc_endpoint": None,
                                    "receivers.http_endpoint": None, "processes.receivers": 0})


def send(server: Server, body: bytes) -> None:
    """One request through the receivers' own `export()`; refused (the budget): retried, as a client would."""
    queue = server.pipeline
    assert queue is not None
    while export(Signal.TRACES, body, Encoding.PROTOBUF, queue, queue.metrics).outcome is not Outcome.OK:
        time.sleep(0.01)


def wait_written(server: Server, expected: int, timeout: float) -> int:
    """Wait until `expected` sessions are written (each past its grace, its index line in at the next tick);
    exits when they are not within `timeout` seconds. Returns how many were written."""
    deadline = time.monotonic() + timeout
    while server.metrics.get("wt_otel_sessions_written_total") < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    written = int(server.metrics.get("wt_otel_sessions_written_total"))
    if written < expected:
        sys.exit(f"only {written} of {expected} sessions written in {timeout:g} s")
    return written


def one_round(bodies: list[bytes], data_root: str) -> tuple[float, float]:
    """(receiver CPU, pipeline CPU) per request through a fresh serve."""
    data_dir = Path(tempfile.mkdtemp(prefix="wt-pipeline-cost-", dir=data_root))
    server = Server(serve_config(data_dir), quiet=True).start()
    tune_for_serve()
    try:
        ident = server.pipeline._worker.ident  # noqa: SLF001 - the pipeline thread, whose CPU clock this reads
        assert ident is not None
        t = time.thread_time()
        for body in bodies:
            send(server, body)
        receiver = time.thread_time() - t
        wait_written(server, len(bodies) * SESSIONS_PER_REQUEST, 120)
        pipeline = thread_cpu(ident)
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return receiver / len(bodies), pipeline / len(bodies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1500, help="requests per round (default 1500)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; medians printed (default 3)")
    ap.add_argument("--data-root", default="/dev/shm" if Path("/dev/shm").is_dir() else None)
    ap.add_argument("--without-conversation-id", action="store_true",
                    help="sessions whose spans carry no conversation id: each is built once for the content-join "
                         "check (ingest.joins), not only indexed")
    args = ap.parse_args()
    body, spans = build_request(conversation_ids=not args.without_conversation_id)
    bodies = [body.replace(MARK, f"{n:08d}".encode()) for n in range(args.requests)]
    print(f"{args.requests} requests of {spans} spans ({SESSIONS_PER_REQUEST} sessions"
          f"{', no conversation ids' if args.without_conversation_id else ''}), {len(body) // 1024} KiB, "
          f"through export() in process; CPU per request")
    parses, receivers, pipelines = [], [], []
    for n in range(args.rounds):
        before = parse_cpu(bodies[:300])
        receiver, pipeline = one_round(bodies, args.data_root)
        parse = min(before, parse_cpu(bodies[:300]))
        parses.append(parse)
        receivers.append(receiver)
        pipelines.append(pipeline)
        print(f"  round {n + 1}: parse {parse * 1e3:.3f} ms   receiver {receiver * 1e3:.3f} ms "
              f"({receiver / parse:.1f}x)   pipeline {pipeline * 1e3:.3f} ms ({pipeline / parse:.1f}x; "
              f"{pipeline / SESSIONS_PER_REQUEST * 1e6:.1f} µs a session)", flush=True)
    parse, receiver, pipeline = (statistics.median(v) for v in (parses, receivers, pipelines))
    print(f"medians of {args.rounds}: serve {(receiver + pipeline) / parse:.1f}x a bare parse per request "
          f"(receiver {receiver / parse:.1f}x, pipeline {pipeline / parse:.1f}x: "
          f"{pipeline / SESSIONS_PER_REQUEST * 1e6:.1f} µs a session)")


if __name__ == "__main__":
    main()
