"""Automatic replay in `wt-otel serve`: a flagged incident in live telemetry becomes a replayed, scored scenario.

Real parts throughout: serve's own wiring in-process (`wt_otel.serve.server.Server`, what the command runs), the
reference agent live as its own process with its OTel GenAI instrumentation exporting OTLP/HTTP to serve
(model: the scripted fake LLM of tests/fixtures/producers/_common; tools: a CRM MCP server), the same agent
in a thread as the replay candidate (tools and model: what the replay serves, so no fake LLM at replay
time), and result spans received over OTLP by wt-otel's own receivers. The other tests send the recorded
telemetry again (with fresh ids where they need a new incident) instead of driving the agent each time.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.support.producers import FIRST_ANSWER, Handler
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ReplayConfig, ReplayResultsConfig, ServeConfig
from wt_otel.serve.replay_queue import QUEUE_FILE, read_events
from wt_otel.serve.server import Server

pytest.importorskip("agents", reason="openai-agents is a test dependency")

from examples.agent import AgentConfig, start_in_thread  # noqa: E402
from examples.demo.stage import (  # noqa: E402
    ProductionAgent,
    ResultSink,
    crm_tools,
    free_port,
    inject,
    reidentify,
    send_otlp_json,
)

INCIDENT = "INC-T-1"
FLAGGED_CONV = "conv-flagged"
RELEASE = threading.Event()  # lets `blocking_agent` return


def blocking_agent(text: str, session_id: str) -> dict[str, Any]:
    """A python-runtime agent that holds the worker until RELEASE: a replay in flight, on demand."""
    RELEASE.wait(30)
    return {"reply": "released", "tool_calls": []}


@dataclass
class Candidate:
    url: str
    universe_port: int
    llm_port: int


@pytest.fixture(scope="module")
def candidate() -> Iterator[Candidate]:
    """The agent under test, pointed at the ports the replay serves the universe and the cassette on."""
    universe_port, llm_port = free_port(), free_port()
    config = AgentConfig(mcp_url=f"http://127.0.0.1:{universe_port}/mcp",
                         openai_base_url=f"http://127.0.0.1:{llm_port}/v1")
    with start_in_thread(config, port=0) as agent:
        yield Candidate(agent.url, universe_port, llm_port)


@pytest.fixture(scope="module")
def sink() -> Iterator[ResultSink]:
    result_sink = ResultSink()
    yield result_sink
    result_sink.stop()


def serve_config(data_dir: Path, candidate: Candidate, sink: ResultSink, **replay: Any) -> ServeConfig:
    settings: dict[str, Any] = {"enabled": True, "inject_url": candidate.url, "universe_port": candidate.universe_port,
                                "llm_port": candidate.llm_port, "services": ["crm-agent"],
                                "results": ReplayResultsConfig(otlp_endpoint=sink.url), **replay}
    return ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"), data_dir=data_dir,
                       assembler=AssemblerConfig(grace=0.3), replay=ReplayConfig(**settings))


class Serve:
    """serve's wiring in-process, its printed lines kept."""

    def __init__(self, config: ServeConfig) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []
        self.server = Server(config, emit=self.lines.append, warn=self.warnings.append).start()
        self.data_dir = config.data_dir

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        events, problems, _ = read_events(self.data_dir / QUEUE_FILE)
        assert problems == []
        return [e for e in events if kind is None or e["event"] == kind]

    def wait(self, predicate: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, (self.lines, self.warnings, self.events())
            time.sleep(0.05)

    def wait_events(self, kind: str, n: int = 1, timeout: float = 30) -> list[dict[str, Any]]:
        self.wait(lambda: len(self.events(kind)) >= n, timeout)
        return self.events(kind)

    def stop(self) -> None:
        self.server.stop()


def ledger_rows(runs_dir: Path) -> list[dict[str, Any]]:
    path = runs_dir / "ledger.ndjsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class Live:
    data_dir: Path
    dump: list[str]  # the production agent's telemetry, as OTLP/JSON lines
    lines: list[str]
    replies: list[dict[str, Any]]
    metrics: Any


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, candidate: Candidate, sink: ResultSink) -> Live:
    """The whole loop once: the production agent live -> serve -> flagged incident -> scenario -> replay."""
    tmp = tmp_path_factory.mktemp("auto-replay")
    llm = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    llm.daemon_threads = True
    threading.Thread(target=llm.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    serve = Serve(serve_config(tmp / "data", candidate, sink))
    try:
        with crm_tools() as tools, ProductionAgent(f"http://127.0.0.1:{llm.server_address[1]}/v1", tools.url,
                                                   otlp_endpoint=serve.server.http_url,
                                                   otlp_file=tmp / "agent.otlp.jsonl") as production:
            replies = [inject(production.url, "conv-normal", "What is the email on file for Bluewing?"),
                       inject(production.url, FLAGGED_CONV, "What is the email on file for Bluewing?", INCIDENT)]
        serve.wait_events("done")
    finally:
        serve.stop()
        llm.shutdown()
        llm.server_close()
    dump = (tmp / "agent.otlp.jsonl").read_text().splitlines()
    return Live(tmp / "data", dump, serve.lines, replies, serve.server.metrics)


def test_a_flagged_incident_in_live_telemetry_is_imported_replayed_scored_and_exported(live: Live,
                                                                                      sink: ResultSink) -> None:
    assert [r["reply"] for r in live.replies] == [FIRST_ANSWER] * 2
    # the data dir: both sessions, the flagged one marked
    latest = read_index(live.data_dir).latest()
    flagged = {e["conversation_id"]: e["flag_ref"] for e in latest.values() if e["flagged"] and e["complete"]}
    assert flagged == {FLAGGED_CONV: INCIDENT}
    # the scenario: the import's files, unreviewed, automatic, with the configured default outcome check
    [scenario] = (live.data_dir / "scenarios").iterdir()
    assert sorted(p.name for p in scenario.iterdir()) == ["IMPORTED.md", "fixture.universe.json",
                                                          "incident.wtin.json", "llm.cassette.json",
                                                          "scenario.yaml", "scorer.py"]
    text = (scenario / "scenario.yaml").read_text()
    assert f"origin:{INCIDENT}" in text and "- unreviewed" in text and "- auto-replay" in text
    scorer = (scenario / "scorer.py").read_text()
    assert "from wt_otel.scorers import all_of, no_divergence, substantiated_by_tools" in scorer
    assert "outcome = all_of(no_divergence(), substantiated_by_tools())" in scorer
    assert "Not reviewed" in (scenario / "IMPORTED.md").read_text()
    # the queue: one job, enqueued, started, done, with the verdict
    events, _, _ = read_events(live.data_dir / QUEUE_FILE)
    assert [e["event"] for e in events] == ["enqueued", "started", "done"]
    assert events[0]["ref"] == INCIDENT and events[0]["scenario"] == f"scenarios/{scenario.name}"
    assert events[-1]["verdict"] == "UNREVIEWED", events[-1]  # default checks passed: not a plain PASS
    # the ledger row, as `wt-otel run` writes it, and the trace beside it
    [row] = ledger_rows(live.data_dir / "runs")
    assert (row["scenario_id"], row["verdict"], row["origin"], row["label"]) == (scenario.name, "UNREVIEWED",
                                                                               INCIDENT, "auto-replay")
    assert row["reviewed"] is False and row["reproduced"] is True, row  # the recorded LLM: the same answer
    assert list((live.data_dir / "runs").glob("*/*/run-1.trace.json"))
    # the result spans, linked to the incident's trace
    spans = [s for _, s in sink.spans if s.attributes.get("wt.origin.ref") == INCIDENT]
    [scenario_span] = [s for s in spans if s.name.startswith("scenario ")]
    assert scenario_span.attributes["wt.verdict"] == "UNREVIEWED"
    assert scenario_span.attributes["wt.reviewed"] is False
    incident_traces = {e["trace_ids"][0] for e in latest.values() if e["flagged"]}
    assert [link.trace_id for link in scenario_span.links] == list(incident_traces)
    assert live.metrics.get("wt_otel_replays_total", verdict="UNREVIEWED") == 1
    assert live.metrics.get("wt_otel_replay_queue_depth") == 0
    assert any(line.startswith(f"replayed incident {INCIDENT}: UNREVIEWED: unreviewed: incident REPRODUCED")
               for line in live.lines), live.lines


def test_a_revision_of_a_queued_incident_is_not_queued_again(live: Live, candidate: Candidate, sink: ResultSink,
                                                            tmp_path: Path) -> None:
    serve = Serve(serve_config(tmp_path, candidate, sink))
    try:
        send_otlp_json(serve.server.http_url, live.dump)
        serve.wait_events("done")
        send_otlp_json(serve.server.http_url, live.dump)  # the same spans again: a late revision of the session
        serve.wait(lambda: any("(revision 2, complete, flagged" in line for line in serve.lines))
        time.sleep(0.3)
    finally:
        serve.stop()
    assert len(serve.events("enqueued")) == 1 and len(serve.events("done")) == 1
    assert serve.server.metrics.get("wt_otel_replay_duplicates_total") >= 1
    assert len(list((tmp_path / "scenarios").iterdir())) == 1


def test_a_full_queue_refuses_new_incidents_visibly(live: Live, candidate: Candidate, sink: ResultSink,
                                                    tmp_path: Path) -> None:
    RELEASE.clear()
    serve = Serve(serve_config(tmp_path, candidate, sink, runtime=f"python:{__name__}:blocking_agent",
                               queue_max=1))
    try:
        send_otlp_json(serve.server.http_url, live.dump)
        serve.wait_events("started")  # the one slot is taken by a replay in flight
        second = reidentify(live.dump, {INCIDENT: "INC-T-2", FLAGGED_CONV: "conv-2", "conv-normal": "conv-n2"})
        send_otlp_json(serve.server.http_url, second)
        [refused] = serve.wait_events("refused")
        RELEASE.set()
        serve.wait_events("done")
    finally:
        RELEASE.set()
        serve.stop()
    assert refused["ref"] == "INC-T-2" and "queue is full (1 pending" in refused["reason"]
    assert serve.server.metrics.get("wt_otel_replay_refused_total") == 1
    assert any("incident INC-T-2 NOT queued for replay" in w for w in serve.warnings), serve.warnings
    assert [e["ref"] for e in serve.events("enqueued")] == [INCIDENT]
    assert not (tmp_path / "scenarios" / "inc-t-2").exists()


def test_stopping_mid_replay_closes_it_as_error_and_the_next_start_runs_what_was_waiting(
        live: Live, candidate: Candidate, sink: ResultSink, tmp_path: Path) -> None:
    RELEASE.clear()
    config = serve_config(tmp_path, candidate, sink, runtime=f"python:{__name__}:blocking_agent",
                          stop_timeout=0.3)
    serve = Serve(config)
    try:
        send_otlp_json(serve.server.http_url, live.dump)
        serve.wait_events("started")
        send_otlp_json(serve.server.http_url, reidentify(live.dump, {INCIDENT: "INC-T-3", FLAGGED_CONV: "conv-3",
                                                                     "conv-normal": "conv-n3"}))
        serve.wait_events("enqueued", 2)
    finally:
        serve.stop()  # SIGTERM's path: the blocked replay is abandoned after stop_timeout
        RELEASE.set()
        assert serve.server.replay.join(10)  # in-process only: a real exit frees its ports at once
    [done] = serve.events("done")
    assert done["verdict"] == "ERROR" and done["detail"].startswith("run 1: interrupted: wt-otel serve stopped")
    [row] = ledger_rows(tmp_path / "runs")
    assert row["verdict"] == "ERROR" and row["origin"] == INCIDENT

    restarted = Serve(config.model_copy(update={"replay": config.replay.model_copy(
        update={"runtime": "http_inject"})}))
    try:
        restarted.wait_events("done", 2)
    finally:
        restarted.stop()
    done = restarted.events("done")
    assert [e["verdict"] for e in done] == ["ERROR", "UNREVIEWED"], [e["detail"] for e in done]
    assert len(restarted.events("started")) == 2  # each job started once: nothing was retried
    assert [r["verdict"] for r in ledger_rows(tmp_path / "runs")] == ["ERROR", "UNREVIEWED"]


def test_a_job_found_started_at_start_up_is_an_error_row_not_a_retry(live: Live, candidate: Candidate,
                                                                     sink: ResultSink, tmp_path: Path) -> None:
    """kill -9 during a replay: the next start finds it started, not done, and closes it as ERROR."""
    scenario = next((live.data_dir / "scenarios").iterdir())
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / scenario.name).symlink_to(scenario)
    (tmp_path / QUEUE_FILE).write_text(
        json.dumps({"v": 1, "event": "enqueued", "job": "j1", "ref": INCIDENT, "scenario": f"scenarios/{scenario.name}",
                    "at": "2026-01-01T00:00:00.000Z"}) + "\n"
        + json.dumps({"v": 1, "event": "started", "job": "j1", "at": "2026-01-01T00:00:01.000Z"}) + "\n")
    serve = Serve(serve_config(tmp_path, candidate, sink))
    try:
        [done] = serve.wait_events("done")
    finally:
        serve.stop()
    assert done["verdict"] == "ERROR"
    assert "interrupted: a previous wt-otel serve stopped or was killed" in done["detail"]
    assert len(serve.events("started")) == 1
    [row] = ledger_rows(tmp_path / "runs")
    assert row["verdict"] == "ERROR"
    assert serve.server.metrics.get("wt_otel_replay_errors_total") == 1


def test_an_agent_endpoint_that_is_down_is_an_error_row_and_span_and_is_not_retried(
        live: Live, candidate: Candidate, sink: ResultSink, tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    serve = Serve(serve_config(tmp_path, candidate, sink, inject_url=down))
    ref = "INC-T-DOWN"
    try:
        send_otlp_json(serve.server.http_url, reidentify(live.dump, {INCIDENT: ref, FLAGGED_CONV: "conv-down",
                                                                     "conv-normal": "conv-n-down"}))
        [done] = serve.wait_events("done")
        time.sleep(1.0)  # long enough for a retry loop to show itself
    finally:
        serve.stop()
    assert done["verdict"] == "ERROR" and f"the agent at {down} is unreachable" in done["detail"], done
    assert len(serve.events("started")) == 1
    [row] = ledger_rows(tmp_path / "runs")
    assert row["verdict"] == "ERROR" and f"the agent at {down} is unreachable" in row["detail"]
    assert serve.server.metrics.get("wt_otel_replay_errors_total") == 1
    [span] = [s for _, s in sink.spans if s.name.startswith("scenario ") and s.attributes.get("wt.origin.ref") == ref]
    assert span.status_code == "ERROR" and span.attributes["wt.verdict"] == "ERROR"


def test_outcome_scorer_names_are_checked_against_the_whitelist() -> None:
    from wt_otel.serve.config import ConfigError, load_serve_config

    with pytest.raises(ConfigError, match=r"unknown outcome scorer\(s\) \['os.system'\]"):
        load_serve_config(None, {"replay.outcome_scorers": ["os.system"]})
    from wt_otel.exporters.scenario import scorer_py
    from wt_otel.model.session import Session

    with pytest.raises(ValueError, match="outcome scorers must be some of"):
        scorer_py(Session(key="k"), ["no_divergence", "exec"])


def test_serve_flags_turn_replay_on_and_bad_replay_settings_are_exit_2(tmp_path: Path) -> None:
    import subprocess

    base = [sys.executable, "-m", "wt_otel.cli", "serve", "--data-dir", str(tmp_path), "--grpc-endpoint",
            "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0", "--inject-url", "http://127.0.0.1:1"]
    done = subprocess.run([*base, "--results-otlp-endpoint", "ftp://x"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "ERROR   replay: OTLP endpoint 'ftp://x'" in done.stderr, done.stderr
    done = subprocess.run([*base, "--replay-runtime", "python:no_such_module_here:agent"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "ERROR   replay:" in done.stderr, done.stderr
