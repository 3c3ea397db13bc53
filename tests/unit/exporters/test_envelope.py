"""The envelope writer keeps Contract A valid when a producer left out a tool's name or a result's call id.

Regressions found by tests/fuzz/test_mutated_producers.py (issue 29): an unfamiliar producer's keys
(`toolCallId`, a truncated tool name) gave tool calls and witnessed calls with an empty name and tool results
with an empty id, and `incident.wtin.json` was written invalid.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fuzz.test_mutated_producers import mutate
from wt_otel.components import load
from wt_otel.contracts import validate_file
from wt_otel.contracts.validate import validate_data
from wt_otel.exporters.envelope import UNKNOWN_TOOL, envelope
from wt_otel.ingest.importer import import_dumps
from wt_otel.model.session import Session, ToolExecution


def _session() -> Session:
    s = Session(key="s1", trace_ids=["t1"], model="m")
    s.messages = [
        {"role": "user", "parts": [{"type": "text", "content": "weather in Oslo?"}]},
        {"role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": "", "arguments": {"city": "Oslo"}},
            {"type": "tool_call", "id": "c2", "name": "", "arguments": {}},
            {"type": "tool_call", "id": "", "name": "convert", "arguments": {}},
        ]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "", "response": {"temp_c": 3}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c2", "response": "ok"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "", "response": 37.4}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "", "response": "stray"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "3 C"}]},
    ]
    s.witnessed_calls = [ToolExecution("get_weather", {"city": "Oslo"}, {"temp_c": 3}, tool_call_id="c1"),
                         ToolExecution("", {}, "ok", tool_call_id="c2"),
                         ToolExecution("", {}, None, tool_call_id="zz")]
    return s


def test_nameless_calls_and_idless_results_still_give_a_valid_envelope_with_the_guesses_flagged():
    env = envelope(_session())
    assert validate_data("envelope", env) == []
    calls = env["messages"][1]["parts"]
    assert calls[0]["name"] == "get_weather" and "name_unknown" not in calls[0]  # from its witnessed call
    assert calls[1]["name"] == UNKNOWN_TOOL and calls[1]["name_unknown"] is True
    assert calls[2]["id"] and calls[2]["id_guessed"] is True and calls[2]["name"] == "convert"
    responses = [m["parts"][0] for m in env["messages"] if m["role"] == "tool"]
    # a result without an id answers the first call not yet answered; one that answers nothing is kept aside
    assert [(r["id"], r.get("id_guessed")) for r in responses] == [("c1", True), ("c2", None), (calls[2]["id"], True)]
    assert [o["part"]["response"] for o in env["omitted_parts"]] == ["stray"]
    assert [(w["tool_name"], w.get("tool_name_unknown")) for w in env["witnessed_calls"]] == [
        ("get_weather", None), (UNKNOWN_TOOL, True), (UNKNOWN_TOOL, True)]


def test_a_producer_whose_results_name_no_call_imports_valid_and_says_so(tmp_path: Path):
    # the fuzz suite's minimal case: OpenLLMetry's log events (tool messages carry no call id) with some keys
    # camelCased, so no dialect pairs the results with their calls
    docs = mutate("openllmetry-events/dump.otlp.jsonl", [("camel_case", 1)])
    dump = tmp_path / "dump.otlp.jsonl"
    dump.write_text("".join(json.dumps(d) + "\n" for d in docs))
    report = import_dumps([dump], load("exporters", "scenario-dir")(tmp_path / "out"))
    assert report.written and report.errors == []
    for folder in report.written:
        assert validate_file(folder / "incident.wtin.json").valid
    envs = [json.loads((f / "incident.wtin.json").read_text()) for f in report.written]
    idless = [o["part"] for e in envs for o in e["omitted_parts"] if o["part"]["type"] == "tool_call_response"]
    idless += [p for e in envs for m in e["messages"] for p in m["parts"] if p.get("id_guessed")]
    assert len(idless) == 5  # every tool result the dump holds, none dropped
    assert sum("names no tool call" in w for w in report.warnings) == 5
