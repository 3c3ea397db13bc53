"""Ingest throughput: `wt-otel serve` against a bare grpcio TraceService, same load generator, same run.

The load: real OTLP/gRPC `TraceService/Export` requests of 500 spans (50 agent sessions of 10 spans, made
by `import_throughput.session_spans`: an invoke_agent root, 4 chat spans with ~2 KB message attributes,
4 execute_tool spans, 1 HTTP span), sent over loopback by N client threads for a fixed time. Each request
is serialized once; before each send an 8-byte marker in the bytes (inside every trace id and conversation
id) is replaced by a fresh counter, so every request carries new sessions. Re-sending identical bytes would
instead re-open the same 50 sessions forever, which measures the late-span path, not ingest.

Targets, each a subprocess so the client threads do not share its GIL:
  (a) a bare grpcio TraceService that only parses the request (8 workers, as serve);
  (b) `wt-otel serve` with its full pipeline, writing sessions to a data dir (default on /dev/shm:
      these machines share a noisy disk and the figure of interest is the pipeline's cost);
  (c) when rotel is installed: rotel with the wt-otel processor (collector-config/rotel.sh) exporting
      to a second `wt-otel serve`.

It prints accepted spans/s and p50/p99 export latency of each, the ratio (b)/(a), serve's sustained rate
(accepted spans over load time + time to drain its queue: a bounded queue lets the first 100k records in
faster than they are processed), RSS start/max/end sampled every second from /proc/<pid>/status
(flat = not growing over the run), and the CPU of each server and of the load generator over the run, in
cores and in ms a request (/proc/<pid>/stat): a server near one core is bound by its GIL, not the cores.
Goal (issue 3): ratio >= 0.5, RSS flat over `--seconds 60`.

With `--span-index native,python` serve runs once per span index (the C scanner, the pure-Python
fallback) against the same bare sink; `--repeat N` takes N such rounds and prints the medians.
`--without-conversation-id` sends the same sessions with no conversation id, as many producers do: serve
then builds each session once for the content-join check (`ingest.joins`) instead of only indexing it, so
this is the figure for those producers (the default load is the fast path).

    python bench/ingest_throughput.py [--seconds 20] [--threads 4] [--data-root /dev/shm] [--serve-config FILE]
                                       [--no-rotel] [--span-index native,python] [--repeat 3]
                                       [--without-conversation-id]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
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

ROOT = Path(__file__).resolve().parents[1]
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MARK = b"Wq7Zk2Xp"  # 8 ASCII bytes: valid inside a UTF-8 conversation id and as half a trace id
SESSIONS_PER_REQUEST = 50  # x 10 spans
ROTEL_BATCH_SPANS = "2000"
GOALS = {"native": 0.5, "python": 0.3}  # issue 15: sustained, against the bare sink
SERVER_OPTIONS = [("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 4 * 1024 * 1024)]


def build_request(conversation_ids: bool = True) -> tuple[bytes, int]:
    """One serialized request whose trace and conversation ids all contain MARK; returns (bytes, spans).
    Without `conversation_ids` the spans carry none (as many producers send them)."""
    spans = []
    for n in range(1, SESSIONS_PER_REQUEST + 1):
        for span in session_spans(n, 1_700_000_000_000_000_000 + n * 1_000_000):
            span.trace_id = MARK + n.to_bytes(8, "big")
            for i, a in reversed(list(enumerate(span.attributes))):
                if a.key == "gen_ai.conversation.id":
                    if conversation_ids:
                        a.value.string_value = f"conv-{MARK.decode()}-{n}"
                    else:
                        del span.attributes[i]
            spans.append(span)
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource={"attributes": [kv("service.name", "bench-agent")]}, scope_spans=[ScopeSpans(spans=spans)])])
    body = req.SerializeToString()
    ids = len(spans) + (SESSIONS_PER_REQUEST if conversation_ids else 0)
    assert body.count(MARK) == ids, "MARK must occur only in the ids"
    return body, len(spans)


# --------------------------------------------------------------------------- (a) the bare server

def bare_server() -> None:
    """Parse each request and answer; nothing else. Runs as `--bare-server` in its own process."""

    def export(request: bytes, context) -> ExportTraceServiceResponse:
        ExportTraceServiceRequest.FromString(request)
        return ExportTraceServiceResponse()

    server = grpc.server(ThreadPoolExecutor(max_workers=8), options=SERVER_OPTIONS, maximum_concurrent_rpcs=64)
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None,
                                                  response_serializer=ExportTraceServiceResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"OTLP/gRPC listening on 127.0.0.1:{port}", flush=True)
    stopping: list[int] = []  # the handler only flips a flag: grpc's stop() takes locks a handler may hold
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    while not stopping:
        time.sleep(0.1)
    server.stop(0)


# --------------------------------------------------------------------------- the load generator

@dataclass
class LoadResult:
    seconds: float
    accepted_spans: int = 0
    rejected: int = 0  # RESOURCE_EXHAUSTED / UNAVAILABLE: the server asked the client to come back
    errors: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    cpu: float = 0.0  # CPU seconds of this process (the load generator) over the load

    @property
    def rate(self) -> float:
        return self.accepted_spans / self.seconds

    def pct(self, p: float) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")


def load(target: str, body: bytes, n_spans: int, seconds: float, threads: int) -> LoadResult:
    """`threads` clients, one connection each, send fresh-id copies of `body` back to back for `seconds`."""
    counter = itertools.count(1)
    lock = threading.Lock()
    result = LoadResult(seconds)
    deadline = time.monotonic() + seconds

    def client() -> None:
        channel = grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = channel.unary_unary(EXPORT, request_serializer=None,  # raw bytes go out as they are
                                   response_deserializer=ExportTraceServiceResponse.FromString)
        ok, rejected, errors, lat = 0, 0, {}, []
        while time.monotonic() < deadline:
            data = body.replace(MARK, f"{next(counter):08x}".encode())
            t = time.perf_counter()
            try:
                stub(data, timeout=30)
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                    rejected += 1
                    time.sleep(0.05)  # shorter than the 1 s Retry-After: keep the pressure on
                else:
                    errors[e.code().name] = errors.get(e.code().name, 0) + 1
                    time.sleep(0.05)
                continue
            lat.append(time.perf_counter() - t)
            ok += 1
        channel.close()
        with lock:
            result.accepted_spans += ok * n_spans
            result.rejected += rejected
            result.latencies += lat
            for k, v in errors.items():
                result.errors[k] = result.errors.get(k, 0) + v

    workers = [threading.Thread(target=client) for _ in range(threads)]
    start, cpu = time.monotonic(), time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    result.seconds = time.monotonic() - start
    result.cpu = time.process_time() - cpu
    return result


# --------------------------------------------------------------------------- the servers under test

class RssSampler:
    """VmRSS every second from /proc/<pid>/status, plus the kernel's high-water mark VmHWM at the end, and
    the CPU seconds the process used meanwhile (/proc/<pid>/stat): on a 2-core machine the load generator,
    gRPC and the server share the cores, so CPU per request says as much as the rate."""

    def __init__(self, pid: int) -> None:
        self.pid, self.samples, self.hwm, self.cpu = pid, [], 0, 0.0
        self.parts = ""  # at the end: RssAnon / RssFile / RssShmem (what grows: the heap, or mapped files)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> tuple[int, int]:
        text = Path(f"/proc/{self.pid}/status").read_text()
        get = lambda key: int(re.search(rf"{key}:\s+(\d+)", text).group(1)) // 1024  # noqa: E731
        return get("VmRSS"), get("VmHWM")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                rss, self.hwm = self._read()
            except (OSError, AttributeError):
                return
            self.samples.append(rss)
            self._stop.wait(1.0)

    def _cpu(self, pid: int | None = None) -> float:
        fields = Path(f"/proc/{pid or self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def _tree(self) -> dict[int, tuple[str, float]]:
        """The server's process and its descendants (serve's receiver process, render workers): pid -> (role,
        CPU seconds so far)."""
        out: dict[int, tuple[str, float]] = {}
        todo = [self.pid]
        while todo:
            pid = todo.pop()
            with contextlib.suppress(OSError, ValueError):
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                role = ("receivers" if "receiver_process" in cmd else "session core" if pid == self.pid and
                        "wt_otel.cli" in cmd else "server" if pid == self.pid else "render worker"
                        if "multiprocessing" in cmd or "wt_otel" in cmd else cmd.split(" ")[0].rpartition("/")[2])
                out[pid] = (role, self._cpu(pid))
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
        return out

    def __enter__(self) -> RssSampler:
        with contextlib.suppress(OSError):
            self.cpu = -self._cpu()
        self._start_tree = self._tree()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            self.cpu += self._cpu()
        end = self._tree()
        self.per_process: dict[str, float] = {}  # role -> CPU seconds over the run (every process of that role)
        self.peak_rss: dict[str, int] = {}  # role -> the largest VmHWM (MiB) of a process of that role
        for pid, (role, cpu) in end.items():
            self.per_process[role] = self.per_process.get(role, 0.0) + cpu - self._start_tree.get(pid, ("", 0.0))[1]
            with contextlib.suppress(OSError, AttributeError):
                hwm = int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) // 1024
                self.peak_rss[role] = max(self.peak_rss.get(role, 0), hwm)
        with contextlib.suppress(OSError, AttributeError):
            self.hwm = self._read()[1]
            text = Path(f"/proc/{self.pid}/status").read_text()
            kib = {k: int(v) for k, v in re.findall(r"(Rss\w+):\s+(\d+)", text)}
            self.parts = " / ".join(f"{k[3:].lower()} {kib.get(k, 0) // 1024}"
                                    for k in ("RssAnon", "RssFile", "RssShmem"))

    def summary(self) -> str:
        s = self.samples or [0]
        others = {role: mib for role, mib in getattr(self, "peak_rss", {}).items() if role not in ("server",
                                                                                                  "session core")}
        return f"RSS start {s[0]} / max {max(s)} / end {s[-1]} MiB (VmHWM {self.hwm} MiB, {len(s)} samples)" + \
            (f"; at the end {self.parts} MiB" if self.parts else "") + \
            (f"; peak RSS of its other processes: {', '.join(f'{r} {m} MiB' for r, m in sorted(others.items()))}"
             if others else "")


class Server:
    """A server subprocess that prints `OTLP/gRPC listening on HOST:PORT` (and maybe an HTTP URL)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.out: list[str] = []
        self.grpc = self.http = None
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(30):
            self.stop()
            sys.exit(f"server did not start: {' '.join(argv)}\n{''.join(self.out)[-2000:]}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.out.append(line)
            if m := re.search(r"OTLP/gRPC listening on (\S+)", line):
                self.grpc = m.group(1)
            if m := re.search(r"OTLP/HTTP listening on (http://\S+)", line):
                self.http = m.group(1)
            if self.grpc and (self.http or "--bare-server" in self.proc.args):
                self._ready.set()

    def metrics(self) -> dict[str, float]:
        """serve's /metrics, label sets summed per metric name."""
        out: dict[str, float] = {}
        with urllib.request.urlopen(self.http + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#"):
                    name, value = re.split(r"(?:\{.*\})?\s+", line, maxsplit=1)
                    out[name] = out.get(name, 0) + float(value.split()[0])
        return out

    def stop(self, timeout: float = 120) -> tuple[int, float]:
        """SIGTERM (serve writes every open session); returns (exit code, seconds it took)."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return rc, time.monotonic() - t


def start_serve(data_dir: Path, config: str | None, span_index: str | None = None) -> Server:
    env = {**os.environ, "WT_OTEL_SPANINDEX": span_index} if span_index else None
    return Server([sys.executable, "-m", "wt_otel.cli", "serve", "--grpc-endpoint", "127.0.0.1:0",
                   "--http-endpoint", "127.0.0.1:0", "--data-dir", str(data_dir), "--quiet",
                   *(["--config", config] if config else [])], env=env)


def wait_drained(serve: Server, timeout: float = 300) -> float:
    """Seconds until serve's queue is empty."""
    t = time.monotonic()
    while serve.metrics().get("wt_otel_queue_depth", 0) > 0 and time.monotonic() - t < timeout:
        time.sleep(0.2)
    return time.monotonic() - t


def index_lines(data_dir: Path) -> int:
    index = data_dir / "sessions.ndjsonl"
    return sum(1 for _ in index.open()) if index.exists() else 0


def report(label: str, r: LoadResult) -> None:
    err = f", errors {r.errors}" if r.errors else ""
    print(f"  {label:<34} {r.rate:>10,.0f} spans/s accepted   p50 {r.pct(0.5):7.1f} ms   p99 {r.pct(0.99):7.1f} ms"
          f"   ({r.accepted_spans:,} spans in {r.seconds:.1f} s, {r.rejected} rejected{err})", flush=True)


def cpu_line(rss: RssSampler, r: LoadResult, n_spans: int, server_seconds: float) -> str:
    """CPU of the server (over `server_seconds`: the load and, for serve, its drain) and of the load generator,
    in cores and in ms per accepted request."""
    requests = max(1, r.accepted_spans // n_spans)
    parts = getattr(rss, "per_process", {})
    total = sum(parts.values()) or rss.cpu
    each = ", ".join(f"{role} {cpu / server_seconds:.2f} cores ({cpu / requests * 1e3:.2f} ms a request)"
                     for role, cpu in sorted(parts.items(), key=lambda kv: -kv[1]))
    return (f"CPU: server {total / server_seconds:.2f} cores ({total / requests * 1e3:.2f} ms a request)"
            + (f" [{each}]" if len(parts) > 1 else "")
            + f", load generator {r.cpu / r.seconds:.2f} cores ({r.cpu / requests * 1e3:.2f} ms a request)")


# --------------------------------------------------------------------------- the three runs

def run_bare(args, body: bytes, n: int) -> LoadResult:
    server = Server([sys.executable, __file__, "--bare-server"])
    try:
        with RssSampler(server.proc.pid) as rss:
            result = load(server.grpc, body, n, args.seconds, args.threads)
    finally:
        server.stop()
    report("(a) bare grpcio TraceService", result)
    print(f"      {rss.summary()}")
    print(f"      {cpu_line(rss, result, n, result.seconds)}")
    return result


def run_serve(args, body: bytes, n: int, data_dir: Path, span_index: str | None = None) -> tuple[LoadResult, float]:
    serve = start_serve(data_dir, args.serve_config, span_index)
    try:
        with RssSampler(serve.proc.pid) as rss:
            result = load(serve.grpc, body, n, args.seconds, args.threads)
            drain = wait_drained(serve)
        m = serve.metrics()
    finally:
        rc, stop_s = serve.stop()
    sustained = result.accepted_spans / (result.seconds + drain)
    report(f"(b) wt-otel serve ({span_index or 'full pipeline'})", result)
    print(f"      sustained {sustained:,.0f} spans/s (queue drained {drain:.1f} s after the load); "
          f"{m.get('wt_otel_sessions_written_total', 0):,.0f} sessions written during the run, "
          f"{index_lines(data_dir):,} after SIGTERM (exit {rc} in {stop_s:.1f} s); "
          f"incomplete flushes {m.get('wt_otel_sessions_flushed_incomplete_total', 0):g}, "
          f"pipeline errors {m.get('wt_otel_pipeline_errors_total', 0):g}")
    from wt_otel.serve.config import load_serve_config
    budget = load_serve_config(Path(args.serve_config) if args.serve_config else None).queue.max_bytes
    print(f"      {rss.summary()}; peak RSS {rss.hwm} MiB against a {budget // 2**20} MiB memory budget "
          f"(queue.max_bytes: the records held; plus ~65 MiB of interpreter and requests in flight)")
    print(f"      RSS every ~{max(1, len(rss.samples) // 8)} s: {rss.samples[::max(1, len(rss.samples) // 8)]}")
    print(f"      {cpu_line(rss, result, n, result.seconds + drain)}")
    return result, sustained


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rotel_available() -> bool:
    import ctypes.util
    import importlib.util
    return importlib.util.find_spec("rotel") is not None and ctypes.util.find_library("python3.11") is not None


def run_rotel(args, body: bytes, n: int, data_dir: Path) -> None:
    """rotel + wt-otel processor -> serve. Accepted = what rotel acknowledged; delivered = what serve got.

    rotel.env's batches of 8192 spans are ~9 MiB of these spans, above serve's 4 MiB gRPC limit: serve
    refuses every batch (RESOURCE_EXHAUSTED) and rotel retries it until it gives up, delivering nothing.
    Here batches are capped at ROTEL_BATCH_SPANS (>= one 500-span request, ~2.3 MiB)."""
    serve = start_serve(data_dir, args.serve_config)
    port = free_port()
    env = {**os.environ, "ROTEL_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{port}",
           "ROTEL_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{free_port()}",
           "ROTEL_OTLP_EXPORTER_ENDPOINT": f"http://{serve.grpc}",
           "ROTEL_BATCH_MAX_SIZE": ROTEL_BATCH_SPANS, "ROTEL_TRACES_BATCH_MAX_SIZE": ROTEL_BATCH_SPANS,
           "ROTEL_PID_FILE": str(data_dir / "rotel.pid")}
    log = (data_dir / "rotel.log").open("wb")
    rotel = subprocess.Popen(["bash", str(ROOT / "collector-config" / "rotel.sh")], env=env, stdout=log,
                             stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if rotel.poll() is not None or time.monotonic() > deadline:
                    print("  (c) rotel did not start; see", data_dir / "rotel.log")
                    return
                time.sleep(0.1)
        with RssSampler(rotel.pid) as rss:
            result = load(f"127.0.0.1:{port}", body, n, args.seconds, args.threads)
            t, received, last = time.monotonic(), -1.0, 0.0
            while time.monotonic() - t < 120:  # until serve stops receiving (rotel flushed its batches)
                now = serve.metrics().get("wt_otel_records_accepted_total", 0)
                if now == received and now >= result.accepted_spans:
                    break
                if now != received:
                    received, last = now, time.monotonic()
                elif time.monotonic() - last > 5:
                    break
                time.sleep(0.5)
            settle = last - t
        alive = rotel.poll() is None
    finally:
        rotel.terminate()
        try:
            rotel.wait(10)
        except subprocess.TimeoutExpired:
            rotel.kill()
        log.close()
        serve.stop()
    report(f"(c) rotel (batch {ROTEL_BATCH_SPANS}) + wt processor", result)
    print(f"      accepted by serve: {received:,.0f} of {result.accepted_spans:,} spans, "
          f"{received / (result.seconds + max(settle, 0)):,.0f} spans/s end to end"
          f"{'' if alive else '  -- rotel DIED, see its log'}; rotel {rss.summary()}")


def compare_durability(args, body: bytes, n: int, tmp: Path, bare: LoadResult) -> None:
    """(b) twice in one run: `durability.enabled` false (acknowledged once queued) and true (once fsynced)."""
    import yaml

    base = yaml.safe_load(Path(args.serve_config).read_text()) if args.serve_config else {}
    rates = {}
    for enabled in (False, True):
        config = tmp / f"durability-{enabled}.yaml"
        config.write_text(yaml.safe_dump({**(base or {}), "durability": {**(base or {}).get("durability", {}),
                                                                         "enabled": enabled}}))
        args.serve_config = str(config)
        print(f"  durability.enabled: {enabled}", flush=True)
        served, sustained = run_serve(args, body, n, tmp / f"serve-{enabled}")
        rates[enabled] = (served, sustained)
        print(f"  ratio (b)/(a): {served.rate / bare.rate:.2f} accepted, {sustained / bare.rate:.2f} sustained",
              flush=True)
    (off, off_s), (on, on_s) = rates[False], rates[True]
    print(f"  segment log on/off: {on.rate / off.rate:.2f} accepted, {on_s / off_s:.2f} sustained "
          f"(p50 export latency {on.pct(0.5):.1f} ms vs {off.pct(0.5):.1f} ms)", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20, help="load duration per target (default 20)")
    ap.add_argument("--threads", type=int, default=4, help="client threads (default 4)")
    ap.add_argument("--data-root", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                    help="where serve's data dirs go (default /dev/shm when present)")
    ap.add_argument("--serve-config", metavar="FILE", help="a `wt-otel serve --config` YAML (default: none)")
    ap.add_argument("--no-rotel", action="store_true", help="skip the rotel comparison")
    ap.add_argument("--durability", choices=("config", "compare"), default="config",
                    help="compare: run (b) with the segment log off and on, side by side (its cost)")
    ap.add_argument("--span-index", metavar="LIST", help="serve once per span index, e.g. native,python "
                    "(WT_OTEL_SPANINDEX; default: serve's own choice)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of bare + serve(s), medians printed (default 1)")
    ap.add_argument("--without-conversation-id", action="store_true",
                    help="sessions without a conversation id: each is built once for the content-join check")
    ap.add_argument("--bare-server", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare_server:
        return bare_server()

    body, n = build_request(conversation_ids=not args.without_conversation_id)
    tmp = Path(tempfile.mkdtemp(prefix="wt-ingest-", dir=args.data_root))
    print(f"requests of {n} spans{', no conversation ids' if args.without_conversation_id else ''}, "
          f"{len(body) / 1024:,.0f} KiB; {args.threads} client threads, {args.seconds:g} s "
          f"per target; data dirs under {tmp}; cpu count {os.cpu_count()}", flush=True)
    try:
        if args.durability == "compare":
            compare_durability(args, body, n, tmp, run_bare(args, body, n))
            return
        indexes = [i.strip() for i in args.span_index.split(",")] if args.span_index else [None]
        ratios: dict[str | None, list[tuple[float, float]]] = {i: [] for i in indexes}
        for turn in range(1, args.repeat + 1):  # the bare sink and each serve take turns: these machines drift
            if args.repeat > 1:
                print(f"round {turn} of {args.repeat}", flush=True)
            bare = run_bare(args, body, n)
            for index in indexes:
                served, sustained = run_serve(args, body, n, tmp / f"serve-{index}-{turn}", index)
                ratios[index].append((served.rate / bare.rate, sustained / bare.rate))
                print(f"  ratio (b)/(a){f' [{index}]' if index else ''}: {served.rate / bare.rate:.2f} accepted, "
                      f"{sustained / bare.rate:.2f} sustained (goal >= {GOALS.get(index or 'native', 0.5)})",
                      flush=True)
                shutil.rmtree(tmp / f"serve-{index}-{turn}", ignore_errors=True)
        if args.repeat > 1:
            for index, pairs in ratios.items():
                accepted = statistics.median(a for a, _ in pairs)
                sustained = statistics.median(s for _, s in pairs)
                print(f"median of {len(pairs)}{f' [{index}]' if index else ''}: {accepted:.2f} accepted, "
                      f"{sustained:.2f} sustained (each: {', '.join(f'{s:.2f}' for _, s in pairs)}; "
                      f"goal >= {GOALS.get(index or 'native', 0.5)})", flush=True)
        if args.no_rotel:
            pass
        elif rotel_available():
            run_rotel(args, body, n, tmp / "rotel")
        else:
            print("  (c) rotel not installed (pip install -e '.[test]'; needs libpython3.11): skipped")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
