"""A live run's ledger names the model the response named (0001's ledger `model`), through the whole loop:
`wt-otel run` -> the reference agent (Agents SDK) -> a model whose responses name a dated snapshot."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from examples.agent import AgentConfig, start_in_thread
from tests.support.producers import Handler
from wt_otel.contracts.results import LedgerRow
from wt_otel.replay.runner import RunOptions, Sweep, load_all
from wt_otel.replay.runtimes import HttpInjectRuntime

SNAPSHOT = "gpt-4o-mini-2024-07-18"


class SnapshotHandler(Handler):
    """The scripted fake model, answering as a dated snapshot of the model asked for (as OpenAI does)."""

    def _chat(self, body: dict) -> None:
        super()._chat({**body, "model": SNAPSHOT})


@pytest.fixture
def llm() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SnapshotHandler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_ledger_names_the_model_that_answered(tmp_path: Path, llm: str) -> None:
    d = tmp_path / "sc" / "lookup"
    d.mkdir(parents=True)
    (d / "fixture.universe.json").write_text(json.dumps({
        "windtunnel_universe": 1,
        "tools": [{"name": "client_lookup", "input_schema": {"type": "object",
                                                             "properties": {"query": {"type": "string"}}}}],
        "recordings": [{"tool_name": "client_lookup", "args": {"query": "Bluewing"},
                        "result": {"email": "ops@bluewing.example"}}]}))
    (d / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": "lookup",
                                                     "user_turns": ["What is the email on file for Bluewing?"],
                                                     "fixtures": {"universe": "fixture.universe.json"}}))
    port = free_port()
    config = AgentConfig(mcp_url=f"http://127.0.0.1:{port}/mcp", openai_base_url=llm, model="gpt-4o-mini")
    with start_in_thread(config, port=0) as server:
        runtime = HttpInjectRuntime(server.url, 20)
        options = RunOptions(runtime=runtime, runs_dir=tmp_path / "runs", llm="live", universe_port=port,
                             emit=lambda line: None)
        sweep = Sweep(options).run(load_all([d], "live"))
    assert sweep.record is not None and sweep.record.scenarios[0].verdict == "PASS", sweep.record
    [trace] = sweep.scenarios[0].traces
    assert trace.turns[0].model == SNAPSHOT
    [row] = [LedgerRow.model_validate_json(line)
             for line in (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert row.model == SNAPSHOT  # not the configured alias: what answered
