"""serve's start on a data dir that has run a while, next to the least any start must do.

A restart (a deploy, or after a kill -9) opens the receivers only once serve has read its data dir: every
index line (the key table of every session it holds: slugs, revisions, where a kept session's line is)
and the head of every segment file (torn tails). A serve that has run for weeks holds millions of
sessions (up to what the segments' retention keeps: older lines move to an archive, docs/data-dir.md),
so this grows with what it kept; this bench shows by how much.

It fills a data dir (tmpfs by default) with the ingest bench's requests through the receivers' own
`export()` (500 spans, 50 agent sessions kept by reference each; fresh ids), stops serve, then times, in
alternation, `Server.start()` (receivers off) and the bare baseline: reading every index line and parsing
it as JSON (orjson), which any start that knows its sessions must do. It prints both per session and the
ratio (serve's start as a multiple of the bare read).

    python bench/restart.py [--requests 2000] [--rounds 3] [--data-root /dev/shm]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from ingest_throughput import MARK, SESSIONS_PER_REQUEST, build_request  # noqa: E402
from pipeline_cost import send, serve_config, wait_written  # noqa: E402

from wt_otel.serve.server import Server  # noqa: E402


def fill(data_dir: Path, requests: int) -> int:
    """Send `requests` requests through a fresh serve on `data_dir`; returns the sessions written."""
    body, _ = build_request()
    server = Server(serve_config(data_dir), quiet=True).start()
    try:
        for n in range(requests):
            send(server, body.replace(MARK, f"{n:08d}".encode()))
            if n % 500 == 499:
                print(f"  filled {n + 1} of {requests} requests", flush=True)
        return wait_written(server, requests * SESSIONS_PER_REQUEST, 300)
    finally:
        server.stop()


def start_seconds(data_dir: Path) -> float:
    t = time.perf_counter()
    server = Server(serve_config(data_dir), quiet=True).start()
    elapsed = time.perf_counter() - t
    server.stop()
    return elapsed


def bare_seconds(data_dir: Path) -> float:
    t = time.perf_counter()
    with open(data_dir / "sessions.ndjsonl", "rb") as f:
        for line in f:
            orjson.loads(line)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests to fill the data dir with (default 2000)")
    ap.add_argument("--rounds", type=int, default=3, help="starts timed; medians printed (default 3)")
    ap.add_argument("--data-root", default="/dev/shm" if Path("/dev/shm").is_dir() else None)
    args = ap.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="wt-restart-", dir=args.data_root))
    try:
        print(f"filling {data_dir} with {args.requests} requests of {SESSIONS_PER_REQUEST} sessions", flush=True)
        sessions = fill(data_dir, args.requests)
        index_mb = (data_dir / "sessions.ndjsonl").stat().st_size / 2**20
        segments_mb = sum(p.stat().st_size for p in (data_dir / "segments").iterdir()) / 2**20
        print(f"{sessions:,} sessions: index {index_mb:.0f} MiB, segments {segments_mb:.0f} MiB")
        starts, bares = [], []
        for n in range(args.rounds):
            starts.append(start_seconds(data_dir))
            bares.append(bare_seconds(data_dir))
            print(f"  round {n + 1}: start {starts[-1]:.2f} s   bare read {bares[-1]:.2f} s", flush=True)
        start, bare = statistics.median(starts), statistics.median(bares)
        print(f"medians of {args.rounds}: start {start / sessions * 1e6:.1f} µs a session, bare read "
              f"{bare / sessions * 1e6:.1f} µs: start = {start / bare:.1f}x the bare read")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
