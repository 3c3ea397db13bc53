"""Kill-loop support (issue 31 item 3): serve writing flagged incidents, stopped at a named step as kill -9 would.

`run_until_written` starts serve in-process on a data dir, sends flagged sessions over real OTLP/HTTP and waits
until each is indexed; with `WT_OTEL_CRASH_AT` set (`wt_otel._util.hooks.crash_point`) the process instead dies
at that step. `in_child` runs it in a forked child (a real process that `os._exit`s, no cleanup), so a loop over
every step pays the imports once: `python -m tests.support.crashloop ROOT WORKERS STEP...` runs, per step, a
first start killed there while writing the second incident, a second start (the recovery) killed there too, and
a clean third start, then prints one JSON object: step -> the exit codes and the directories of each incident.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import urllib.request
from pathlib import Path

from tests.support.hostile import genai_session, tid, to_request
from wt_otel._util.hooks import CRASH_AT
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import AssemblerConfig, DataDirConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.server import Server

INCIDENTS = 3
# every crash point on the way of a flagged incident into the data dir (`write_directory`, the index append)
STEPS = ("directory.built", "directory.swapping", "directory.renamed", "directory.placed", "index.appending",
         "index.appended")
REWRITE_ONLY = ("directory.swapping",)


def config(data_dir: Path, workers: int) -> ServeConfig:
    return ServeConfig(data_dir=data_dir,
                       receivers=ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint="127.0.0.1:0"),
                       assembler=AssemblerConfig(idle_timeout=0.2, grace=0.05),
                       datadir=DataDirConfig(render="flagged", workers=workers))


def incident(n: int) -> list:
    spans = genai_session(tid(n), conversation=f"conv-{n}", reply=f"{n} degrees.", start=1_000 + n)
    spans[-1].attributes["wt.incident"] = f"INC-{n}"  # the root span
    return spans


def flagged_written(data_dir: Path) -> set[str]:
    return {t for e in read_index(data_dir).entries if e.get("flagged") for t in e.get("trace_ids") or ()}


def run_until_written(data_dir: Path, workers: int, send: bool, timeout: float = 15.0) -> Server:
    """Start serve, send the incidents (when `send`), wait until every one is indexed; the caller stops it."""
    server = Server(config(data_dir, workers), quiet=True).start()
    if send:  # one request: every incident is acknowledged before the first is written (and killed)
        body = to_request([s for n in range(1, INCIDENTS + 1) for s in incident(n)]).SerializeToString()
        req = urllib.request.Request(server.http_url + "/v1/traces", data=body,
                                     headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
    want = {tid(n) for n in range(1, INCIDENTS + 1)}
    deadline = time.monotonic() + timeout
    while not want <= flagged_written(data_dir):
        if time.monotonic() > deadline:
            print(f"not written within {timeout}s; serve's recovery said: {server.recovery}", file=sys.stderr)
            server.stop()
            raise AssertionError(f"incidents not written within {timeout}s: {sorted(flagged_written(data_dir))}")
        time.sleep(0.02)
    return server


def in_child(data_dir: Path, workers: int, send: bool, crash_at: str | None) -> int:
    """Run serve in a forked child until every incident is indexed, or until it dies at `crash_at` (STEP:N);
    its exit code (137: it died there). The parent never starts gRPC itself, so forking is safe."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller
        code = 1
        try:
            if crash_at:
                os.environ[CRASH_AT] = crash_at
            run_until_written(data_dir, workers, send=send).stop()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def directories_per_incident(data_dir: Path) -> dict[str, list[str]]:
    """trace id -> the session directories whose envelope holds it (a flagged incident must be in one)."""
    found: dict[str, list[str]] = {}
    for envelope in sorted((data_dir / "sessions").glob("*/incident.wtin.json")):
        env = json.loads(envelope.read_text(encoding="utf-8"))
        for trace in (env.get("provenance") or {}).get("trace_ids") or ():
            found.setdefault(trace, []).append(envelope.parent.name)
    return found


def main(argv: list[str]) -> None:
    root, workers, steps = Path(argv[0]), int(argv[1]), argv[2:]
    report = {}
    for step in steps:
        data_dir = root / step
        trail = []  # after each start: its exit code, the checkpoint, the index lines (for a failure's message)
        # a kill while replacing a revision needs a revision to replace: the first start dies before indexing one.
        # Inline, the second incident's write is killed; render workers' lines go in one batch: its append is
        first = "index.appending:2" if step in REWRITE_ONLY else f"{step}:{2 if workers == 0 else 1}"
        for send, crash in ((True, first), (False, f"{step}:1"), (False, None)):
            code = in_child(data_dir, workers, send, crash)
            checkpoint = data_dir / "segments" / "checkpoint.json"
            trail.append({"exit": code,
                          "checkpoint": json.loads(checkpoint.read_text())["position"] if checkpoint.exists() else None,
                          "index": [[e["key"], e["revision"], e.get("recovered", False)]
                                    for e in read_index(data_dir).entries]})
        report[step] = {"exits": [t["exit"] for t in trail], "directories": directories_per_incident(data_dir),
                        "trail": trail}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
