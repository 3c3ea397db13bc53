"""The CLI prints what the user needs: library chatter and tracebacks stay off unless -v (issue 30, item 10)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.cli.logsetup import configure_cli_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _emit() -> None:
    logging.getLogger("mcp.shared.jsonrpc_dispatcher").warning("shutdown error response for request 2 gave up")
    logging.getLogger("httpx").info("HTTP Request: POST http://127.0.0.1:1/mcp")
    logging.getLogger("wt_otel.replay.runner").info("progress chatter")
    logging.getLogger("wt_otel.replay.runner").warning("the cassette is stale")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("starlette.app").exception("Exception in ASGI application")


def test_by_default_only_wt_otel_warnings_and_library_errors_show_without_tracebacks(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert CliRunner().invoke(main, ["schema", "trace"]).exit_code == 0  # any command installs the handler
    capsys.readouterr()
    _emit()
    err = capsys.readouterr().err
    assert "warning: the cassette is stale" in err
    assert "error: starlette.app: Exception in ASGI application (ValueError: boom)" in err
    assert "gave up" not in err and "HTTP Request" not in err and "progress chatter" not in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("flag", "shown", "hidden"), [
    ("-v", ["gave up", "progress chatter", "the cassette is stale"], ["Traceback", "HTTP Request"]),
    ("-vv", ["gave up", "progress chatter", "HTTP Request", "Traceback"], []),
])
def test_verbose_shows_more(capsys: pytest.CaptureFixture[str], flag: str, shown: list[str],
                            hidden: list[str]) -> None:
    assert CliRunner().invoke(main, [flag, "schema", "trace"]).exit_code == 0
    capsys.readouterr()
    _emit()
    err = capsys.readouterr().err
    assert all(text in err for text in shown), err
    assert not any(text in err for text in hidden), err


def test_configuring_twice_keeps_one_handler() -> None:
    configure_cli_logging(0)
    configure_cli_logging(1)
    assert sum(getattr(h, "_wt_otel_serve_handler", False) for h in logging.getLogger().handlers) == 1
