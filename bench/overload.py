"""Goodput at overload: serve's sessions written/s at its capacity and at twice it, in one run.

One `wt-otel serve` subprocess, the requests of `ingest_throughput.py` (500 spans = 50 agent sessions each,
fresh trace and conversation ids per send), and two loads that take turns, `--rounds` times each:

  capacity: one client sends back to back (one request in flight), honouring the 1 s retry delay when
      refused, so the writer always has work and the receivers are barely contended;
      capacity = sessions written per second over the window;
  overload: `--threads` clients send on a fixed schedule at `--factor` (default 2) x the capacity just
      measured, whatever serve answers (open loop: a refused request is counted and dropped, as fresh
      load keeps arriving); goodput = sessions written per second over the window.

Turns, not two long runs, because these machines are shared: the other processes' load drifts over a
minute, and taking capacity and goodput side by side, several times, is what makes their ratio mean
something. Each window follows `--settle` seconds of the new load. It prints per round both figures,
serve's CPU seconds per 1,000 sessions written (what the refused requests cost it), the median ratio
goodput / capacity (goal: >= 0.9), what was refused and why, and serve's peak RSS (VmHWM) against its
memory budget (`queue.max_bytes`: queue + open sessions + retained records, estimated; the rest of RSS
is the interpreter, grpc and requests in flight). `--ungated` repeats it all on a second serve with the
backlog gate off (`queue.max_backlog_seconds` huge): overload as it was before the gate.

    python bench/overload.py [--rounds 3] [--seconds 10] [--settle 3] [--warmup 8] [--factor 2] [--threads 8]
                             [--ungated] [--data-root /dev/shm] [--serve-config FILE]
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

sys.path.insert(0, str(Path(__file__).parent))
from ingest_throughput import EXPORT, MARK, RssSampler, Server, build_request, start_serve  # noqa: E402

MiB = 1024 * 1024


@dataclass
class Phase:
    label: str
    sent: int = 0
    accepted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    late: int = 0  # sends the schedule wanted but no client was free for (open loop only)
    written: float = 0.0  # sessions written in the window
    window: float = 0.0
    offered_rps: float = 0.0
    cpu: float = 0.0  # serve's CPU seconds in the window
    held_mib: float = 0.0  # max of serve's wt_otel_memory_held_bytes in the window
    backlog_s: float = 0.0  # max of serve's wt_otel_backlog_seconds in the window

    @property
    def sessions_per_s(self) -> float:
        return self.written / self.window if self.window else 0.0


def _client(target: str):
    channel = grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
    return channel, channel.unary_unary(EXPORT, request_serializer=None,
                                        response_deserializer=ExportTraceServiceResponse.FromString)


def _send(stub, body: bytes, counter, phase: Phase, lock: threading.Lock) -> bool:
    data = body.replace(MARK, f"{next(counter):08x}".encode())
    try:
        stub(data, timeout=30)
        ok, code = True, ""
    except grpc.RpcError as e:
        ok, code = False, f"{e.code().name}: {(e.details() or '').split(' (')[0]}"
    with lock:
        phase.sent += 1
        if ok:
            phase.accepted += 1
        else:
            phase.refused[code] = phase.refused.get(code, 0) + 1
    return ok


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its descendants (serve's receiver process, render workers), from /proc."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # gone meanwhile
            continue
    return total


def measure(serve: Server, phase: Phase, settle: float, seconds: float, load) -> None:
    """Run `load(deadline)` in the background; count sessions written and serve's CPU from `settle` to
    `settle + seconds`, sampling serve's held bytes and backlog every second."""
    deadline = time.monotonic() + settle + seconds
    runner = threading.Thread(target=load, args=(deadline,))
    runner.start()
    time.sleep(settle)
    pid = serve.proc.pid
    t0, w0, c0 = time.monotonic(), serve.metrics().get("wt_otel_sessions_written_total", 0), cpu_seconds(pid)
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        m = serve.metrics()
        phase.held_mib = max(phase.held_mib, m.get("wt_otel_memory_held_bytes", 0) / MiB)
        phase.backlog_s = max(phase.backlog_s, m.get("wt_otel_backlog_seconds", 0))
    t1, w1, c1 = time.monotonic(), serve.metrics().get("wt_otel_sessions_written_total", 0), cpu_seconds(pid)
    runner.join()
    phase.written, phase.window, phase.cpu = w1 - w0, t1 - t0, c1 - c0


def closed_loop(target: str, body: bytes, phase: Phase, counter):
    lock = threading.Lock()

    def load(deadline: float) -> None:
        channel, stub = _client(target)
        while time.monotonic() < deadline:
            if not _send(stub, body, counter, phase, lock):
                time.sleep(1.0)  # the RetryInfo delay serve sends
        channel.close()
    return load


def open_loop(target: str, body: bytes, phase: Phase, counter, rps: float, threads: int):
    """`rps` requests per second on a shared schedule, taken by `threads` clients; a send that no client
    was free for within one interval is skipped and counted as late (the offered load was not reached)."""
    lock = threading.Lock()
    interval = 1.0 / rps
    slots = itertools.count()

    def worker(deadline: float, start: float) -> None:
        channel, stub = _client(target)
        while True:
            with lock:
                due = start + next(slots) * interval
            now = time.monotonic()
            if due >= deadline:
                break
            if due > now:
                time.sleep(due - now)
            elif now - due > interval:
                with lock:
                    phase.late += 1
                continue
            _send(stub, body, counter, phase, lock)
        channel.close()

    def load(deadline: float) -> None:
        start = time.monotonic()
        workers = [threading.Thread(target=worker, args=(deadline, start)) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    return load


def run_rounds(label: str, data_dir: Path, config: str | None, body: bytes, per_request: int, counter,
               args) -> tuple[list[Phase], list[Phase], RssSampler]:
    """Capacity and overload windows in turns on one serve; the first window also waits out the warm-up."""
    caps: list[Phase] = []
    overs: list[Phase] = []
    serve = start_serve(data_dir, config)
    try:
        with RssSampler(serve.proc.pid) as rss:
            for r in range(args.rounds):
                cap = Phase(f"{label} capacity #{r + 1}")
                measure(serve, cap, args.warmup if r == 0 else args.settle, args.seconds,
                        closed_loop(serve.grpc, body, cap, counter))
                caps.append(cap)
                report(cap, per_request)
                if cap.sessions_per_s <= 0:
                    sys.exit("no session was written in a capacity window; see serve's output")
                over = Phase(f"{label} {args.factor:g}x overload #{r + 1}")
                over.offered_rps = args.factor * cap.sessions_per_s / per_request
                measure(serve, over, args.settle, args.seconds,
                        open_loop(serve.grpc, body, over, counter, over.offered_rps, args.threads))
                overs.append(over)
                report(over, per_request)
    finally:
        serve.stop()
    return caps, overs, rss


def report(p: Phase, n_sessions: int) -> None:
    refused = "; ".join(f"{v} x {k}" for k, v in sorted(p.refused.items())) or "none"
    offered = f"offered {p.offered_rps * n_sessions:,.0f}/s; " if p.offered_rps else ""
    per_k = f"{1000 * p.cpu / p.written:.2f}" if p.written else "-"
    print(f"  {p.label:<30} {p.sessions_per_s:>7,.0f} sessions written/s   serve CPU {per_k} s per 1k sessions   "
          f"({offered}{p.accepted}/{p.sent} requests accepted{f', {p.late} sends late' if p.late else ''}; "
          f"refused: {refused}; held <= {p.held_mib:.0f} MiB; backlog <= {p.backlog_s:.1f} s)", flush=True)


def summary(label: str, caps: list[Phase], overs: list[Phase], rss: RssSampler, budget: int) -> float:
    ratios = [o.sessions_per_s / c.sessions_per_s for c, o in zip(caps, overs, strict=True)]
    cpu = [(o.cpu / o.written) / (c.cpu / c.written) for c, o in zip(caps, overs, strict=True)
           if o.written and c.written]
    print(f"  {label}: goodput / capacity per round {', '.join(f'{r:.2f}' for r in ratios)}; median "
          f"{statistics.median(ratios):.2f} (goal >= 0.9); CPU per session at overload / at capacity: median "
          f"{statistics.median(cpu) if cpu else float('nan'):.2f}", flush=True)
    print(f"      peak RSS of the session core {rss.hwm} MiB against a {budget // MiB} MiB memory budget; "
          f"{rss.summary()}", flush=True)
    return statistics.median(ratios)


def budget_of(config: str | None) -> int:
    from wt_otel.serve.config import load_serve_config
    return load_serve_config(Path(config) if config else None).queue.max_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="capacity/overload turns (default 3)")
    ap.add_argument("--seconds", type=float, default=10, help="measured window per turn (default 10)")
    ap.add_argument("--settle", type=float, default=3, help="load before each window opens (default 3)")
    ap.add_argument("--warmup", type=float, default=8, help="before the first window (default 8)")
    ap.add_argument("--factor", type=float, default=2.0, help="overload as a multiple of capacity (default 2)")
    ap.add_argument("--threads", type=int, default=8, help="client threads of the overload (default 8)")
    ap.add_argument("--ungated", action="store_true", help="also run it with the backlog gate off")
    ap.add_argument("--data-root", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ap.add_argument("--serve-config", metavar="FILE", help="a `wt-otel serve --config` YAML (default: none)")
    args = ap.parse_args()

    body, n = build_request()
    per_request = n // 10  # sessions per request (10 spans each)
    budget = budget_of(args.serve_config)
    tmp = Path(tempfile.mkdtemp(prefix="wt-overload-", dir=args.data_root))
    print(f"requests of {n} spans ({per_request} sessions), {len(body) / 1024:,.0f} KiB; {args.rounds} rounds of "
          f"{args.seconds:g} s windows; data dirs under {tmp}; cpu count {os.cpu_count()}", flush=True)
    counter = itertools.count(1)
    try:
        summary("gated", *run_rounds("gated", tmp / "gated", args.serve_config, body, per_request, counter,
                                     args), budget)
        if args.ungated:
            conf = (yaml.safe_load(Path(args.serve_config).read_text()) if args.serve_config else None) or {}
            conf.setdefault("queue", {})["max_backlog_seconds"] = 1e9
            ungated = tmp / "ungated.yaml"
            ungated.write_text(yaml.safe_dump(conf))
            summary("gate off", *run_rounds("gate off", tmp / "ungated", str(ungated), body, per_request, counter,
                                            args), budget)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
