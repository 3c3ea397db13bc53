"""Issue 12's small things: a bad --trace-id, --port -1, a busy port, a file that is not a universe."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from wt_otel.cli import main

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dumps" / "support-agent.otlp.jsonl"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imp")
    assert CliRunner().invoke(main, ["import", str(SAMPLE), "--out", str(out)]).exit_code == 0
    return next(p for p in sorted(out.iterdir()) if p.is_dir())


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("bad", ["zzz", "89f6779e248a2ee1", "89f6779e248a2ee1b4b932171a23f1dex"])
def test_a_trace_id_that_is_not_one_is_a_usage_error(bad: str, tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["import", str(SAMPLE), "--out", str(tmp_path / "o"), "--trace-id", bad])
    assert res.exit_code == 2 and "is not a trace id (32 hex digits" in res.output
    assert not (tmp_path / "o").exists()
    ok = CliRunner().invoke(main, ["import", str(SAMPLE), "--out", str(tmp_path / "o"), "--trace-id",
                                   "89F6779E248A2EE1B4B932171A23F1DE"])
    assert ok.exit_code == 0 and "1 written" in ok.output


@pytest.mark.parametrize("command", [["universe", "serve", "fixture.universe.json"],
                                     ["cassette", "serve", "llm.cassette.json"]])
def test_port_minus_one_is_a_usage_error_not_a_traceback(command: list[str], imported: Path) -> None:
    res = CliRunner().invoke(main, [*command[:2], str(imported / command[2]), "--port", "-1"])
    assert res.exit_code == 2 and "-1 is not in the range 0<=x<=65535" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


@pytest.mark.parametrize("command", [["universe", "serve", "fixture.universe.json"],
                                     ["cassette", "serve", "llm.cassette.json"]])
def test_a_busy_port_is_one_line_naming_it(command: list[str], imported: Path, busy_port: int) -> None:
    res = CliRunner().invoke(main, [*command[:2], str(imported / command[2]), "--port", str(busy_port)])
    assert res.exit_code == 1
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert lines == [f"error: cannot listen on 127.0.0.1:{busy_port}: the port is already in use (another process "
                     "listens there; choose another with --port, or --port 0 for a free one)"], res.output


@pytest.mark.parametrize(("content", "says"), [
    ('{"a": 1}\n{"b": 2}\n', "not a universe file (*.universe.json is one JSON object; this is not JSON"),
    (json.dumps({"resourceSpans": []}), "not a universe file (it has no windtunnel_universe key"),
    ("[1, 2]", "not a universe file (it is a JSON list"),
])
def test_universe_serve_of_something_else_says_not_a_universe_file(content: str, says: str, tmp_path: Path) -> None:
    path = tmp_path / "garbage.jsonl"
    path.write_text(content)
    res = CliRunner().invoke(main, ["universe", "serve", str(path), "--port", "0"])
    assert res.exit_code == 1 and says in res.output, res.output


def test_serve_until_stopped_ends_with_its_server_and_hands_on_the_servers_error() -> None:
    """The stdio server runs in a thread: its return ends the wait, its exception is raised in the main thread
    (not lost in the thread), `stop` runs either way, and the SIGTERM handler is put back afterwards."""
    import signal

    from wt_otel.cli.servers import serve_until_stopped

    before = signal.getsignal(signal.SIGTERM)
    stopped: list[int] = []
    serve_until_stopped("ready", stop=lambda: stopped.append(1), serve=lambda: None)

    def broken() -> None:
        raise RuntimeError("stdin is gone")

    with pytest.raises(RuntimeError, match="stdin is gone"):
        serve_until_stopped("ready", stop=lambda: stopped.append(2), serve=broken)
    assert stopped == [1, 2]
    assert signal.getsignal(signal.SIGTERM) is before
