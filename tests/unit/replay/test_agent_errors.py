"""An in-process agent that raises inside anyio (issue 12): the leaf exception is shown, the traceback kept in
the run's trace, and the message has no stray `}}` (neither in the ledger nor in `wt-otel report`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.replay.runtimes import describe_exception

AGENT = '''
import anyio

async def _lookup():
    raise ValueError("the CRM is down")

async def _turn():
    async with anyio.create_task_group() as tg:
        tg.start_soon(_lookup)

def agent(text, session_id):
    anyio.run(_turn)
'''


def test_describe_exception_names_the_leaves() -> None:
    group = ExceptionGroup("unhandled errors in a TaskGroup", [ValueError("a"), ExceptionGroup("x", [KeyError("b")])])
    assert describe_exception(group) == "ExceptionGroup with 2 error(s): ValueError: a; KeyError: 'b'"
    assert describe_exception(RuntimeError("plain")) == "RuntimeError: plain"


def test_an_anyio_failure_shows_its_leaf_and_keeps_the_traceback(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "h6_anyio_agent.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    d = tmp_path / "sc" / "boom"
    d.mkdir(parents=True)
    (d / "scenario.yaml").write_text(yaml.safe_dump({"wt_scenario": 1, "id": "boom", "user_turns": ["hi"],
                                                     "fixtures": {}}))
    res = CliRunner().invoke(main, ["run", "sc", "--runtime", "python:h6_anyio_agent:agent", "--universe-port", "0"])
    assert res.exit_code == 1
    [row] = [json.loads(line) for line in (tmp_path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert row["verdict"] == "ERROR" and "ValueError: the CRM is down" in row["detail"], row["detail"]
    assert "}}" not in row["detail"]
    [trace_path] = (tmp_path / "runs").glob("*/boom/run-1.trace.json")
    trace = json.loads(trace_path.read_text())
    assert "Traceback" in trace["error_traceback"] and "_lookup" in trace["error_traceback"]
    report = CliRunner().invoke(main, ["report", "--runs-dir", "runs"])
    assert report.exit_code in (0, 1) and "}}" not in report.output
