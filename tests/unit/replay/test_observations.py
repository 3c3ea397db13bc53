"""`trace.observations["universe"]`: what the run's tool calls did to the served universe (issue 30, item 6),
so a scorer can assert on state (`observation("universe", ...)`), not only on the reply."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.universe_agent import UniverseAgent, run_sweep, write_scenario
from wt_otel.contracts.run import McpCall, load_trace
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.observations import universe_observations
from wt_otel.replay.runtimes import PythonRuntime
from wt_otel.scorers import observation

SCHEMA = {"type": "object"}
UNIVERSE: dict[str, Any] = {
    "windtunnel_universe": 1,
    "tools": [
        {"name": "lookup_order", "input_schema": SCHEMA, "annotations": {"readOnlyHint": True}},
        {"name": "next_ticket", "input_schema": SCHEMA, "mode": "sequence"},
        {"name": "refund", "input_schema": SCHEMA, "annotations": {"destructiveHint": True}},
    ],
    "recordings": [
        {"tool_name": "lookup_order", "args": {"order_id": "A-1"}, "result": {"status": "shipped"}},
        {"tool_name": "next_ticket", "args": {}, "result": {"ticket": "T-1"}},
        {"tool_name": "next_ticket", "args": {}, "result": {"ticket": "T-2"}},
        {"tool_name": "refund", "args": {"order_id": "A-1"}, "result": {"refunded": 12}},
    ],
}
CALLS = [("lookup_order", {"order_id": "A-1"}), ("next_ticket", {}), ("refund", {"order_id": "A-1"})]


def call(tool: str, args: dict[str, Any], result: Any, match: str = "exact", is_error: bool = False,
         recording: int | None = None) -> McpCall:
    extra = {"divergence": {"policy": match, "matched": None}} if match not in ("exact", "keyed") else None
    return McpCall(tool_name=tool, args=args, result=result, match=match, is_error=is_error, extra=extra,
                   recording=recording)


def test_state_per_tool_and_writes_in_order() -> None:
    universe = load_universe(UNIVERSE)
    calls = [call("lookup_order", {"order_id": "A-1"}, {"status": "shipped"}, recording=0),
             call("next_ticket", {}, {"ticket": "T-1"}, recording=1),
             call("refund", {"order_id": "B-9"}, {"error": "no_recorded_result"}, "fail_call", is_error=True),
             call("refund", {"order_id": "A-1"}, {"refunded": 12}, recording=3)]
    seen = universe_observations(calls, universe)
    assert seen["calls"] == 4 and seen["errors"] == 1 and seen["misses"] == 1
    tools = seen["tools"]
    assert tools["lookup_order"] == {"calls": 1, "errors": 0, "misses": 0, "writes": False, "mode": "stateless",
                                     "last_args": {"order_id": "A-1"}, "last_result": {"status": "shipped"}}
    assert tools["next_ticket"]["mode"] == "sequence" and tools["next_ticket"]["writes"] is True
    assert (tools["next_ticket"]["consumed"], tools["next_ticket"]["remaining"]) == (1, 1)
    assert tools["refund"]["calls"] == 2 and tools["refund"]["errors"] == 1
    # a write the universe refused changed nothing: only answered calls to state-changing tools are writes
    assert seen["writes"] == [{"index": 1, "tool": "next_ticket", "args": {}, "result": {"ticket": "T-1"}},
                              {"index": 3, "tool": "refund", "args": {"order_id": "A-1"},
                               "result": {"refunded": 12}}]
    assert universe_observations([], None) == {"calls": 0, "errors": 0, "misses": 0, "tools": {}, "writes": []}


def test_a_replayed_run_carries_them_and_a_scorer_asserts_on_them(tmp_path: Path) -> None:
    scorer = ("from wt_otel.scorers import all_of, observation\n"
              "outcome = all_of(\n"
              "    observation('universe', 'writes[-1].tool', lambda v: v == 'refund', 'the refund was written'),\n"
              "    observation('universe', 'tools.next_ticket.consumed', lambda n: n == 1),\n"
              "    observation('universe', 'tools.lookup_order.writes', lambda w: w is False))\n")
    write_scenario(tmp_path / "sc", "stateful", universe=UNIVERSE, scorer_source=scorer)
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent(CALLS)), tmp_path)
    rec = result.record.scenarios[0]
    assert rec.verdict == "PASS", rec.detail
    trace = json.loads((result.directory / "stateful" / "run-1.trace.json").read_text())
    assert [w["tool"] for w in trace["observations"]["universe"]["writes"]] == ["next_ticket", "refund"]
    loaded = load_trace(trace)
    assert observation("universe", "writes[0].result.ticket", lambda v: v == "T-1")(loaded).passed
    missing = observation("universe", "tools.cancel_order.calls", lambda n: n == 0)(loaded)
    assert not missing.passed and "cancel_order does not exist" in missing.detail
