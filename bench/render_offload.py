"""What the pipeline thread pays per session in each `datadir` mode, side by side in one run.

serve's pipeline thread shares the GIL with the receivers; every microsecond it spends per session is taken
from ingest. This feeds the same sessions (`import_throughput.session_spans`: 10 spans each, ~2 KB messages)
through `build_pipeline()` (assembler -> flagger -> redactor -> datadir, no receivers) in each mode and prints:

  - pipeline thread: CPU seconds of the calling thread (`time.thread_time`) per session, from the first
    record to the last hand-off (assembling, building, flagging, and then rendering + writing in-process, or
    pickling + handing off to the render workers);
  - indexed: wall time until every session's index line is in (workers included);
  - the ratio of each mode's pipeline-thread cost to today's (workers: 0, render: all).

    python bench/render_offload.py [--sessions 400] [--data-root /dev/shm] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

sys.path.insert(0, str(Path(__file__).parent))
from import_throughput import session_spans  # noqa: E402

from wt_otel.exporters.datadir import read_index  # noqa: E402
from wt_otel.ingest.otlp import spans_from_request  # noqa: E402
from wt_otel.serve.config import ServeConfig  # noqa: E402
from wt_otel.serve.metrics import Metrics  # noqa: E402
from wt_otel.serve.server import build_pipeline  # noqa: E402


def records(n: int) -> list:
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[
        ScopeSpans(spans=session_spans(i, 1_700_000_000_000_000_000)) for i in range(n)])])
    return list(spans_from_request(req))


def run(recs: list, n: int, out: Path, workers: int, render: str) -> tuple[float, float]:
    pipe = build_pipeline(ServeConfig(data_dir=out, datadir={"workers": workers, "render": render}), Metrics(),
                          quiet=True, warn=lambda _m: None)
    wall, cpu = time.perf_counter(), time.thread_time()
    for at in range(0, len(recs), 500):
        pipe.head.consume(recs[at:at + 500], time.time())
    pipe.flush()
    cpu = time.thread_time() - cpu
    pipe.stop()  # drains the workers: every index line is in
    wall = time.perf_counter() - wall
    written = len(read_index(out).entries)
    if written != n:
        raise SystemExit(f"{out}: {written} sessions indexed, expected {n}")
    return cpu / n, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data-root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args()
    recs = records(args.sessions)
    root = Path(tempfile.mkdtemp(prefix="wt-render-bench-", dir=args.data_root))
    modes = [(0, "all"), (args.workers, "all"), (args.workers, "flagged"), (0, "flagged")]
    print(f"{args.sessions} sessions of 10 spans; data dirs under {root}; cpu count {os.cpu_count()}")
    try:
        base = None
        for workers, render in modes:
            cpu, wall = run(recs, args.sessions, root / f"w{workers}-{render}", workers, render)
            base = base or cpu
            print(f"  workers {workers}, render {render:<8} pipeline thread {cpu * 1e6:7.0f} us/session "
                  f"({cpu / base:4.2f}x today's)   all indexed in {wall:6.2f} s ({args.sessions / wall:6.0f} "
                  "sessions/s)", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
