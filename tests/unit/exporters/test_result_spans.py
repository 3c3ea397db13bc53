"""Results as OTel spans (exporters/result_spans.py, exporters/span_plan.py).

A hand-built sweep (results record + traces written to disk with the pydantic
models + incident envelopes) is exported through the real OTel SDK exporters
to wt-otel's own OTLP receivers, over gRPC and HTTP/protobuf, and the spans
that arrive are checked: tree, names, GenAI and wt.* attributes, status,
recorded times, the link to the incident, the resource. A dead endpoint must
cost a bounded time, one warning and no exception.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.unit.replay.test_run import AGENT_RUNTIME, cli
from tests.unit.replay.test_run import write_scenario as write_runnable
from wt_otel.components import load
from wt_otel.contracts.results import LayerResult, RunScore, ScenarioResult, SweepResult
from wt_otel.contracts.run import Evidence, Integrity, McpCall, Timings, ToolCall, Trace, Turn, load_trace
from wt_otel.exporters.result_spans import GRACE_S, OtlpTarget, ResultSpansExporter, parse_headers, read_incident
from wt_otel.exporters.span_plan import ScenarioEvidence, incident_link, iso_ns, place_tool_calls, plan_sweep
from wt_otel.model.spans import SpanRecord
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers import ReceiversConfig, start_receivers

TIMEOUT = 10.0
TOKEN = "s3cret"
INCIDENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
INCIDENT_SPAN = "b7ad6b7169203331"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """grpc and requests honour proxy variables; these tests talk to 127.0.0.1 only."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


# ---------------------------------------------------------------- the sweep under test


def ms(iso: str) -> int:
    value = iso_ns(iso)
    assert value is not None
    return value // 1_000_000


def make_trace(sid: str, index: int, started: str, ended: str, turns: Sequence[Turn], calls: Sequence[McpCall],
               integrity: str = "PASS", detail: str | None = None) -> Trace:
    return Trace(wt_trace=1, scenario_id=sid, run_index=index, run_id=f"sw-1/{sid}/run-{index}", label="nightly",
                 started_at=started, ended_at=ended, runtime="http_inject", inject_url="http://127.0.0.1:8647",
                 session_id=f"sess-{sid}-{index}", turns=list(turns), mcp_calls=list(calls),
                 evidence=Evidence(witness="available", llm="replay"),
                 integrity=Integrity(status=integrity, detail=detail),  # type: ignore[arg-type]
                 timings=Timings(total_ms=2000, reset_ms=100, surface_ms=50))


def score(sid: str, index: int, passed: bool, outcome_detail: str) -> RunScore:
    return RunScore(scenario_id=sid, run_index=index, run_id=f"sw-1/{sid}/run-{index}", passed=passed,
                    layers={"outcome": LayerResult(passed=passed, detail=outcome_detail),
                            "integrity": LayerResult(passed=True, detail="")})


def refund_traces() -> list[Trace]:
    """Two turns; a tool call inside each turn's window (turn 1: 05.150-05.750, turn 2: 05.750-06.550)."""
    turns = [Turn(text="I want a refund for A-1", reply="Looking it up.", latency_ms=600,
                  tool_calls=[ToolCall(name="lookup_order", arguments={"id": "A-1"})]),
             Turn(text="Yes please", reply="Refunded €12.", latency_ms=800,
                  tool_calls=[ToolCall(name="refund", arguments={"id": "A-1"})])]
    calls = [McpCall(tool_name="lookup_order", args={"id": "A-1"}, result={"status": "shipped"}, match="exact",
                     timestamp_ms=ms("2026-01-02T03:04:05.400Z")),
             McpCall(tool_name="refund", args={"id": "A-1"}, result="refunded", match="nearest",
                     divergence={"policy": "nearest", "matched": 0}, timestamp_ms=ms("2026-01-02T03:04:06.000Z"))]
    return [make_trace("refund", 1, "2026-01-02T03:04:05.000Z", "2026-01-02T03:04:07.000Z", turns, calls)]


def lookup_traces() -> list[Trace]:
    """Run 1 passes; run 2 fails its outcome and its (untimed) tool call was answered with an error."""
    ok = make_trace("lookup", 1, "2026-01-02T03:04:08.000Z", "2026-01-02T03:04:09.000Z",
                    [Turn(text="Where is A-1?", reply="In transit.", latency_ms=300, tool_calls=[])],
                    [McpCall(tool_name="lookup_order", args={"id": "A-1"}, result={"status": "in transit"},
                             match="exact", timestamp_ms=ms("2026-01-02T03:04:08.200Z"))])
    bad = make_trace("lookup", 2, "2026-01-02T03:04:10.000Z", "2026-01-02T03:04:11.000Z",
                     [Turn(text="Where is A-1?", reply="", latency_ms=300, tool_calls=[], error="model timeout")],
                     [McpCall(tool_name="lookup_order", args={"id": "B-2"}, result={"error": "unknown order"},
                              match="fail_call", divergence={"policy": "fail_call", "matched": None},
                              is_error=True)])
    return [ok, bad]


def sweep_record() -> SweepResult:
    refund = ScenarioResult(scenario_id="refund", pack="billing", owner="team-pay", label="nightly",
                            tags=["origin:abc", "unreviewed"], origin="abc", verdict="PASS", runs=1, runs_passed=1,
                            layer_pass_rates={"outcome": 1.0, "integrity": 1.0}, run_ids=["sw-1/refund/run-1"],
                            scores=[score("refund", 1, True, "mentions the refund")])
    lookup = ScenarioResult(scenario_id="lookup", pack="orders", verdict="FAIL",
                            detail="1/2 runs passed; run 2: outcome: the reply does not say where A-1 is",
                            runs=2, runs_passed=1, layer_pass_rates={"outcome": 0.5, "integrity": 1.0},
                            scores=[score("lookup", 1, True, "says in transit"),
                                    score("lookup", 2, False, "the reply does not say where A-1 is")])
    skipped = ScenarioResult(scenario_id="later", verdict="ERROR", detail="not run: circuit breaker")
    return SweepResult(sweep_id="sw-1", started_at="2026-01-02T03:04:04.000Z",
                       finished_at="2026-01-02T03:04:20.000Z", label="nightly", git_sha="abc123", wt_version="0.1.0",
                       selection={"tags": ["billing"]}, scenarios=[refund, lookup, skipped])


def envelope(trace_id: Any, span_id: Any) -> dict[str, Any]:
    return {"windtunnel_interchange": 1, "source": {"ref": "abc"}, "messages": [],
            "provenance": {"trace_ids": [trace_id], "root_span_id": span_id}}


def write_scenario(root: Path, sid: str, traces: list[Trace], env: dict[str, Any] | None,
                   envelope_name: str = "incident.wtin.json") -> SimpleNamespace:
    """A scenario directory (scenario.yaml + envelope) and its traces on disk, read back like the runner has them."""
    directory = root / "scenarios" / sid
    directory.mkdir(parents=True)
    (directory / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": sid, "user_turns": ["hi"],
                                                             "fixtures": {"envelope": envelope_name}}))
    if env is not None:
        (directory / envelope_name).write_text(json.dumps(env))
    loaded = []
    for trace in traces:
        path = root / "runs" / "sw-1" / sid / f"run-{trace.run_index}.trace.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trace.to_dict()))
        loaded.append(load_trace(json.loads(path.read_text())))
    return SimpleNamespace(traces=loaded, path=directory)


@pytest.fixture
def runner_sweep(tmp_path: Path) -> SimpleNamespace:
    """What the runner hands the exporter: the results record plus per scenario its traces and directory."""
    scenarios = [write_scenario(tmp_path, "refund", refund_traces(), envelope(INCIDENT_TRACE.upper(), INCIDENT_SPAN),
                                envelope_name="the-incident.json"),
                 write_scenario(tmp_path, "lookup", lookup_traces(), envelope("not-hex", "xyz")),
                 SimpleNamespace(traces=[], path=tmp_path / "scenarios" / "later")]
    return SimpleNamespace(record=sweep_record(), scenarios=scenarios)


# ---------------------------------------------------------------- an in-process OTLP receiver


class Collected:
    """A pipeline consumer that keeps every span that reaches it."""

    def __init__(self) -> None:
        self.records: list[SpanRecord] = []
        self.cond = threading.Condition()

    def consume(self, records: Sequence[Any], now: float) -> None:
        with self.cond:
            self.records.extend(r for r in records if isinstance(r, SpanRecord))
            self.cond.notify_all()

    def tick(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass

    def wait_for(self, n: int) -> list[SpanRecord]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.records) >= n, TIMEOUT), f"got {len(self.records)} of {n}"
            return list(self.records)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """wt-otel's own receivers on free ports, requiring a bearer token (so headers are proven to be sent)."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    collected, metrics = Collected(), Metrics()
    pipeline = Pipeline(collected, metrics, tick_interval=60).start()
    config = ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint="127.0.0.1:0",
                             auth_token_file=tmp_path / "token")
    receivers = start_receivers(config, pipeline, metrics)
    yield SimpleNamespace(collected=collected, endpoints={"grpc": f"127.0.0.1:{receivers.grpc_port}",
                                                          "http/protobuf": f"http://127.0.0.1:{receivers.http_port}"})
    receivers.stop(grace=1)
    pipeline.stop(timeout=TIMEOUT)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def by_name(spans: list[SpanRecord]) -> dict[str, list[SpanRecord]]:
    out: dict[str, list[SpanRecord]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


# ---------------------------------------------------------------- export to a live receiver


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_sweep_arrives_as_a_linked_genai_span_tree(protocol: str, receiver: SimpleNamespace,
                                                   runner_sweep: SimpleNamespace,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")  # a user's sampler setting must not drop results
    warnings: list[str] = []
    exporter = load("exporters", "result-spans")(receiver.endpoints[protocol], protocol,
                                                 [f"Authorization=Bearer {TOKEN}"], warn=warnings.append)
    report = exporter.export_sweep(runner_sweep)
    assert report.ok, report.describe()
    assert warnings == []
    assert report.sent == report.spans == 1 + 3 + 3 + 4 + 4  # sweep, scenarios, runs, turns, tool calls
    spans = receiver.collected.wait_for(report.spans)
    named = by_name(spans)
    ids = {s.span_id: s for s in spans}

    # one trace, one root, every parent present
    assert len({s.trace_id for s in spans}) == 1
    (root,) = named["sweep sw-1"]
    assert root.parent_span_id is None
    assert all(s.parent_span_id in ids for s in spans if s is not root)

    # resource and scope
    assert root.resource["service.name"] == "wt-otel" and root.resource["service.version"] == "0.1.0"
    assert root.scope_name == "wt_otel.exporters.result_spans"

    # the sweep: failed (one scenario failed, one never ran), its own times
    assert root.status_code == "ERROR" and "2 of 3 scenario(s) did not pass" in root.status_message
    assert root.attributes["wt.sweep.id"] == "sw-1" and root.attributes["wt.sweep.passed"] is False
    assert root.attributes["wt.label"] == "nightly" and root.attributes["wt.git.sha"] == "abc123"
    assert (root.start_ns, root.end_ns) == (iso_ns("2026-01-02T03:04:04Z"), iso_ns("2026-01-02T03:04:20Z"))

    # scenarios under the sweep, with the link to the incident's original trace and root span
    (refund,) = named["scenario refund"]
    (lookup,) = named["scenario lookup"]
    (later,) = named["scenario later"]
    assert {refund.parent_span_id, lookup.parent_span_id, later.parent_span_id} == {root.span_id}
    assert refund.status_code == "OK" and refund.attributes["wt.verdict"] == "PASS"
    assert refund.attributes["wt.pack"] == "billing" and refund.attributes["wt.owner"] == "team-pay"
    assert refund.attributes["wt.origin.ref"] == "abc" and refund.attributes["wt.layer.outcome.pass_rate"] == 1.0
    assert refund.attributes["wt.tags"] == ["origin:abc", "unreviewed"]
    assert [(link.trace_id, link.span_id) for link in refund.links] == [(INCIDENT_TRACE, INCIDENT_SPAN)]
    assert refund.links[0].attributes["wt.link.type"] == "incident"
    assert lookup.links == [] and later.links == []  # not hex / no envelope: no link, no failure
    assert lookup.status_code == "ERROR" and "run 2: outcome: the reply does not say" in lookup.status_message
    assert later.status_code == "ERROR" and later.attributes["wt.detail"] == "not run: circuit breaker"

    # runs: recorded times, per-layer results, the failing layer's detail as the status
    runs = {(ids[s.parent_span_id].name, s.name): s for s in spans if s.name.startswith("run ")}
    assert set(runs) == {("scenario refund", "run 1"), ("scenario lookup", "run 1"), ("scenario lookup", "run 2")}
    run = runs["scenario refund", "run 1"]
    assert (run.start_ns, run.end_ns) == (iso_ns("2026-01-02T03:04:05Z"), iso_ns("2026-01-02T03:04:07Z"))
    assert run.attributes["wt.run.index"] == 1 and run.attributes["wt.scenario.id"] == "refund"
    assert run.attributes["gen_ai.conversation.id"] == "sess-refund-1"
    assert run.attributes["wt.layer.outcome.passed"] is True and run.status_code == "OK"
    failed = runs["scenario lookup", "run 2"]
    assert failed.status_code == "ERROR"
    assert failed.status_message == "outcome: the reply does not say where A-1 is"
    assert failed.attributes["wt.verdict"] == "FAIL" and failed.attributes["wt.layer.outcome.passed"] is False
    assert failed.attributes["wt.layer.outcome.detail"] == "the reply does not say where A-1 is"

    # turns: invoke_agent with semconv messages, laid out after reset (100 ms) + surface (50 ms)
    turns = sorted((s for s in spans if s.parent_span_id == run.span_id), key=lambda s: s.start_ns)
    assert [s.name for s in turns] == ["invoke_agent http://127.0.0.1:8647"] * 2
    first = turns[0]
    assert first.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert first.attributes["gen_ai.agent.name"] == "http://127.0.0.1:8647"
    assert first.attributes["gen_ai.conversation.id"] == "sess-refund-1"
    assert json.loads(first.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "I want a refund for A-1"}]}]
    assert json.loads(first.attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Looking it up."}], "finish_reason": "stop"}]
    assert first.kind == "CLIENT"
    assert (first.start_ns, first.end_ns) == (iso_ns("2026-01-02T03:04:05.150Z"), iso_ns("2026-01-02T03:04:05.750Z"))

    # tool calls: each under the turn whose window holds its timestamp, with match and divergence policy
    tools = {s.attributes["gen_ai.tool.name"]: s for s in spans if s.parent_span_id in {t.span_id for t in turns}}
    assert tools["lookup_order"].parent_span_id == turns[0].span_id
    assert tools["refund"].parent_span_id == turns[1].span_id
    lookup_call = tools["lookup_order"]
    assert lookup_call.name == "execute_tool lookup_order"
    assert lookup_call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert json.loads(lookup_call.attributes["gen_ai.tool.call.arguments"]) == {"id": "A-1"}
    assert json.loads(lookup_call.attributes["gen_ai.tool.call.result"]) == {"status": "shipped"}
    assert lookup_call.attributes["wt.tool.match"] == "exact"
    assert "wt.tool.divergence.policy" not in lookup_call.attributes
    assert lookup_call.start_ns == iso_ns("2026-01-02T03:04:05.400Z")
    assert tools["refund"].attributes["gen_ai.tool.call.result"] == "refunded"  # a string stays unquoted
    assert tools["refund"].attributes["wt.tool.divergence.policy"] == "nearest"

    # the failed run's untimed error call still lands under its turn, as an ERROR tool span
    (bad_turn,) = [s for s in spans if s.parent_span_id == failed.span_id]
    assert bad_turn.status_code == "ERROR" and "model timeout" in bad_turn.status_message
    (bad_call,) = [s for s in spans if s.parent_span_id == bad_turn.span_id]
    assert bad_call.status_code == "ERROR" and bad_call.attributes["wt.tool.divergence.policy"] == "fail_call"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers: the slow way for an endpoint to be down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


def big_sweep() -> tuple[SweepResult, list[ScenarioEvidence]]:
    """More spans than one OTLP batch (512), so a slow failure must not be paid once per batch."""
    calls = [McpCall(tool_name="t", args={"i": i}, match="exact") for i in range(1500)]
    trace = make_trace("big", 1, "2026-01-02T03:04:05Z", "2026-01-02T03:04:06Z",
                       [Turn(text="go", reply="done", latency_ms=5, tool_calls=[])], calls)
    record = SweepResult(sweep_id="big", started_at="2026-01-02T03:04:05Z", finished_at="2026-01-02T03:04:06Z",
                         scenarios=[ScenarioResult(scenario_id="big", verdict="PASS", runs=1, runs_passed=1)])
    return record, [ScenarioEvidence([trace])]


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
@pytest.mark.parametrize("down", ["refused", "silent"])
def test_dead_endpoint_is_one_warning_in_bounded_time(protocol: str, down: str, request: pytest.FixtureRequest,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port() if down == "refused" else request.getfixturevalue("silent_port")
    endpoint = f"127.0.0.1:{port}" if protocol == "grpc" else f"http://127.0.0.1:{port}"
    warnings: list[str] = []
    exporter = ResultSpansExporter(endpoint, protocol, timeout_s=1.0, warn=warnings.append)
    record, evidence = big_sweep()
    t0 = time.monotonic()
    report = exporter.export(record, evidence)
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0 + GRACE_S + 1.0, f"export took {elapsed:.1f} s"
    assert not report.ok and report.sent == 0 and report.spans == 1 + 1 + 1 + 1 + 1500
    assert len(warnings) == 1, warnings
    assert str(port) in warnings[0] and "the sweep's results are unaffected" in warnings[0]
    assert "retrying in" not in warnings[0] and "not accepted" not in warnings[0]  # the cause is named
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]  # no SDK retry chatter


def test_a_broken_exporter_or_half_built_sweep_never_raises(runner_sweep: SimpleNamespace) -> None:
    warnings: list[str] = []
    exporter = ResultSpansExporter("http://127.0.0.1:9", warn=warnings.append)
    assert not exporter.export_sweep(SimpleNamespace(record=None, scenarios=[])).ok

    def boom() -> Any:
        raise RuntimeError("no exporter today")

    exporter.target = SimpleNamespace(url="u", protocol="grpc", timeout_s=1.0, span_exporter=boom)  # type: ignore
    report = exporter.export_sweep(runner_sweep)
    assert report.error == "RuntimeError: no exporter today"
    assert len(warnings) == 2


# ---------------------------------------------------------------- settings and the pure plan


def test_settings_are_validated_up_front_and_urls_normalised() -> None:
    assert OtlpTarget("http://h:4318").url == "http://h:4318/v1/traces"
    assert OtlpTarget("http://h:6006/v1/traces/").url == "http://h:6006/v1/traces"
    assert OtlpTarget("https://cloud/api/otel", "http/protobuf").url == "https://cloud/api/otel/v1/traces"
    assert OtlpTarget("h:4317", "grpc").url == "http://h:4317"
    assert OtlpTarget("https://h:4317", "grpc").url == "https://h:4317"
    for bad in (("h:4318", "http/protobuf"), ("http://h", "http/json"), ("ftp://h:1", "grpc"), ("", "grpc")):
        with pytest.raises(ValueError):
            OtlpTarget(*bad)
    assert parse_headers(["Authorization=Bearer a=b", "x-k = v"]) == {"authorization": "Bearer a=b", "x-k": "v"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_headers(["novalue"])


def test_incident_link_needs_valid_hex_ids(tmp_path: Path) -> None:
    assert incident_link(envelope(INCIDENT_TRACE, INCIDENT_SPAN)) is not None
    for trace_id, span_id in ((None, INCIDENT_SPAN), (INCIDENT_TRACE, None), ("0" * 32, INCIDENT_SPAN),
                              (INCIDENT_TRACE[:-1], INCIDENT_SPAN), (INCIDENT_TRACE, "g" * 16), (7, INCIDENT_SPAN)):
        assert incident_link(envelope(trace_id, span_id)) is None
    assert incident_link({"provenance": "nope"}) is None
    assert read_incident(tmp_path / "missing") is None
    (tmp_path / "incident.wtin.json").write_text("{not json")
    assert read_incident(tmp_path) is None


def test_untimed_tool_calls_follow_the_turns_that_reported_them() -> None:
    turns = [Turn(text="a", reply="", latency_ms=10, tool_calls=[ToolCall(name="x", arguments={})]),
             Turn(text="b", reply="", latency_ms=10, tool_calls=[ToolCall(name="y", arguments={}),
                                                                ToolCall(name="x", arguments={})])]
    calls = [McpCall(tool_name=n, args={}, match="exact") for n in ("x", "y", "x", "z")]
    trace = make_trace("s", 1, "2026-01-02T03:04:05Z", "2026-01-02T03:04:06Z", turns, calls)
    assert place_tool_calls(trace, [(0, 10), (10, 20)]) == [0, 1, 1, 1]
    assert place_tool_calls(trace, []) == [None] * 4


def test_plan_widens_parents_and_handles_runs_without_turns() -> None:
    """A tool call outside its estimated turn window widens the turn, never the other way round."""
    late = McpCall(tool_name="x", args={}, match="exact", timestamp_ms=ms("2026-01-02T03:04:09Z"))
    trace = make_trace("s", 1, "2026-01-02T03:04:05Z", "2026-01-02T03:04:06Z",
                       [Turn(text="a", reply="b", latency_ms=10, tool_calls=[])], [late])
    errored = make_trace("s", 2, "2026-01-02T03:04:07Z", "2026-01-02T03:04:07.5Z", [],
                         [McpCall(tool_name="x", args={}, match="exact")], integrity="ERROR", detail="reset failed")
    record = SweepResult(sweep_id="w", started_at="2026-01-02T03:04:05Z", finished_at="2026-01-02T03:04:06Z",
                         scenarios=[ScenarioResult(scenario_id="s", verdict="ERROR", detail="run 2: reset failed")])
    tree = plan_sweep(record, [ScenarioEvidence([trace, errored])])
    scenario = tree.children[0]
    run1, run2 = scenario.children
    assert run1.children[0].end_ns == iso_ns("2026-01-02T03:04:09Z") == run1.end_ns == tree.end_ns
    assert run2.status == "ERROR" and run2.status_detail == "integrity: reset failed"
    assert run2.children[0].name == "execute_tool x"  # no turn: the call hangs off the run itself
    assert run2.attributes["wt.layer.integrity.passed"] is False


# ---------------------------------------------------------------- wired into `wt-otel run`


def test_run_with_the_endpoint_down_still_writes_every_result(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_runnable(tmp_path / "sc", "orders")
    port = closed_port()
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0", "--format", "json",
              "--out", "results.json", "--otlp-endpoint", f"http://127.0.0.1:{port}")
    assert res.exit_code == 0, res.output  # the sweep passed; the export's failure does not change that
    assert res.stderr.count("warning: result spans were not exported") == 1
    assert res.output.splitlines()[-1].startswith("1 pass; traces in runs/")
    rows = [json.loads(line) for line in (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert [(r["scenario_id"], r["verdict"]) for r in rows] == [("orders", "PASS")]
    assert json.loads((tmp_path / "results.json").read_text())["scenarios"][0]["verdict"] == "PASS"
    (summary,) = (tmp_path / "runs").glob("*/summary.json")
    assert json.loads(summary.read_text())["passed"] is True


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_run_exports_the_real_sweep_linked_to_its_incident(protocol: str, tmp_path: Path, receiver: SimpleNamespace,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    directory = write_runnable(tmp_path / "sc", "orders", turns=("Where is A-1?", "Thanks"))
    (directory / "incident.wtin.json").write_text(json.dumps(envelope(INCIDENT_TRACE, INCIDENT_SPAN)))
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0", "--label", "ci-7",
              "--otlp-endpoint", receiver.endpoints[protocol], "--otlp-protocol", protocol,
              "--otlp-header", f"authorization=Bearer {TOKEN}", "--agent-name", "orders-bot")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stderr
    assert f"7 result span(s) sent to {OtlpTarget(receiver.endpoints[protocol], protocol).url}" in res.output
    spans = receiver.collected.wait_for(7)  # sweep, scenario, run, 2 turns, 2 witnessed lookups
    named = by_name(spans)
    (scenario,) = named["scenario orders"]
    assert [(link.trace_id, link.span_id) for link in scenario.links] == [(INCIDENT_TRACE, INCIDENT_SPAN)]
    assert scenario.attributes["wt.verdict"] == "PASS" and scenario.attributes["wt.label"] == "ci-7"
    (run,) = named["run 1"]
    assert run.parent_span_id == scenario.span_id and run.attributes["wt.layer.outcome.passed"] is True
    turns = sorted((s for s in spans if s.parent_span_id == run.span_id), key=lambda s: s.start_ns)
    assert [s.attributes["gen_ai.operation.name"] for s in turns] == ["invoke_agent", "invoke_agent"]
    assert {(s.name, s.attributes["gen_ai.agent.name"]) for s in turns} == {("invoke_agent orders-bot", "orders-bot")}
    assert {s.attributes["gen_ai.conversation.id"] for s in turns} == {run.attributes["gen_ai.conversation.id"]}
    tools = named["execute_tool lookup_order"]
    assert sorted(t.parent_span_id for t in tools) == sorted(s.span_id for s in turns)  # one call in each turn


@pytest.mark.parametrize("args", [["--otlp-header", "a=b"], ["--otlp-protocol", "grpc"],
                                  ["--otlp-endpoint", "127.0.0.1:4318"],
                                  ["--otlp-endpoint", "http://h", "--otlp-header", "nokey"]])
def test_bad_otlp_flags_are_usage_errors_before_anything_runs(args: list[str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_runnable(tmp_path / "sc", "orders")
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0", *args)
    assert res.exit_code == 2 and "error:" in res.stderr
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- OTEL_EXPORTER_OTLP_* (issue 12)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_run_honours_the_otel_exporter_environment(protocol: str, tmp_path: Path, receiver: SimpleNamespace,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`OTEL_EXPORTER_OTLP_ENDPOINT=http://sink wt-otel run …`: the sink receives the spans, with the env's headers."""
    monkeypatch.chdir(tmp_path)
    write_runnable(tmp_path / "sc", "orders")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoints[protocol])
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"Authorization=Bearer%20{TOKEN}")  # the receiver demands it
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0")
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stderr and "result span(s) sent to" in res.output
    assert by_name(receiver.collected.wait_for(3))["scenario orders"]


def test_run_traces_endpoint_is_used_as_a_full_url(tmp_path: Path, receiver: SimpleNamespace,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_runnable(tmp_path / "sc", "orders")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoints["http/protobuf"] + "/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"authorization=Bearer {TOKEN}")
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0")
    assert res.exit_code == 0 and "warning" not in res.stderr, res.output
    assert receiver.collected.wait_for(3)


def test_run_flags_override_the_environment(tmp_path: Path, receiver: SimpleNamespace,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_runnable(tmp_path / "sc", "orders")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=wrong")
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0",
              "--otlp-endpoint", receiver.endpoints["http/protobuf"], "--otlp-header", f"authorization=Bearer {TOKEN}")
    assert res.exit_code == 0 and "warning" not in res.stderr, res.output
    assert receiver.collected.wait_for(3)
    off = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0", "--otlp-endpoint", "none")
    assert off.exit_code == 0 and "warning" not in off.stderr and "result span" not in off.output


def test_run_names_the_variable_of_a_bad_environment_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_runnable(tmp_path / "sc", "orders")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    res = cli("run", "sc", "--runtime", AGENT_RUNTIME, "--universe-port", "0")
    assert res.exit_code == 2 and "OTEL_EXPORTER_OTLP_PROTOCOL=http/json" in res.stderr


def test_serve_replay_results_fall_back_to_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wt_otel.serve.config import ReplayConfig, ReplayResultsConfig

    auto_replay = load("processors", "auto-replay")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://sink:4318/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    replay = auto_replay(ReplayConfig(enabled=True), tmp_path, tmp_path / "runs")
    assert replay.results_target == "http://sink:4318/v1/traces (http/protobuf)"
    replay.queue.close()
    configured = auto_replay(ReplayConfig(enabled=True, results=ReplayResultsConfig(
        otlp_endpoint="127.0.0.1:4317", otlp_protocol="grpc")), tmp_path, tmp_path / "runs")
    assert configured.results_target == "http://127.0.0.1:4317 (grpc)"
    assert configured.drop_exporter_if_self({4317}) is not None  # pointed at serve itself: off, said
    assert configured.results_target.startswith("not exported")
    configured.queue.close()
    off = auto_replay(ReplayConfig(enabled=True, results=ReplayResultsConfig(otlp_endpoint="none")),
                      tmp_path, tmp_path / "runs")
    assert off.results_target.startswith("not exported")
    off.queue.close()
