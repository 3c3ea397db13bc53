"""`wt-otel conformance` provokes the failure paths (0002): a short timeout_s, a failing model, a must_call
scenario through the universe, and a state probe paired with the reset canary."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.support.inject_endpoint import Endpoint
from wt_otel.cli import main
from wt_otel.replay.conformance import ConformanceReport, run_conformance
from wt_otel.replay.scenarios import load_scenario_dir

T = "0af7651916cd43dd8448eb211c80319c"
SLOW_TURN = "Please do the slow lookup for A-1."


def statuses(report: ConformanceReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def detail(report: ConformanceReport, name: str) -> str:
    return next(c.detail for c in report.checks if c.name == name)


def scenario(root: Path, *, turn: str = SLOW_TURN, cassette: bool = False, must_call: list[str] | None = None,
             universe: dict | None = None) -> Path:
    d = root / "sc"
    d.mkdir()
    fixtures = {"universe": "fixture.universe.json"}
    (d / "fixture.universe.json").write_text(json.dumps(universe or {
        "windtunnel_universe": 1, "tools": [{"name": "lookup_order", "input_schema": {"type": "object"}}],
        "recordings": [{"tool_name": "lookup_order", "args": {"order_id": "A-1"}, "result": "shipped"}]}))
    if cassette:
        (d / "llm.cassette.json").write_text(json.dumps({
            "wt_cassette": 1, "latest_trace_id": T, "history_keys": [T], "traces": {T: {
                "trace_id": T, "request_context": {"model": "m", "messages": [{"role": "user", "content": turn}]},
                "response_timeline": [{"delta_ms": 0, "chunk": "It shipped."}]}}}))
        fixtures["cassette"] = "llm.cassette.json"
    (d / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": "conf", "user_turns": [turn],
                                                     "fixtures": fixtures, "must_call": must_call or []}))
    return d


def loaded(d: Path, cassette: bool = False):
    out = load_scenario_dir(d, need_cassette=cassette)
    assert out.error is None, out.error
    return out


def test_an_endpoint_that_ignores_timeout_s_is_not_conforming(tmp_path: Path) -> None:
    with Endpoint(slow_s=2.0, honour_deadline=False) as ep:
        report = run_conformance(ep.url, emit=lambda line: None, settle_s=0, deadline_s=0.3, grace_s=0.5,
                                 scenario=loaded(scenario(tmp_path)), universe_port=0)
    assert statuses(report)["inject.timeout_s"] == "FAIL"
    assert detail(report, "inject.timeout_s").startswith("ignores timeout_s: sent timeout_s 0.3")
    assert not report.conforming


def test_an_endpoint_that_enforces_timeout_s_passes(tmp_path: Path) -> None:
    with Endpoint(slow_s=2.0, honour_deadline=True) as ep:
        report = run_conformance(ep.url, emit=lambda line: None, settle_s=0, deadline_s=0.3, grace_s=0.5,
                                 scenario=loaded(scenario(tmp_path)), universe_port=0)
    assert statuses(report)["inject.timeout_s"] == "PASS", detail(report, "inject.timeout_s")
    assert report.conforming


def test_the_cli_exits_1_for_an_endpoint_that_ignores_its_deadline(tmp_path: Path) -> None:
    d = scenario(tmp_path)
    with Endpoint(slow_s=7.0, honour_deadline=False) as ep:
        result = CliRunner().invoke(main, ["conformance", "--url", ep.url, "--deadline", "0.2", "--scenario", str(d),
                                           "--universe-port", "0"])
    assert result.exit_code == 1, result.output
    assert "FAIL inject.timeout_s: ignores timeout_s" in result.output


@pytest.mark.parametrize(("fabricate", "want"), [(False, "PASS"), (True, "FAIL")])
def test_the_error_path_needs_an_error_envelope_when_the_model_fails(tmp_path: Path, fabricate: bool,
                                                                     want: str) -> None:
    port = free_port()
    d = scenario(tmp_path, turn="Where is A-1?", cassette=True)
    with Endpoint(model_url=f"http://127.0.0.1:{port}/v1", fabricate=fabricate) as ep:
        report = run_conformance(ep.url, emit=lambda line: None, settle_s=0, deadline_s=0.5,
                                 scenario=loaded(d, cassette=True), universe_port=0, llm_port=port)
    assert statuses(report)["inject.error_path"] == want, detail(report, "inject.error_path")
    if fabricate:
        assert "never a made-up reply" in detail(report, "inject.error_path")


def test_the_state_probe_finds_what_the_canary_cannot(tmp_path: Path) -> None:
    """The search-index incident: replies never show the archive, so the canary passes; the probe does not."""
    with Endpoint(wipe_archive=False) as ep:
        report = run_conformance(ep.url, emit=lambda line: None, settle_s=0,
                                 state_probe=lambda nonce: [f"archive[{i}]" for i, t in enumerate(ep.archive)
                                                            if nonce in t])
    got = statuses(report)
    assert got["reset.canary"] == "PASS" and got["reset.state_probe"] == "FAIL"
    assert "still found the nonce in: archive[" in detail(report, "reset.state_probe")
    with Endpoint(wipe_archive=True) as ep:
        clean = run_conformance(ep.url, emit=lambda line: None, settle_s=0,
                                state_probe=lambda nonce: [t for t in ep.archive if nonce in t])
    assert statuses(clean)["reset.state_probe"] == "PASS"


def test_a_bad_state_probe_spec_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["conformance", "--state-probe", "not a spec"])
    assert result.exit_code == 2 and "must be MODULE:ATTR" in result.output
    result = CliRunner().invoke(main, ["conformance", "--state-probe", "no_such_module_h7:probe"])
    assert result.exit_code == 2 and "cannot import 'no_such_module_h7'" in result.output


# ---------------------------------------------------------------- the reference agent, end to end


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_llm() -> Iterator[str]:
    from tests.support.producers import Handler

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_the_reference_agent_conforms_with_a_must_call_scenario(tmp_path: Path, fake_llm: str) -> None:
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))  # examples/ is not an installed package
    from examples.agent import AgentConfig, start_in_thread

    universe = {"windtunnel_universe": 1,
                "tools": [{"name": "client_lookup", "description": "Look up a client record by name.",
                           "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}],
                "recordings": [{"tool_name": "client_lookup", "args": {"query": "Bluewing"},
                                "result": {"email": "ops@bluewing.example"}}]}
    d = scenario(tmp_path, turn="What is the email on file for Bluewing?", must_call=["client_lookup"],
                 universe=universe)
    port = free_port()
    config = AgentConfig(mcp_url=f"http://127.0.0.1:{port}/mcp", openai_base_url=fake_llm,
                         instructions="Answer from client_lookup only.")
    with start_in_thread(config, port=0) as server:
        report = run_conformance(server.url, emit=lambda line: None, settle_s=0, deadline_s=1.0, grace_s=2.0,
                                 scenario=loaded(d), universe_port=port)
    got = statuses(report)
    assert got["inject.timeout_s"] == "PASS", detail(report, "inject.timeout_s")
    assert "timed out after timeout_s=1" in detail(report, "inject.timeout_s")
    assert got["runtime.must_call"] == "PASS", detail(report, "runtime.must_call")
    assert got["inject.error_path"] == "SKIP"
    assert report.conforming, [c.line() for c in report.checks if c.status == "FAIL"]


def test_the_reference_agent_answers_a_failing_model_with_an_error_envelope(tmp_path: Path) -> None:
    """The agent's model is the scenario's cassette; the error-path check makes it fail every request."""
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    from examples.agent import AgentConfig, start_in_thread

    d = scenario(tmp_path, turn="What is the email on file for Bluewing?", cassette=True)
    universe_port, llm_port = free_port(), free_port()
    config = AgentConfig(mcp_url=f"http://127.0.0.1:{universe_port}/mcp",
                         openai_base_url=f"http://127.0.0.1:{llm_port}/v1", instructions="Answer briefly.")
    with start_in_thread(config, port=0) as server:
        report = run_conformance(server.url, emit=lambda line: None, settle_s=0, deadline_s=1.0, grace_s=2.0,
                                 scenario=loaded(d, cassette=True), universe_port=universe_port, llm_port=llm_port)
    assert statuses(report)["inject.error_path"] == "PASS", detail(report, "inject.error_path")
    assert "answered 200 with error" in detail(report, "inject.error_path")  # the model's HTTP error, verbatim
    assert report.conforming, [c.line() for c in report.checks if c.status == "FAIL"]
