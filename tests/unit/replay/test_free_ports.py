"""Replay servers bind free ports by default and tell the agent where they are (issue 30, item 7).

An out-of-process agent learns the URLs from every `/wt/reset` body (`universe_url`, `llm_base_url`), an
in-process one from the environment; a port someone else holds is never a crash, and a server stopped with
a call in flight prints no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp import Client

from tests.support.inject_endpoint import JsonEndpoint, Reply
from tests.support.universe_agent import UNIVERSE, write_scenario
from wt_otel.cli import main
from wt_otel.contracts.formats import by_name
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.problems import ContractError
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.conformance import run_conformance
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.scenarios import load_scenario_dir
from wt_otel.replay.universe import RecordedUniverse


async def _lookup(url: str) -> Any:
    async with Client(url) as client:
        res = await client.call_tool("lookup_order", {"order_id": "A-1"})
        return res.structured_content


class FollowingEndpoint(JsonEndpoint):
    """A Contract C endpoint that knows no replay port: it calls its tool over MCP at the `universe_url` of the
    last reset, as the reference agent does."""

    def __init__(self) -> None:
        super().__init__()
        self.resets: list[dict[str, Any]] = []

    def handle(self, path: str, body: Any) -> Reply:
        if path == "/wt/reset":
            self.resets.append(body)
            return 200, {"wt_inject": 1}
        if path == "/wt/inject":
            url = self.resets[-1].get("universe_url") if self.resets else None
            if not url:
                return 200, {"wt_inject": 1, "reply": "", "tool_calls": [], "error": "no universe_url in the reset"}
            result = asyncio.run(_lookup(url))
            return 200, {"wt_inject": 1, "reply": f"A-1: {json.dumps(result)}",
                         "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}]}
        return super().handle(path, body)


@contextlib.contextmanager
def held_port(port: int = 0) -> Iterator[int]:
    """A listening socket on `port` (0: any), as another process would hold it."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        pytest.skip(f"port {port} is in use here already")
    sock.listen()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_the_reset_request_is_a_registered_format_with_optional_urls() -> None:
    fmt = by_name("reset-request")
    assert fmt.load({"wt_inject": 1}).model_dump(exclude_unset=True) == {"wt_inject": 1}
    body = {"wt_inject": 1, "universe_url": "http://127.0.0.1:4000/mcp", "llm_base_url": "http://127.0.0.1:4001/v1"}
    assert fmt.load(body).model_dump(exclude_unset=True) == body
    with pytest.raises(ContractError, match="universe_url"):
        fmt.load({"wt_inject": 1, "universe_url": "127.0.0.1:4000"})


def test_run_serves_on_free_ports_and_an_http_agent_finds_them_in_the_reset(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No port option at all: the universe binds a free port (8648, the old default, may be held), and the
    endpoint, which was told no port, reaches it through the reset's `universe_url`."""
    monkeypatch.delenv("WT_UNIVERSE_PORT", raising=False)
    monkeypatch.delenv("WT_LLM_PORT", raising=False)
    write_scenario(tmp_path, "orders")
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(pytest.skip.Exception):
            stack.enter_context(held_port(8648))  # the old fixed default, taken by "another process"
        endpoint = stack.enter_context(FollowingEndpoint())
        res = CliRunner().invoke(main, ["run", str(tmp_path / "orders"), "--inject-url", endpoint.url,
                                        "--runs-dir", str(tmp_path / "runs")])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    assert "Traceback" not in res.output
    assert endpoint.resets, res.output
    url = endpoint.resets[0]["universe_url"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp") and ":8648/" not in url
    assert "llm_base_url" not in endpoint.resets[0]  # nothing serves a model for a scenario without a cassette
    traces = list((tmp_path / "runs").rglob("run-1.trace.json"))
    trace = json.loads(traces[0].read_text())
    assert [c["tool_name"] for c in trace["mcp_calls"]] == ["lookup_order"], trace.get("error")
    assert trace["integrity"]["status"] != "ERROR", trace["integrity"]


def test_conformance_on_a_port_someone_holds_says_so_without_a_traceback(tmp_path: Path) -> None:
    d = write_scenario(tmp_path, "conf")
    with held_port() as port, FollowingEndpoint() as endpoint:
        res = CliRunner().invoke(main, ["conformance", "--url", endpoint.url, "--scenario", str(d),
                                        "--universe-port", str(port)])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and "ServeFailed" not in res.output
    assert f"FAIL scenario: {d}" in res.output and f"cannot listen on 127.0.0.1:{port}" in res.output


def test_conformance_serves_the_scenario_on_free_ports_and_names_them_in_the_reset(tmp_path: Path) -> None:
    d = write_scenario(tmp_path, "conf", must_call=["lookup_order"])
    lines: list[str] = []
    with FollowingEndpoint() as endpoint:  # no ports given: the library default is a free one, as the CLI's
        run_conformance(endpoint.url, emit=lines.append, settle_s=0, deadline_s=0.3, grace_s=0.3,
                        scenario=load_scenario_dir(d, need_cassette=False))
    assert any(line.startswith("PASS runtime.must_call") for line in lines), lines
    served = [r["universe_url"] for r in endpoint.resets if "universe_url" in r]
    assert served and all(":8648/" not in u for u in served)


def test_a_server_stopped_with_a_call_in_flight_prints_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """uvicorn cuts a held answer at shutdown (timeout_graceful_shutdown): that cut is expected, so neither
    "Cancel N running task(s)" nor the CancelledError traceback reaches the terminal."""
    engine = RecordedUniverse(load_universe(UNIVERSE))
    engine.perturbation = Perturbation(kind="slow", tool="*", delay_s=30)
    server = UniverseMCPServer(engine, port=0)
    url = server.start()
    ended: list[BaseException] = []

    def call() -> None:
        try:
            asyncio.run(_lookup(url))
        except BaseException as exc:  # the server went away mid-call: expected here
            ended.append(exc)

    client = threading.Thread(target=call, daemon=True)
    client.start()
    deadline = time.monotonic() + 10
    while not engine.call_log() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.call_log(), "the call never arrived"
    server.stop()
    client.join(10)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "CancelledError" not in err and "running task(s)" not in err, err


@pytest.mark.parametrize("command", [["cassette", "record", "--upstream", "http://127.0.0.1:9/v1", "--out", "c.json"],
                                     ["universe", "serve", "u.universe.json"]])
def test_a_standalone_server_on_a_held_port_says_so_in_one_line(tmp_path: Path, command: list[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "u.universe.json").write_text(json.dumps(UNIVERSE))
    with held_port() as port:
        res = CliRunner().invoke(main, [*command, "--port", str(port)])
    assert res.exit_code == 1 and not isinstance(res.exception, OSError), res.output
    assert f"error: cannot listen on 127.0.0.1:{port}: the port is already in use" in res.output
    assert "Traceback" not in res.output and "Errno" not in res.output
