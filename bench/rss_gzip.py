"""serve's RSS after compressed requests that inflate a lot (issue 31, item 5): RSS, not held bytes.

50 OTLP/HTTP protobuf requests, each ~150 KB of gzip that inflates to ~30 MB (50 agent sessions of
`import_throughput.session_spans`, each tool result a ~600 KB run of repeated text), are sent one after
another to a `wt-otel serve` subprocess (default config, data dir on --data-root). Printed, in MiB, from
/proc/<pid>/status: a bare Python process's RSS (the floor any Python process pays), serve's RSS idle,
right after the 50 requests, and `--settle` seconds later, serve's high-water mark (VmHWM), RssAnon (the
heap: what a leak or an allocator that keeps freed pages grows) and its own estimate of what it holds
(`wt_otel_memory_held_bytes`). Two runs: serve's defaults (GenAI requests kept by reference, never
decoded) and `datadir.render: all` (every request decoded and rendered). `--compare` runs each again with
`WT_OTEL_RELEASE_MEMORY=off` (no `malloc_trim` after large requests: `wt_otel/_util/tuning.py`). To compare
with another checkout, run it with `PYTHONPATH=<that checkout>` (serve is started with the same Python path).

Measured here (2 shared cores; MiB; `git archive` of the commit before issue 31 vs after, same numbers within
noise): defaults idle 66, after 101, +5 s 72, high-water 159; render all idle 66, after ~540, +5 s ~415,
+40 s ~340 (release off 344, on 337), high-water ~680, held 192; a bare Python process 10. The 1,039 MiB of
the issue did not reproduce on this machine.

    python bench/rss_gzip.py [--requests 50] [--settle 5] [--data-root /tmp] [--serve-config FILE] [--compare]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans

sys.path.insert(0, str(Path(__file__).parent))
from import_throughput import kv, session_spans  # noqa: E402
from ingest_throughput import Server  # noqa: E402


def build_request(first: int, sessions: int = 50, result_bytes: int = 600_000) -> bytes:
    """`sessions` agent sessions (trace ids from `first`), each tool result a long run of one short text."""
    rng = random.Random(first)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(300)]
    spans = []
    for n in range(first, first + sessions):
        block = " ".join(rng.choice(words) for _ in range(16)) + " "
        session = session_spans(n, 1_000_000)
        session[2].attributes.append(kv("gen_ai.tool.call.result",
                                        json.dumps({"rows": block * (result_bytes // len(block))})))
        spans += session
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
    return request.SerializeToString()


def status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon of `pid`, in MiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return {key: int(re.search(rf"{key}:\s+(\d+)", text).group(1)) // 1024 for key in ("VmRSS", "VmHWM", "RssAnon")}


def bare_rss() -> int:
    """A plain Python process's RSS, in MiB (the interpreter alone)."""
    out = subprocess.run([sys.executable, "-c", "import re, pathlib; print(re.search(r'VmRSS:\\s+(\\d+)', "
                          "pathlib.Path('/proc/self/status').read_text()).group(1))"],
                         capture_output=True, text=True, check=True).stdout
    return int(out) // 1024


def run(label: str, bodies: list[bytes], args, env: dict[str, str]) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="wt-rss-", dir=args.data_root))
    serve = Server([sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "127.0.0.1:0",
                    "--http-endpoint", "127.0.0.1:0", "--data-dir", str(data_dir), "--quiet",
                    *(["--config", args.config] if args.config else [])], env=env)
    try:
        time.sleep(1)
        pid = serve.proc.pid
        idle = status(pid)
        url = urlsplit(serve.http)
        codes: dict[int, int] = {}
        started = time.monotonic()
        for body in bodies:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
            conn.request("POST", "/v1/traces", body=body,
                         headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
            response = conn.getresponse()
            response.read()
            conn.close()
            codes[response.status] = codes.get(response.status, 0) + 1
        sent = time.monotonic() - started
        after = status(pid)
        time.sleep(args.settle)
        settled = status(pid)
        held = serve.metrics().get("wt_otel_memory_held_bytes", 0) / 2**20
        print(f"  {label:<22} idle {idle['VmRSS']:>4}   after {len(bodies)} requests {after['VmRSS']:>4}   "
              f"+{args.settle:g}s {settled['VmRSS']:>4} (anon {settled['RssAnon']}; held {held:.0f})   high-water "
              f"{settled['VmHWM']:>4} MiB   answers {codes}, {sent:.1f}s", flush=True)
    finally:
        serve.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--data-root", default=tempfile.gettempdir())
    parser.add_argument("--serve-config", help="one serve config file instead of the two runs (defaults, render all)")
    parser.add_argument("--compare", action="store_true", help="also run each with WT_OTEL_RELEASE_MEMORY=off")
    args = parser.parse_args()
    bodies = []
    for i in range(args.requests):
        raw = build_request(1 + 1000 * i)
        bodies.append(gzip.compress(raw))
    print(f"{args.requests} requests of ~{len(bodies[0]) // 1024} KB gzip, inflating to ~{len(raw) / 2**20:.1f} MiB "
          f"each; RSS in MiB; a bare Python process: {bare_rss()} MiB", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        render_all = Path(tmp) / "render-all.yaml"
        render_all.write_text("datadir:\n  render: all\n")
        configs = [(args.serve_config, args.serve_config)] if args.serve_config else \
            [("defaults", None), ("render: all", str(render_all))]
        for name, config in configs:
            args.config = config
            if args.compare:
                run(f"{name}, release off", bodies, args, {**os.environ, "WT_OTEL_RELEASE_MEMORY": "off"})
            run(name, bodies, args, dict(os.environ))


if __name__ == "__main__":
    main()
