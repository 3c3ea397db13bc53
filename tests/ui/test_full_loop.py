"""The whole loop, checked in a real tracing UI: a flagged incident in live telemetry, through a real collector,
becomes a replayed scenario whose result spans land in Arize Phoenix, one lookup away from the incident trace.

    Phoenix (harness, .venv-ui)  <--OTLP/HTTP-- production agent --OTLP/HTTP--> rotel + wt-otel processor
        ^                                                                             |  OTLP/gRPC
        |  result spans, OTLP/gRPC                                                    v
        +--------------------------------------------------------------- wt-otel serve (in-process Server)
                                                                          replay: http_inject -> candidate agent

Real parts: Phoenix; rotel (collector-config/rotel.sh, its embedded Python running the wt-otel processor);
`wt-otel serve`'s own wiring with automatic replay (recorded universe as MCP, recorded LLM as cassette, results
through the OTel SDK's OTLP exporter); the reference agent twice: live as its own process (examples/demo's
scripted model and CRM tools, its OTel GenAI instrumentation exporting to rotel and to Phoenix) and in a
thread as the candidate under test; headless Chromium on Phoenix's trace page.

The incident is the demo's: the agent quotes a phone number the CRM never returned, the user flags it, and the
hermetic replay reproduces it: FAIL on the outcome layer (substantiated_by_tools).

Opt-in (`make test-ui`). Artifacts (screenshot, page text, logs, serve's data dir) go to
runs/ui-artifacts/full-loop/; WT_OTEL_UPDATE_DOCS_SCREENSHOT=1 also refreshes docs/img/phoenix-replay.png.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ReplayConfig, ReplayResultsConfig, ServeConfig
from wt_otel.serve.replay_queue import QUEUE_FILE, read_events
from wt_otel.serve.server import Server

from .phoenix import ARTIFACTS, DOCS_SCREENSHOT, REPO, Phoenix, render_page, running_phoenix

sys.path.insert(0, str(REPO))  # examples/ is not an installed package
from examples.agent import AgentConfig, start_in_thread  # noqa: E402
from examples.demo.fake_llm import TOOL_NAME, WRONG_PHONE_ANSWER, FakeLLM  # noqa: E402
from examples.demo.stage import ProductionAgent, crm_tools, free_port, inject  # noqa: E402

pytestmark = pytest.mark.ui

OUT = ARTIFACTS / "full-loop"
ROTEL_SH = REPO / "collector-config" / "rotel.sh"
INCIDENT = "INC-UI-1"
CONVERSATIONS = [  # (session id, user turn, incident flagged by the user): the demo's traffic
    ("conv-ui-email", "What is the email on file for Bluewing?", None),
    ("conv-ui-phone", "What is the phone number on file for Bluewing?", INCIDENT),
]
VERDICT = "FAIL"  # the wrong phone number, reproduced hermetically: its outcome check fails
REPLAY_TIMEOUT_S = 60
PHOENIX_TIMEOUT_S = 30


def wait_until(what: str, predicate: Callable[[], Any], timeout: float, explain: Callable[[], str] = str,
               interval: float = 0.1) -> Any:
    """Poll `predicate` until it returns something truthy (returned), else fail naming `what` and `explain()`."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(AssertionError):  # e.g. Phoenix's 404 before the project exists
            if result := predicate():
                return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s\n{explain()}")
        time.sleep(interval)


@contextlib.contextmanager
def rotel(exporter_endpoint: str, workdir: Path) -> Iterator[str]:
    """rotel as shipped (collector-config/rotel.sh and rotel.env) on free loopback ports, exporting to
    `exporter_endpoint`; yields its OTLP/HTTP base URL. Its log is kept; it must still be alive at the end."""
    grpc_port, http_port = free_port(), free_port()
    env = {**os.environ,
           "ROTEL_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{grpc_port}", "ROTEL_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{http_port}",
           "ROTEL_OTLP_EXPORTER_ENDPOINT": exporter_endpoint, "ROTEL_BATCH_TIMEOUT": "50ms",
           "ROTEL_PID_FILE": str(workdir / "rotel.pid")}
    log_path = workdir / "rotel.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(["bash", str(ROTEL_SH)], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def listening() -> bool:
            for port in (grpc_port, http_port):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                except OSError:
                    return False
            return True

        wait_until("rotel listening", lambda: proc.poll() is not None or listening(), 15)  # exited: reported below
        assert proc.poll() is None, f"rotel exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}"
        yield f"http://127.0.0.1:{http_port}"
        assert proc.poll() is None, f"rotel died during the test:\n{log_path.read_text(errors='replace')}"
    finally:
        if proc.poll() is None:  # rotel.sh execs rotel: the process is rotel itself
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


# multiprocessing's own per-process helpers (the render workers' forkserver, the resource tracker): they live
# as long as this process, by design; what they started (render workers) must be gone.
MP_HELPERS = (b"multiprocessing.forkserver", b"multiprocessing.resource_tracker")


def children_of(pid: int, helpers: bool = True) -> list[str]:
    """Live child processes of `pid` (from /proc), as 'pid command' strings; for multiprocessing's helpers,
    their own children instead (forked from the forkserver, they share its command line)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            fields = text[text.rindex(")") + 2:].split()
            if int(fields[1]) != pid or fields[0] == "Z":
                continue
            if helpers and any(helper in (stat.parent / "cmdline").read_bytes() for helper in MP_HELPERS):
                found += children_of(int(stat.parent.name), helpers=False)
                continue
            found.append(f"{stat.parent.name} {text[text.index('(') + 1:text.rindex(')')]}")
    return found


def keep_artifacts(data_dir: Path, lines: list[str]) -> None:
    """serve's printed lines and its data dir (sessions, scenario, queue, ledger, traces) for CI."""
    (OUT / "serve.log").write_text("".join(f"{line}\n" for line in lines))
    if data_dir.exists():
        shutil.rmtree(OUT / "wt-data", ignore_errors=True)
        shutil.copytree(data_dir, OUT / "wt-data")


def test_a_flagged_incident_is_replayed_and_its_verdict_shows_in_phoenix(tmp_path: Path) -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    timings: dict[str, float] = {}
    t0 = mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        timings[name], mark = now - mark, now

    lines: list[str] = []
    data_dir = tmp_path / "wt-data"
    with contextlib.ExitStack() as stack:
        stack.callback(keep_artifacts, data_dir, lines)
        # 1. Phoenix, on loopback (its log kept whatever happens: it explains a lost span)
        stack.callback(lambda: (tmp_path / "phoenix" / "phoenix.log").exists() and shutil.copyfile(
            tmp_path / "phoenix" / "phoenix.log", OUT / "phoenix.log"))
        phoenix: Phoenix = stack.enter_context(running_phoenix(tmp_path / "phoenix"))
        lap("phoenix start")

        # 2. the candidate under test: the reference agent, telemetry off, pointed where the replay serves
        #    the recorded tools (MCP) and the recorded model (cassette)
        universe_port, llm_port = free_port(), free_port()
        candidate = stack.enter_context(start_in_thread(AgentConfig(
            mcp_url=f"http://127.0.0.1:{universe_port}/mcp", openai_base_url=f"http://127.0.0.1:{llm_port}/v1"),
            port=0))

        # 3. wt-otel serve with automatic replay; results to Phoenix over OTLP/gRPC
        config = ServeConfig(
            receivers=ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint=None), data_dir=data_dir,
            assembler=AssemblerConfig(grace=0.5),
            replay=ReplayConfig(enabled=True, runtime="http_inject", inject_url=candidate.url, llm="replay",
                                services=["crm-agent"], universe_port=universe_port, llm_port=llm_port,
                                results=ReplayResultsConfig(otlp_endpoint=phoenix.otlp_grpc_endpoint,
                                                            otlp_protocol="grpc")))
        server = Server(config, emit=lines.append, warn=lambda text: lines.append(f"warning: {text}")).start()
        stack.callback(server.stop)

        def queue_events(kind: str) -> list[dict[str, Any]]:
            events, _, _ = read_events(data_dir / QUEUE_FILE)
            return [e for e in events if e["event"] == kind]

        # 4. rotel with the wt-otel processor, exporting OTLP/gRPC to serve
        rotel_url = stack.enter_context(rotel(f"http://127.0.0.1:{server.grpc_port}", tmp_path))
        lap("serve, candidate, rotel start")

        # 5. the instrumented app, live: scripted model, CRM tools; telemetry to rotel and to Phoenix
        llm = stack.enter_context(FakeLLM())
        tools = stack.enter_context(crm_tools())
        production = stack.enter_context(ProductionAgent(llm.base_url, tools.url, otlp_endpoint=rotel_url,
                                                         extra_otlp_endpoints=[phoenix.base_url]))
        replies = {session: inject(production.url, session, text, incident)
                   for session, text, incident in CONVERSATIONS}
        production.stop()  # SIGINT: flushes its batched spans to both exporters
        assert replies["conv-ui-phone"]["reply"] == WRONG_PHONE_ANSWER, replies
        assert [c["name"] for c in replies["conv-ui-phone"]["tool_calls"]] == [TOOL_NAME], replies
        lap("live traffic")

        # 6. serve assembles, flags, imports, replays and exports: wait for the job's `done` line
        [done] = wait_until("the incident's replay done in serve", lambda: queue_events("done"), REPLAY_TIMEOUT_S,
                            lambda: "\n".join(lines))
        lap("flag + import + replay + export")

        # 7. the result spans in Phoenix: the scenario span names the incident, then its whole trace
        def scenario_spans() -> list[dict]:
            return [s for s in phoenix.spans(attributes={"wt.origin.ref": INCIDENT})
                    if s["name"].startswith("scenario ")]

        [scenario] = wait_until("the scenario span in Phoenix", scenario_spans, PHOENIX_TIMEOUT_S, phoenix.log_tail)
        replay_trace = scenario["context"]["trace_id"]
        spans = phoenix.wait_for_spans(replay_trace, 5, timeout=PHOENIX_TIMEOUT_S)
        lap("result spans in Phoenix")

        # -- serve's side: the flagged session (which came through rotel) became one scenario, replayed once
        assert done["verdict"] == VERDICT, done
        assert done["exported"].startswith("5 result span(s) sent to"), done
        [enqueued] = queue_events("enqueued")
        assert enqueued["ref"] == INCIDENT
        latest = read_index(data_dir).latest()
        [flagged] = [e for e in latest.values() if e["flagged"]]
        assert flagged["flag_ref"] == INCIDENT and flagged["complete"]
        incident_trace = flagged["trace_ids"][0]
        assert len(latest) == len(CONVERSATIONS)  # the good conversation arrived too, and was not replayed

        # -- Phoenix's side: the tree, the verdicts, the span kinds
        by_name = {s["name"]: s for s in spans}
        assert len(by_name) == len(spans), [s["name"] for s in spans]
        sweep = next(s for s in spans if s["name"].startswith("sweep "))
        run = next(s for s in spans if s["name"].startswith("run "))
        turn = next(s for s in spans if s["name"].startswith("invoke_agent "))
        tool = by_name[f"execute_tool {TOOL_NAME}"]
        assert len(spans) == 5, sorted(by_name)  # one sweep, scenario, run, turn and witnessed tool call
        assert sweep["parent_id"] is None and scenario["parent_id"] == sweep["context"]["span_id"]
        assert run["parent_id"] == scenario["context"]["span_id"] and turn["parent_id"] == run["context"]["span_id"]
        assert tool["parent_id"] == turn["context"]["span_id"]
        # Phoenix's classification: sweep/scenario/run from our openinference.span.kind CHAIN (which Phoenix
        # moves into span_kind), the rest from gen_ai.operation.name
        kinds = {s["name"].split(" ")[0]: s["span_kind"] for s in spans}
        assert kinds == {"sweep": "CHAIN", "scenario": "CHAIN", "run": "CHAIN", "invoke_agent": "AGENT",
                         "execute_tool": "TOOL"}, kinds
        assert phoenix.spans(trace_id=replay_trace, span_kind="TOOL") == [tool]

        scenario_attrs, run_attrs = scenario["attributes"], run["attributes"]
        assert scenario_attrs["wt.verdict"] == run_attrs["wt.verdict"] == VERDICT
        assert scenario["status_code"] == run["status_code"] == "ERROR"
        assert scenario_attrs["wt.scenario.id"] == enqueued["scenario"].removeprefix("scenarios/")
        assert scenario_attrs["wt.layer.outcome.pass_rate"] == 0.0
        assert run_attrs["wt.layer.outcome.passed"] is False and run_attrs["wt.layer.outcome.detail"]
        assert run_attrs["wt.layer.integrity.passed"] is True
        assert run_attrs["wt.evidence.llm"] == "replay" and run_attrs["wt.runtime"] == "http_inject"
        assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"query": "Bluewing"}
        assert tool["attributes"]["wt.tool.match"] == "exact"
        assert "+1-555-0199" in turn["attributes"]["output.value"]  # the wrong answer, reproduced
        filtered = phoenix.spans(attributes={"wt.verdict": VERDICT, "wt.origin.ref": INCIDENT})
        assert scenario["context"]["span_id"] in {s["context"]["span_id"] for s in filtered}

        # -- the incident: named on the scenario span, and its trace (sent by the app itself) is in Phoenix
        assert scenario_attrs["wt.incident.trace_id"] == incident_trace
        incident_spans = phoenix.wait_for_spans(incident_trace, 2, timeout=PHOENIX_TIMEOUT_S)
        incident_root = next(s for s in incident_spans if s["parent_id"] is None)
        assert incident_root["context"]["span_id"] == scenario_attrs["wt.incident.span_id"]
        assert incident_root["attributes"]["wt.incident"] == INCIDENT
        assert any(s["span_kind"] == "TOOL" for s in incident_spans), [(s["name"], s["span_kind"])
                                                                      for s in incident_spans]
        links = phoenix.span_links(replay_trace, scenario["context"]["span_id"])
        if links is not None:  # Phoenix 20.26.1 drops OTLP span links; a version that keeps them must show ours
            assert incident_trace in json.dumps(links), links
        lap("API checks")

        # 8. the trace page, scenario span selected: tree + the scenario's attributes, as a user sees them
        screenshot = OUT / "phoenix-replay.png"
        page = render_page(phoenix.trace_url(replay_trace, selected_span=scenario["id"]), screenshot,
                           window=(1800, 1200))  # wide enough for the whole slide-over, tall for the attributes
        (OUT / "phoenix-replay.txt").write_text(page.text + "\n")
        for expected in (scenario["name"], sweep["name"], run["name"], turn["name"], tool["name"],
                         "wt.verdict", VERDICT, f"{VERDICT}: run 1: outcome:", "wt.incident.trace_id",
                         scenario_attrs["wt.incident.trace_id"]):
            assert expected in page.text, f"{expected!r} not on {page.url} (screenshot {screenshot}):\n{page.text}"
        lap("trace page render")
        if os.environ.get("WT_OTEL_UPDATE_DOCS_SCREENSHOT") == "1" or not DOCS_SCREENSHOT.exists():
            DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(screenshot, DOCS_SCREENSHOT)

    lap("teardown")
    strays = children_of(os.getpid())
    assert not strays, f"processes left running: {strays}"
    total = time.monotonic() - t0
    report = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in timings.items())
    (OUT / "timings.txt").write_text(f"total {total:.1f} s: {report}\n")
    print(f"full loop in {total:.1f} s: {report}")
