"""`make demo`: the whole loop on this machine, from live telemetry to a replayed verdict, in about 15 s.

    python -m examples.demo [--out out/demo]          (from the repository root, in the project's venv)

1. `wt-otel serve` (in-process, the same wiring as the command) with a fresh data dir and automatic
   replay on: flagged incidents are imported and replayed against the candidate agent.
2. The candidate agent: the reference agent (examples/agent), telemetry off, pointed at the ports where
   the replay serves the recorded tools (MCP) and the recorded LLM (cassette).
3. Production traffic from a real instrumentation: the reference agent again, as its own process, live
   against a scripted model (examples/demo/fake_llm.py) and a CRM tool server, its OTel contrib
   GenAI instrumentation exporting OTLP/HTTP to serve. Two conversations: a good one, and one whose
   answer the user flags (`wt_incident`: the agent quoted a phone number the CRM never returned).
4. serve assembles the sessions, flags the incident, imports it as an unreviewed scenario, and replays
   it with the recorded LLM: no model, no live tool, and the same wrong answer, so it FAILs its
   default outcome check (substantiated_by_tools), which is the point: the incident is reproduced.
5. The results table, the ledger, and the result spans, which go to a local OTLP receiver the demo
   runs (there is no tracing UI here) and are written to a file; `--results-otlp-endpoint` on
   `wt-otel serve` sends them to Phoenix, Jaeger, Tempo or any OTLP backend instead.

Everything it starts, it stops; its exit status is 0 when the loop closed (whatever the verdict).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import yaml

from wt_otel.components import load as load_component
from wt_otel.contracts.results import ScenarioResult, SweepResult
from wt_otel.model.spans import SpanRecord
from wt_otel.serve.config import ReceiversConfig, ReplayConfig, ReplayResultsConfig, ServeConfig
from wt_otel.serve.server import Server

from ..agent import AgentConfig, start_in_thread
from .fake_llm import FakeLLM
from .stage import ProductionAgent, ResultSink, crm_tools, free_port, inject

INCIDENT = "INC-DEMO-1"
CONVERSATIONS = [  # (session id, user turn, incident flagged by the user, or None)
    ("conv-bluewing-email", "What is the email on file for Bluewing?", None),
    ("conv-bluewing-phone", "What is the phone number on file for Bluewing?", INCIDENT),
]
TIMEOUT_S = 90


def say(text: str = "") -> None:
    print(text, flush=True)


def serve_config(out: Path, agent_url: str, universe_port: int, llm_port: int, sink_url: str) -> ServeConfig:
    """serve's defaults, except: loopback HTTP on a free port, this data dir, replay on."""
    return ServeConfig(
        receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
        data_dir=out / "wt-data",
        replay=ReplayConfig(enabled=True, inject_url=agent_url, services=["crm-agent"], universe_port=universe_port,
                            llm_port=llm_port,
                            results=ReplayResultsConfig(otlp_endpoint=sink_url, agent_name="crm-agent")),
    )


def wait_replayed(server: Server, n: int, timeout: float) -> bool:
    queue = server.replay.queue
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(j.state == "done" for j in queue.jobs.values()) >= n:
            return True
        time.sleep(0.1)
    return False


def show_table(runs_dir: Path) -> Path:
    """The replays as `wt-otel run` prints them, read back from the ledger they were appended to."""
    ledger = runs_dir / "ledger.ndjsonl"
    rows = load_component("exporters", "ledger")(ledger).read().rows
    record = SweepResult(sweep_id="auto-replay", started_at=rows[0].ts if rows else "",
                         scenarios=[ScenarioResult.model_validate(r.model_dump()) for r in rows])
    load_component("exporters", "table")(record, file=sys.stdout)
    return ledger


def show_spans(spans: list[SpanRecord], path: Path) -> None:
    """The span tree the sink received (names, verdicts, the link to the incident), and the file it is in."""
    path.write_text("".join(json.dumps(asdict(s), default=str) + "\n" for s in spans), encoding="utf-8")
    children: dict[str | None, list[SpanRecord]] = {}
    for span in sorted(spans, key=lambda s: s.start_ns):
        children.setdefault(span.parent_span_id, []).append(span)

    def walk(parent: str | None, depth: int) -> None:
        for span in children.get(parent, []):
            verdict = span.attributes.get("wt.verdict")
            extra = f"  wt.verdict={verdict}" if verdict else ""
            if span.links:
                extra += f"  -> link to incident trace {span.links[0].trace_id}"
            say(f"      {'  ' * depth}{span.name}{extra}")
            walk(span.span_id, depth + 1)

    walk(None, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/demo"), help="replaced on every run [out/demo]")
    args = parser.parse_args(argv)
    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.monotonic()
    say("wt-otel demo: live telemetry -> flagged incident -> scenario -> hermetic replay -> verdict, all local\n")

    universe_port, llm_port = free_port(), free_port()
    stack: list = []  # started parts, stopped in reverse order whatever happens
    try:
        sink = ResultSink()
        stack.append(sink.stop)
        candidate = start_in_thread(AgentConfig(mcp_url=f"http://127.0.0.1:{universe_port}/mcp",
                                                openai_base_url=f"http://127.0.0.1:{llm_port}/v1"), port=0)
        stack.append(candidate.stop)
        config = serve_config(out, candidate.url, universe_port, llm_port, sink.url)
        (out / "serve.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_defaults=True),
                                                       sort_keys=False), encoding="utf-8")
        server = Server(config, emit=lambda text: say(f"   serve | {text}"),
                        warn=lambda text: say(f"   serve | warning: {text}")).start()
        stack.append(server.stop)
        say(f"1. wt-otel serve      OTLP/HTTP {server.http_url}, data dir {config.data_dir}, automatic replay on "
            f"(config: {out / 'serve.yaml'})")
        say(f"2. candidate agent    {candidate.url} (examples/agent; tools :{universe_port}, model :{llm_port}: "
            "what the replay serves)")
        llm = FakeLLM()
        stack.append(llm.stop)
        tools = crm_tools()
        tools.start()
        stack.append(tools.stop)
        say("3. production agent   examples/agent live, OTel contrib GenAI instrumentation -> serve")
        production = ProductionAgent(llm.base_url, tools.url, otlp_endpoint=server.http_url)
        stack.append(production.stop)
        for session_id, text, incident in CONVERSATIONS:
            reply = inject(production.url, session_id, text, incident)
            flag = f"   <- the user flags it: {incident}" if incident else ""
            say(f"     {session_id}: {text!r} -> {reply.get('reply')!r}{flag}")
        production.stop()  # flushes its batched spans to serve
        say("4. serve assembles, flags, imports and replays (a session is complete 2 s after its last span):")
        if not wait_replayed(server, 1, TIMEOUT_S):
            say(f"error: no replay finished within {TIMEOUT_S} s; see {config.data_dir}")
            return 1
    finally:
        for stop in reversed(stack):
            stop()

    say("\n5. results\n")
    ledger = show_table(config.runs_dir)
    job = next(iter(json.loads(line) for line in (config.data_dir / "replay-queue.ndjsonl").read_text().splitlines()
                    if '"enqueued"' in line))
    spans = [s for _, s in sink.spans]
    spans_file = out / "result-spans.jsonl"
    say(f"\nledger:       {ledger}   (wt-otel report --runs-dir {config.runs_dir})")
    say(f"scenario:     {config.data_dir / job['scenario']}/   (tags unreviewed, auto-replay; read its IMPORTED.md)")
    say(f"replay queue: {config.data_dir / 'replay-queue.ndjsonl'}")
    say(f"result spans: {len(spans)} span(s) sent over OTLP/HTTP to {sink.url}, the demo's local receiver, and "
        f"saved in {spans_file}")
    say("              (wt-otel serve --results-otlp-endpoint URL sends them to Phoenix, Jaeger, Tempo or any OTLP "
        "backend: docs/viewing-results.md)")
    show_spans(spans, spans_file)
    say(f"\ndone in {time.monotonic() - t0:.0f} s; everything started was stopped.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
