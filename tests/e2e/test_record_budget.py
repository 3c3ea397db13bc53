"""Recording that cannot hurt (issue 30, item 2): `wt-otel run --llm record` against an agent process stuck
in a model-call loop stops at the default budget within seconds, says which budget stopped it, exits non-zero,
and leaves the baseline cassette byte for byte; a recorder killed (SIGKILL) mid-run leaves it too.

Real parts: the `wt-otel` process with its recording proxy, the agent as its own process on the real `openai`
client (tests/support/looping_agent.py); only the provider behind the proxy is a fake (fake_openai).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.support.llm_calls import CALLS, cassette
from tests.support.paths import ROOT
from tests.support.producers import CountingProvider  # (puts the fake provider on sys.path)
from wt_otel.cli import main
from wt_otel.replay.record_budget import DEFAULT_MAX_CALLS

UNIVERSE = {"windtunnel_universe": 1, "tools": [{"name": "client_lookup", "description": "Look up a client.",
                                                 "input_schema": {"type": "object"}}], "recordings": []}


@pytest.fixture
def provider() -> Iterator[CountingProvider]:
    """A fake model that always asks for the tool again (the loop's other half)."""
    p = CountingProvider(lambda n: {"tool_call": (f"call_{n:04d}", "client_lookup",
                                                  json.dumps({"query": "Bluewing"}))})
    yield p
    p.close()


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    directory = tmp_path / "loop"
    directory.mkdir()
    (directory / "fixture.universe.json").write_text(json.dumps(UNIVERSE))
    (directory / "llm.cassette.json").write_text(json.dumps(cassette(CALLS), indent=2) + "\n")
    (directory / "scenario.yaml").write_text(yaml.safe_dump({
        "wt_scenario": 1, "id": "loop", "user_turns": ["Email of Bluewing?"], "runs": 1,
        "fixtures": {"universe": "fixture.universe.json", "cassette": "llm.cassette.json"}}))
    return directory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_agent(model_url: str, *extra: str) -> tuple[subprocess.Popen, str]:
    agent = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "looping_agent.py"), model_url,
                              *extra], stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    return agent, agent.stdout.readline().strip()


def run_args(scenario: Path, agent_url: str, llm_port: int, provider: CountingProvider) -> list[str]:
    """`wt-otel run --llm record` with the default budget; the agent was told the proxy's port."""
    return ["run", str(scenario), "--llm", "record", "--llm-upstream", provider.url, "--inject-url", agent_url,
            "--llm-port", str(llm_port), "--universe-port", "0", "--runs-dir", str(scenario.parent / "runs")]


def wt_run(scenario: Path, agent_url: str, llm_port: int, provider: CountingProvider) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "wt_otel.cli", *run_args(scenario, agent_url, llm_port, provider)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ,
                                                                                     "PYTHONPATH": str(ROOT)})


def test_a_looping_agent_stops_at_the_default_budget_and_the_baseline_is_unchanged(scenario, provider):
    baseline = (scenario / "llm.cassette.json").read_bytes()
    llm_port = free_port()
    agent, agent_url = start_agent(f"http://127.0.0.1:{llm_port}/v1")
    try:
        started = time.monotonic()
        done = CliRunner().invoke(main, run_args(scenario, agent_url, llm_port, provider), catch_exceptions=False)
        took = time.monotonic() - started
    finally:
        agent.kill()
        agent.wait()
    out = done.output
    assert done.exit_code == 1, out
    assert took < 60, f"the loop ran {took:.0f} s"
    assert provider.requests == DEFAULT_MAX_CALLS, "the proxy let exactly the budget through, no SDK retry"
    assert f"recording stopped: --max-llm-calls {DEFAULT_MAX_CALLS} reached" in out, out
    assert "ERROR" in out and "is unchanged" in out, out
    assert (scenario / "llm.cassette.json").read_bytes() == baseline
    [trace_path] = (scenario.parent / "runs").rglob("run-1.trace.json")
    integrity = json.loads(trace_path.read_text())["integrity"]
    assert integrity["status"] == "ERROR" and "--max-llm-calls" in integrity["detail"]


def test_a_recorder_killed_mid_run_leaves_the_baseline_unchanged(scenario, provider):
    baseline = (scenario / "llm.cassette.json").read_bytes()
    llm_port = free_port()
    agent, agent_url = start_agent(f"http://127.0.0.1:{llm_port}/v1", "--pause-after", "2", "--pause-s", "60")
    proc = wt_run(scenario, agent_url, llm_port, provider)
    try:
        deadline = time.monotonic() + 60
        while provider.requests < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert provider.requests == 2, "the agent made its two calls through the recorder"
        time.sleep(0.5)  # the proxy has recorded both calls (and once would have rewritten the file)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        for p in (proc, agent):
            p.kill()
            p.wait()
    assert (scenario / "llm.cassette.json").read_bytes() == baseline
