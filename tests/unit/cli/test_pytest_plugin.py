"""The pytest plugin: `pytest --wt-scenarios DIR` runs each scenario as a test item (checked with pytester)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.replay.test_run import write_scenario

pytest_plugins = ["pytester"]

AGENTS = '''
import json, os, asyncio
from mcp import Client


async def _lookup(url):
    async with Client(url) as client:
        return (await client.call_tool("lookup_order", {"order_id": "A-1"})).structured_content


def good(text, session_id):
    result = asyncio.run(_lookup(os.environ["WT_UNIVERSE_URL"]))
    return {"reply": json.dumps(result), "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}]}


def bypass(text, session_id):  # answers from "live" tools, never calling the universe: INVALID
    return {"reply": "shipped", "tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}]}


good.reset = bypass.reset = lambda: None
'''


@pytest.fixture
def project(pytester: pytest.Pytester) -> Path:
    pytester.makepyfile(wt_agents=AGENTS)
    pytester.syspathinsert()
    root = pytester.path / "scenarios"
    write_scenario(root / "billing", "orders")
    write_scenario(root / "billing", "orders-again", runs=2)
    (root / "billing" / "pack.yaml").write_text("name: billing\nowner: team-billing\n")
    write_scenario(root, "broken", universe="{not json")
    return root


def run(pytester: pytest.Pytester, root: Path, agent: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("--wt-scenarios", str(root), "--wt-runtime", f"python:wt_agents:{agent}",
                                        "--wt-universe-port", "0", "--wt-runs-dir", str(pytester.path / "runs"),
                                        "-p", "no:cacheprovider", *args)


def test_each_scenario_is_an_item_and_a_non_pass_fails_it(pytester: pytest.Pytester, project: Path) -> None:
    result = run(pytester, project, "good", "-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*wt-scenarios::orders PASSED*", "*wt-scenarios::orders-again PASSED*",
                                 "*wt-scenarios::broken FAILED*", "wt-otel: sweep *: traces in *",
                                 "ERROR broken (runs passed 0/1)", "*bad fixture:*fixture.universe.json*"])
    rows = [json.loads(line) for line in (pytester.path / "runs" / "ledger.ndjsonl").read_text().splitlines()]
    assert [(r["scenario_id"], r["verdict"], r["pack"]) for r in rows] == [
        ("orders", "PASS", "billing"), ("orders-again", "PASS", "billing"), ("broken", "ERROR", None)]
    assert len({r["sweep_id"] for r in rows}) == 1  # the pytest session is one sweep


def test_invalid_verdict_fails_with_the_detail_and_k_selects(pytester: pytest.Pytester, project: Path) -> None:
    result = run(pytester, project, "bypass", "-k", "orders and not again")
    result.assert_outcomes(passed=0, failed=1, deselected=2)
    result.stdout.fnmatch_lines(["INVALID orders (runs passed 0/1)", "*universe bypassed*"])


def test_junitxml_carries_the_verdict_properties(pytester: pytest.Pytester, project: Path) -> None:
    from junitparser import JUnitXml, Properties

    xml_path = pytester.path / "pytest.xml"
    run(pytester, project, "good", f"--junitxml={xml_path}", "-o", "junit_family=xunit1", "-k", "orders")
    cases = [case for suite in JUnitXml.fromfile(str(xml_path)) for case in suite]
    props = {p.name: p.value for case in cases for props in case.iterchildren(Properties) for p in props}
    assert props["verdict"] == "PASS" and props["owner"] == "team-billing"


def test_without_the_option_the_plugin_is_inert(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "runs").exists()
    assert "--wt-scenarios" in pytester.runpytest_inprocess("--help").stdout.str()


def test_a_bad_runtime_is_a_usage_error(pytester: pytest.Pytester, project: Path) -> None:
    result = run(pytester, project, "no_such_agent")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--wt-runtime:*no_such_agent*"])
    assert not (pytester.path / "runs").exists()


def test_a_data_dir_stands_for_its_incidents_each_once(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Through the session store: the flagged session only, not its auto-replay copy under scenarios/, not the
    unflagged session (kept as records, `datadir.render: flagged`). Before, every scenario.yaml under the data
    dir was an item: the incident twice."""
    import shutil

    from tests.unit.cli.test_flag_command import SAMPLE
    from wt_otel.exporters.datadir import DataDirStore
    from wt_otel.ingest.dumps import read_dump
    from wt_otel.ingest.sessions import SessionGrouper, build_session

    data = tmp_path / "data"
    with SessionGrouper() as grouper:
        for item in read_dump(SAMPLE):
            grouper.add(item)
        sessions = [s for s in (build_session(g) for g in grouper.groups()) if s is not None]
    assert sorted(s.flagged for s in sessions) == [False, True]
    with DataDirStore(data, render="flagged") as store:
        written = [store.write(s) for s in sessions]
    [incident] = [w for w in written if w.entry["flagged"]]
    shutil.copytree(incident.path, data / "scenarios" / incident.slug)  # what auto-replay imports
    result = pytester.runpytest_inprocess("--wt-scenarios", str(data), "--collect-only", "-q",
                                          "-p", "no:cacheprovider")
    items = [line for line in result.stdout.lines if "wt-scenarios::" in line]
    assert items == [f"::wt-scenarios::{incident.slug}"], result.stdout.str()
    empty = tmp_path / "empty"
    with DataDirStore(empty, render="flagged") as store:
        store.write(next(s for s in sessions if not s.flagged))
    refused = pytester.runpytest_inprocess("--wt-scenarios", str(empty), "-p", "no:cacheprovider")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*is a data dir without an incident*"])
