"""Every dialect, read from telemetry that the real producer library emitted.

The fixtures under tests/fixtures/producers/ were made by each library's own
instrumentation driving the same two-turn agent story (see their
generate.py): "What is the email on file for Bluewing?" -> client_lookup
-> answer, then "Thanks! And its phone?". Each is imported end to end with the
real writer, and the files written are read back and validated.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.paths import PRODUCERS
from wt_otel.components import load
from wt_otel.contracts import validate_file
from wt_otel.ingest.importer import import_dumps

PRODUCERS = PRODUCERS
FIRST_ASK = "What is the email on file for Bluewing?"
SECOND_ASK = "Thanks! And its phone?"

# dump -> (user turns, witnessed tool calls expected, dialect that must have read the conversation,
#          whether the producer records tool definitions)
EXPECT = {
    "openai-v2-span-attrs/dump.otlp.jsonl": (2, True, "semconv", False),
    "openai-v2-span-attrs/dump.otlp.pb": (2, True, "semconv", False),
    "openai-v2-log-events/dump.otlp.jsonl": (2, True, "events", False),
    "openai-agents-otel/dump.otlp.jsonl": (2, True, "semconv", True),
    "agents-sdk-jsonl/trace.agents.jsonl": (2, True, "agents", False),  # names only, no schemas
    "openllmetry-legacy/dump.otlp.jsonl": (2, True, "openllmetry", True),
    "openllmetry-current/dump.otlp.jsonl": (2, True, "semconv", True),
    "openinference-openai/dump.otlp.jsonl": (2, True, "openinference", True),
    "openinference-agents/dump.otlp.jsonl": (2, True, "openinference", True),
    "openinference-agents/dump-responses.otlp.jsonl": (2, True, "openinference", True),
    "pydantic-ai/dump.otlp.jsonl": (2, True, "pydantic_ai", True),
    "pydantic-ai/dump-v6.otlp.jsonl": (2, True, "pydantic_ai", True),
    "pydantic-ai-v1/dump.otlp.jsonl": (2, True, "pydantic_ai", True),
    "pydantic-ai-v1/dump-logs.otlp.jsonl": (2, True, "events", True),
}


def all_dumps() -> list[str]:
    found = [p for p in PRODUCERS.glob("*/*") if p.name.startswith(("dump", "trace")) and p.parent.name[0] != "_"]
    return sorted(str(p.relative_to(PRODUCERS)) for p in found)


def test_every_fixture_has_expectations():
    """A new producer fixture must say what it should import to, or it is not tested (here, or by its
    expected.json in tests/e2e/test_producers_exact.py)."""
    exact = {d for d in all_dumps() if (PRODUCERS / d).parent.joinpath("expected.json").exists()}
    assert set(all_dumps()) - exact <= set(EXPECT), set(all_dumps()) - exact - set(EXPECT)


@pytest.mark.parametrize("dump", sorted(EXPECT))
def test_producer_dump_imports_to_the_recorded_conversation(dump: str, tmp_path: Path):
    turns, witnessed, dialect, definitions = EXPECT[dump]
    path = PRODUCERS / dump
    if not path.exists():
        pytest.fail(f"fixture {dump} is missing: run `make fixtures`")
    writer = load("exporters", "scenario-dir")(tmp_path)
    report = import_dumps([path], writer)
    assert report.errors == []
    assert len(report.written) == 1, "the two traces of one conversation must merge into one session"
    out = report.written[0]

    for f in out.iterdir():
        if f.suffix in (".json", ".yaml"):
            r = validate_file(f)
            assert r.valid, (f.name, r.problems)

    env = json.loads((out / "incident.wtin.json").read_text())
    messages = env["messages"]
    users = [m for m in messages if m["role"] == "user"]
    assert [p["content"] for m in users for p in m["parts"]] == [FIRST_ASK, SECOND_ASK][:turns]
    calls = [p for m in messages for p in m["parts"] if p["type"] == "tool_call"]
    assert calls and all(c["name"] == "client_lookup" and c["arguments"] == {"query": "Bluewing"} for c in calls)
    assert len(calls) == turns, "history repeated by every chat span must not duplicate turns"
    responses = [p for m in messages for p in m["parts"] if p["type"] == "tool_call_response"]
    assert {r["id"] for r in responses} == {c["id"] for c in calls}
    assert all(r["response"]["email"] == "ops@bluewing.example" for r in responses)
    answers = [p["content"] for m in messages if m["role"] == "assistant" for p in m["parts"] if p["type"] == "text"]
    assert "ops@bluewing.example" in answers[0]
    assert len(answers) == turns
    assert env["session"]["model"].startswith("gpt-4o-mini")
    assert env["session"]["provider"] == "openai"
    assert dialect in env["provenance"]["dialects"]
    if definitions:
        [definition] = env["tool_definitions"]
        assert definition["name"] == "client_lookup" and "query" in definition["input_schema"]["properties"]

    if witnessed:
        assert len(env["witnessed_calls"]) == turns
        for w in env["witnessed_calls"]:
            assert w["args"] == {"query": "Bluewing"} and w["result"]["email"] == "ops@bluewing.example"
            assert w["tool_call_id"] in {c["id"] for c in calls}
            assert w["correlation"] in ("tool_call_id", "name_order")
            assert w["span_id"]

    universe = json.loads((out / "fixture.universe.json").read_text())
    assert universe["matching"]["on_miss"] == "fail_call"
    assert universe["recordings"][0]["tool_name"] == "client_lookup"
    assert universe["recordings"][0]["source"] == ("witnessed" if witnessed else "transcript")
    assert universe["stubbed_schemas"] == ([] if definitions else ["client_lookup"])

    cassette = json.loads((out / "llm.cassette.json").read_text())
    run = cassette["traces"][cassette["latest_trace_id"]]
    assert len(run["calls"]) >= 2 * turns
    first = run["calls"][0]["response_timeline"][0]
    assert first["tool_calls"][0]["function"]["name"] == "client_lookup"
    assert first["finish_reason"] == "tool_calls"

    scenario = yaml.safe_load((out / "scenario.yaml").read_text())
    assert scenario["user_turns"] == [FIRST_ASK, SECOND_ASK][:turns]
    assert scenario["requires_tool_use"] is True
    assert "client_lookup" in (out / "scenario.yaml").read_text()
