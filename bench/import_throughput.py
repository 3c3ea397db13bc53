"""Import throughput: `wt-otel import` against the bare protobuf baseline, side by side.

Generates an OTLP dump in the collector's `format: proto` stream (4-byte
length prefix per ExportTraceServiceRequest of 500 spans), 10 spans per
session (invoke_agent root, 4 chat spans with ~2 KB message attributes,
4 execute_tool spans, 1 HTTP span), then times in one run:

  (a) baseline: ParseFromString of every request + a walk over every
      attribute, json.loads of the message attributes;
  (b) `wt-otel import` of the same dump (a subprocess, with its default
      `--jobs`, the CPU count, unless --jobs is given; the peak RSS of its
      main process is read from the OS).

It prints spans/s of each and the ratio (b)/(a), for two dump sizes, so the
peak RSS can be compared: it should follow the largest session, not the dump.

    python bench/import_throughput.py [--spans 200000] [--sizes 1,2] [--out-dir DIR] [--jobs N[,M...]] [--repeat 3]

With several --jobs values (e.g. `--jobs 1,2`) (b) runs once per value, in the same rounds as (a), and a
row per value is printed beside the one baseline, then the speedup of each over the first (does
import time fall with more workers?). Each run's scenario directories are compared with the first
value's, byte for byte: the bench stops if --jobs changed the output.

With --repeat N, (a) and (b) run N times each, alternately, and the medians are printed (the
shared 2-core machines are noisy; one run can be off by a third).

Scenario directories are written under --out-dir (default: a tmpfs, /dev/shm,
when there is one): these machines share a noisy disk, and the figure of
interest is the pipeline's cost, not the disk's. Pass a disk path to see both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

SPANS_PER_SESSION = 10
SPANS_PER_REQUEST = 500
FILLER = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30  # ~1.7 KB


def kv(key: str, value: str | int) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def session_spans(n: int, t0: int) -> list[Span]:
    trace_id = n.to_bytes(16, "big")
    root = (n * 16 + 1).to_bytes(8, "big")
    spans = [Span(trace_id=trace_id, span_id=root, name="invoke_agent bench", start_time_unix_nano=t0,
                  end_time_unix_nano=t0 + 10_000_000,
                  attributes=[kv("gen_ai.operation.name", "invoke_agent"),
                              kv("gen_ai.conversation.id", f"conv-{n}")])]
    history = [{"role": "user", "parts": [{"type": "text", "content": f"Question {n}: {FILLER}"}]}]
    for i in range(4):
        call_id = f"call_{n}_{i}"
        args = {"query": f"q{n}-{i}"}
        out = [{"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": "lookup",
                                                "arguments": args}]}]
        sid = (n * 16 + 2 + 2 * i).to_bytes(8, "big")
        spans.append(Span(trace_id=trace_id, span_id=sid, parent_span_id=root, name="chat bench-model",
                          start_time_unix_nano=t0 + i * 1000, end_time_unix_nano=t0 + i * 1000 + 500,
                          attributes=[kv("gen_ai.operation.name", "chat"),
                                      kv("gen_ai.request.model", "bench-model"),
                                      kv("gen_ai.provider.name", "openai"),
                                      kv("gen_ai.input.messages", json.dumps(history)),
                                      kv("gen_ai.output.messages", json.dumps(out)),
                                      kv("gen_ai.usage.input_tokens", 100)]))
        result = {"answer": f"result {n}-{i}"}
        spans.append(Span(trace_id=trace_id, span_id=(n * 16 + 3 + 2 * i).to_bytes(8, "big"),
                          parent_span_id=root, name="execute_tool lookup",
                          start_time_unix_nano=t0 + i * 1000 + 600, end_time_unix_nano=t0 + i * 1000 + 900,
                          attributes=[kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "lookup"),
                                      kv("gen_ai.tool.call.id", call_id),
                                      kv("gen_ai.tool.call.arguments", json.dumps(args)),
                                      kv("gen_ai.tool.call.result", json.dumps(result))]))
        history += out + [{"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id,
                                                        "response": result}]}]
    spans.append(Span(trace_id=trace_id, span_id=(n * 16 + 15).to_bytes(8, "big"), parent_span_id=root,
                      name="GET /health", attributes=[kv("http.request.method", "GET")]))
    return spans


def write_dump(path: Path, n_spans: int) -> int:
    sessions = n_spans // SPANS_PER_SESSION
    pending: list[Span] = []
    with path.open("wb") as f:
        def flush() -> None:
            req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
                resource={"attributes": [kv("service.name", "bench-agent")]},
                scope_spans=[ScopeSpans(spans=pending)])])
            data = req.SerializeToString()
            f.write(struct.pack(">I", len(data)) + data)
            pending.clear()
        for n in range(1, sessions + 1):
            pending.extend(session_spans(n, 1_700_000_000_000_000_000 + n * 1_000_000))
            if len(pending) >= SPANS_PER_REQUEST:
                flush()
        if pending:
            flush()
    return sessions * SPANS_PER_SESSION


def baseline(path: Path) -> float:
    """Bare protobuf parse + attribute walk + json.loads of message attributes; returns seconds."""
    t = time.perf_counter()
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        (size,) = struct.unpack_from(">I", data, pos)
        req = ExportTraceServiceRequest()
        req.ParseFromString(data[pos + 4:pos + 4 + size])
        pos += 4 + size
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    for a in span.attributes:
                        v = a.value.string_value
                        if a.key.endswith("messages"):
                            json.loads(v)
    return time.perf_counter() - t


def run_import(path: Path, out: Path, jobs: int | None = None) -> tuple[float, int]:
    """(seconds, peak RSS in MiB) of `wt-otel import` in a child process (the main process; each
    worker holds one batch of sessions at a time)."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so it would report the parent's peak.
    code = ("import re, sys; from wt_otel.cli import main\n"
            "try:\n    main()\nfinally:\n"
            "    hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
            "    print('PEAK_RSS_KB', hwm, file=sys.stderr)\n")
    t = time.perf_counter()
    extra = ["--jobs", str(jobs)] if jobs else []
    proc = subprocess.run([sys.executable, "-c", code, "import", str(path), "--out", str(out), "--force", *extra],
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"wt-otel import failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    rss = next(int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_RSS_KB"))
    return elapsed, rss // 1024


def tree_digest(out: Path) -> str:
    """One hash over every file's relative path and bytes: two imports wrote the same output or not."""
    digest = hashlib.sha256()
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(out)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def parse_jobs(text: str | None) -> list[int | None]:
    """`--jobs 1,2` -> [1, 2]; none given -> [None] (import's own default)."""
    if not text:
        return [None]
    try:
        jobs = [int(x) for x in text.split(",")]
    except ValueError:
        jobs = []
    if not jobs or min(jobs) < 1:
        sys.exit(f"--jobs must be positive integers separated by commas, got {text!r}")
    return list(dict.fromkeys(jobs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", type=int, default=200_000, help="spans in the smaller dump (default 200000)")
    ap.add_argument("--sizes", default="1,2", help="dump sizes as multiples of --spans (default 1,2)")
    ap.add_argument("--out-dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where the dump and scenario dirs go (default /dev/shm when present)")
    ap.add_argument("--jobs", default=None,
                    help="wt-otel import --jobs; several, comma-separated, to compare them in one run "
                         "(default: its own, the CPU count)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each, alternately; medians printed (default 1)")
    args = ap.parse_args()
    jobs_list = parse_jobs(args.jobs)
    tmp = Path(tempfile.mkdtemp(prefix="wt-bench-", dir=args.out_dir))
    print(f"dump and output under {tmp}")
    try:
        print(f"{'spans':>8} {'jobs':>7} {'baseline sp/s':>14} {'import sp/s':>12} {'ratio':>6} "
              f"{'import peak RSS':>16}")
        for mult in (int(x) for x in args.sizes.split(",")):
            dump = tmp / f"dump-{mult}.pb"
            n = write_dump(dump, args.spans * mult)
            bases: list[float] = []
            imports: dict[int | None, list[float]] = {j: [] for j in jobs_list}
            rss: dict[int | None, int] = dict.fromkeys(jobs_list, 0)
            digests: dict[int | None, str] = {}
            for _ in range(max(1, args.repeat)):
                bases.append(baseline(dump))
                for jobs in jobs_list:
                    out = tmp / f"out-{mult}"
                    imp_s, peak = run_import(dump, out, jobs)
                    imports[jobs].append(imp_s)
                    rss[jobs] = max(rss[jobs], peak)
                    if len(jobs_list) > 1 and jobs not in digests:
                        digests[jobs] = tree_digest(out)
                    shutil.rmtree(out, ignore_errors=True)
            if len(set(digests.values())) > 1:
                sys.exit(f"the output differs between --jobs values: {digests}")
            base_s = statistics.median(bases)
            medians = {j: statistics.median(imports[j]) for j in jobs_list}
            for jobs in jobs_list:
                imp_s = medians[jobs]
                print(f"{n:>8} {jobs or 'default':>7} {n / base_s:>14,.0f} {n / imp_s:>12,.0f} {base_s / imp_s:>6.2f} "
                      f"{rss[jobs]:>13} MiB", flush=True)
            if len(jobs_list) > 1:
                first = jobs_list[0]
                print("         " + "; ".join(f"jobs {j} / jobs {first}: {medians[first] / medians[j]:.2f}x faster"
                                           for j in jobs_list[1:]) + " (same output)", flush=True)
            dump.unlink()
        print(f"(medians of {max(1, args.repeat)} run(s); "
              f"bench process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB; "
              f"cpu count {os.cpu_count()}; import --jobs {args.jobs or 'default'})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
