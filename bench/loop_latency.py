"""Loop latency: from a flagged incident's last span exported to its replay's result span exported.

One conversation of the reference agent (examples/agent) is recorded live once: its real OTel GenAI
instrumentation, the scripted model of examples/demo, the CRM tool server, telemetry to an OTLP/JSON
file, the turn flagged with `wt_incident`. Then N times (default 20) that telemetry is sent again to
`wt-otel serve` (in-process, its own wiring) as a new incident (fresh trace ids, conversation id and
incident id, `examples.demo.stage.reidentify`), one at a time, over OTLP/HTTP. serve assembles the
session, flags it, imports it, queues it and replays it against the reference agent (in a thread) with
the recorded LLM (`llm: replay`) and universe, and exports the result spans over OTLP/HTTP to a local
receiver (wt-otel's own, in-process) that stamps their arrival.

Per incident, from t0 = the POST carrying the incident's last span returned (the exporter's export done):

    idle     t0 -> the session written (serve's data-dir index `written_at`): the assembler waiting for
             the session to be complete; with the reference agent's root span that is `assembler.grace`
    import   the scenario directory written (scenario-dir exporter), the job queued
    queue    queued -> the worker started it (the queue was empty: the worker's wake-up)
    replay   the runner: servers up, reset, surface, inject, score, summary, ledger row
    export   the result spans built, sent and acknowledged (the exporter's bounded flush)
    total    t0 -> the result sink received the scenario span

The stages are the queue file's own timings (`replay-queue.ndjsonl`), so they add up to the total up to
clock granularity (ms) and the sink's arrival inside the export. Medians over N, with min and max.

    python bench/loop_latency.py [--incidents 20] [--grace 2.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # examples/ is not an installed package

from examples.agent import AgentConfig, start_in_thread  # noqa: E402
from examples.demo.fake_llm import FakeLLM  # noqa: E402
from examples.demo.stage import (  # noqa: E402
    ProductionAgent,
    ResultSink,
    crm_tools,
    free_port,
    inject,
    reidentify,
    send_otlp_json,
)
from wt_otel.serve.config import (  # noqa: E402
    AssemblerConfig,
    ReceiversConfig,
    ReplayConfig,
    ReplayResultsConfig,
    ServeConfig,
)
from wt_otel.serve.replay_queue import QUEUE_FILE, read_events  # noqa: E402
from wt_otel.serve.server import Server  # noqa: E402

INCIDENT, CONVERSATION = "INC-BENCH", "conv-bench"
STAGES = ("idle", "import", "queue", "replay", "export", "total")


def record(tmp: Path) -> list[str]:
    """One flagged turn of the live, instrumented reference agent, as OTLP/JSON lines."""
    dump = tmp / "incident.otlp.jsonl"
    with FakeLLM() as llm, crm_tools() as tools, ProductionAgent(llm.base_url, tools.url, otlp_file=dump) as agent:
        inject(agent.url, CONVERSATION, "What is the email on file for Bluewing?", INCIDENT)
    return dump.read_text().splitlines()


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def measure(server: Server, sink: ResultSink, dump: list[str], n: int) -> dict[str, float]:
    """One incident through the loop; the stage durations in ms."""
    ref = f"{INCIDENT}-{n}"
    lines = reidentify(dump, {INCIDENT: ref, CONVERSATION: f"{CONVERSATION}-{n}"})
    send_otlp_json(server.http_url, lines)
    t0 = time.time()

    def arrived(spans: list) -> bool:
        return any(s.name.startswith("scenario ") and s.attributes.get("wt.origin.ref") == ref for _, s in spans)

    spans = sink.wait_for(arrived, timeout=60)
    t_result = min(t for t, s in spans if s.name.startswith("scenario ") and s.attributes.get("wt.origin.ref") == ref)
    deadline = time.monotonic() + 10
    while True:  # the `done` line follows the export by a moment
        events, _, _ = read_events(server.config.data_dir / QUEUE_FILE)
        job = next((e for e in events if e["event"] == "enqueued" and e["ref"] == ref), None)
        done = next((e for e in events if job and e["event"] == "done" and e["job"] == job["job"]), None)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if job is None or done is None:
        raise RuntimeError(f"incident {ref} was not replayed: {events[-3:]}")
    started = next(e for e in events if e["event"] == "started" and e["job"] == job["job"])
    return {
        "idle": (epoch(job["written_at"]) - t0) * 1000,
        "import": job["import_ms"],
        "queue": (epoch(started["at"]) - epoch(job["at"])) * 1000,
        "replay": done["replay_ms"],
        "export": done["export_ms"],
        "total": (t_result - t0) * 1000,
        "verdict": done["verdict"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--incidents", type=int, default=20)
    parser.add_argument("--grace", type=float, default=2.0,
                        help="assembler.grace: seconds after the root span before a session is complete [2.0]")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wt-loop-") as tmp_name:
        tmp = Path(tmp_name)
        t = time.monotonic()
        dump = record(tmp)
        print(f"recorded one flagged turn of the live reference agent: {len(dump)} OTLP request(s), "
              f"{time.monotonic() - t:.1f} s")
        universe_port, llm_port = free_port(), free_port()
        sink = ResultSink()
        agent = start_in_thread(AgentConfig(mcp_url=f"http://127.0.0.1:{universe_port}/mcp",
                                            openai_base_url=f"http://127.0.0.1:{llm_port}/v1"), port=0)
        config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                             data_dir=tmp / "data", assembler=AssemblerConfig(grace=args.grace),
                             replay=ReplayConfig(enabled=True, inject_url=agent.url, universe_port=universe_port,
                                                 llm_port=llm_port, queue_max=args.incidents + 1,
                                                 results=ReplayResultsConfig(otlp_endpoint=sink.url)))
        server = Server(config, quiet=True, emit=lambda text: None).start()
        rows = []
        try:
            for n in range(args.incidents):
                rows.append(measure(server, sink, dump, n))
        finally:
            server.stop()
            agent.stop()
            sink.stop()
    verdicts = sorted({r["verdict"] for r in rows})
    print(f"{len(rows)} incidents, one at a time; assembler.grace {args.grace:g} s; replay llm=replay against the "
          f"reference agent; verdicts {verdicts}")
    print(f"{'stage':<8} {'median ms':>10} {'min ms':>9} {'max ms':>9}")
    for stage in STAGES:
        values = [float(r[stage]) for r in rows]
        print(f"{stage:<8} {statistics.median(values):>10.1f} {min(values):>9.1f} {max(values):>9.1f}")
    work = statistics.median([r["total"] - r["idle"] for r in rows])
    print(f"median total minus idle (wt-otel's own work after the session is complete): {work:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
