"""The contract models: what each format accepts, what it rejects, and how it says so."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.contracts import (
    KINDS,
    ContractError,
    check_data,
    detect_kind,
    json_schema,
    lint_envelope,
    load_cassette,
    load_envelope,
    load_scenario,
    load_universe,
    validate_data,
    validate_file,
)
from wt_otel.contracts.envelope import TextPart
from wt_otel.contracts.problems import json_path
from wt_otel.contracts.run import load_trace
from wt_otel.contracts.surface import load_golden

T1, T2 = "0af7651916cd43dd8448eb211c80319c", "4bf92f3577b34da6a3ce929d0e0e4736"


def envelope() -> dict[str, Any]:
    return {
        "windtunnel_interchange": 1,
        "otel_genai_mapping": "semantic-conventions-genai@development-2026-06",
        "source": {"ref": "incident-412", "system": "acme", "captured_at": "2026-06-30T12:01:00Z"},
        "session": {"model": "gpt-example-1", "provider": "openai", "sampler": {"temperature": 0.7}},
        "messages": [
            {"role": "user", "parts": [{"type": "text", "content": "Email for Bluewing?"}]},
            {
                "role": "assistant",
                "parts": [
                    {
                        "type": "tool_call",
                        "id": "call_1",
                        "name": "client_lookup",
                        "arguments": {"q": "Bluewing"},
                    }
                ],
            },
            {
                "role": "tool",
                "parts": [{"type": "tool_call_response", "id": "call_1", "response": {"e": "x"}}],
            },
            {"role": "assistant", "parts": [{"type": "text", "content": "x"}]},
        ],
        "tool_definitions": [
            {"name": "client_lookup", "description": "…", "input_schema": {"type": "object"}}
        ],
        "witnessed_calls": [
            {
                "tool_name": "client_lookup",
                "args": {"q": "Bluewing"},
                "result": {"e": "x"},
                "tool_call_id": "call_1",
                "span_id": "00f067aa0ba902b7",
                "trace_id": T1,
                "started_at": "2026-06-30T12:00:01Z",
                "ended_at": "2026-06-30T12:00:02Z",
                "error": None,
                "correlation": "tool_call_id",
            }
        ],
        "system_instructions": [{"type": "text", "content": "Be brief."}],
        "omitted_parts": [{"message_index": 3, "part": {"type": "reasoning", "content": "..."}}],
        "provenance": {"trace_ids": [T1], "service_name": "agent", "dialects": ["semconv"]},
        "redaction": None,
        "warnings": [],
    }


def universe() -> dict[str, Any]:
    return {
        "windtunnel_universe": 1,
        "tools": [
            {"name": "client_lookup", "description": "Look up.", "input_schema": {"type": "object"}},
            {"name": "audit_log_append", "input_schema": {"type": "object"}, "mode": "sequence"},
        ],
        "recordings": [
            {"tool_name": "client_lookup", "args": {"query": "Bluewing"}, "result": {"email": "x"}},
            {
                "tool_name": "audit_log_append",
                "args": {},
                "result": None,
                "error": "boom",
                "source": "witnessed",
            },
        ],
        "matching": {
            "on_miss": "fail_call",
            "arg_keys": {"client_lookup": ["query"]},
            "per_tool_on_miss": {"audit_log_append": "empty"},
        },
        "stubbed_schemas": ["audit_log_append"],
    }


def trace_entry(trace_id: str = T1) -> dict[str, Any]:
    """The spec's own example shape, with concrete values."""
    return {
        "trace_id": trace_id,
        "request_context": {
            "model": "claude-haiku-4-5-20251001",
            "provider": "anthropic",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"text": "hi"}]},
            ],
            "parameters": {"temperature": 0.2, "max_tokens": None, "stream": True},
        },
        "network_metrics": {"ttfb_ms": 120.5, "total_duration_ms": 480.0},
        "response_timeline": [
            {"delta_ms": 120.5, "chunk": "Looking"},
            {
                "delta_ms": 100.0,
                "chunk": "",
                "tool_calls": [
                    {
                        "id": "call_018c9dc8",
                        "type": "function",
                        "function": {"name": "client_lookup", "arguments": '{"query": "Bluewing"}'},
                    }
                ],
                "finish_reason": "tool_calls",
            },
        ],
        "exception_boundary": {"occurred": False},
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        "raw_payload": {"stream_chunks": [{"id": "chunk-1"}]},
    }


def cassette() -> dict[str, Any]:
    return {"scenario": "auto", "latest_trace_id": T1, "history_keys": [T1], "traces": {T1: trace_entry()}}


def scenario() -> dict[str, Any]:
    return yaml.safe_load(
        """
        wt_scenario: 1
        id: lookup_bluewing
        description: Email lookup seeded from incident 412
        pack: imported
        owner: team-ops
        tags: ["origin:incident-412", unreviewed]
        user_turns: ["Email on file for Bluewing?"]
        requires_tool_use: true
        must_call: [client_lookup]
        forbidden_calls: [payment_submit]
        assertions:
          - {type: tool-sequence, mode: ordered-subsequence, tools: [client_lookup]}
        fixtures: {envelope: incident.wtin.json, universe: fixture.universe.json, cassette: llm.cassette.json}
        scorer: scorer.py
        runs: 3
        variance_allowed: false
        gates: [outcome, trajectory, constraint]
        metadata: {ticket: OPS-1}
        """
    )


def trace() -> dict[str, Any]:
    return {
        "wt_trace": 1,
        "scenario_id": "bluewing-misrouted-pallet",
        "run_index": 1,
        "run_id": "run-0001",
        "started_at": "2026-07-07T10:00:00Z",
        "runtime": "http_inject",
        "inject_url": "http://127.0.0.1:8647",
        "surface": {"status": "unavailable", "detail": "/wt/surface answered HTTP 404 (not implemented)"},
        "turns": [{"text": "Which client?", "reply": "Bluewing.", "latency_ms": 12.5,
                   "tool_calls": [{"name": "client_lookup", "arguments": {"query": "Bluewing"}}]}],
        "mcp_calls": [{"tool_name": "client_lookup", "args": {"query": "Bluewing"}, "result": {"id": 7},
                       "match": "exact", "is_error": False, "timestamp_ms": 1783418400000}],
        "evidence": {"witness": "available", "llm": "live"},
        "integrity": {"status": "PASS"},
    }


def surface() -> dict[str, Any]:
    """A golden surface (`wt-otel surface fetch`)."""
    return {"wt_surface": 1, "source": "http://127.0.0.1:8647", "fetched_at": "2026-07-07T10:00:00Z",
            "model": "gpt-example-1",
            "surface": {"system_instructions": [{"type": "text", "content": "Answer from tools only."}],
                        "tool_definitions": [{"name": "client_lookup", "input_schema": {"type": "object"}}],
                        "extra_segments": []}}


VALID = {"envelope": envelope, "universe": universe, "cassette": cassette, "scenario": scenario, "trace": trace,
         "surface": surface}
LOADERS = {
    "envelope": load_envelope,
    "universe": load_universe,
    "cassette": load_cassette,
    "scenario": load_scenario,
    "trace": load_trace,
    "surface": load_golden,
}


def messages_of(kind: str, data: Any) -> list[str]:
    with pytest.raises(ContractError) as info:
        LOADERS[kind](data)
    return [str(p) for p in info.value.problems]


def assert_problem(kind: str, data: Any, *expected: str) -> None:
    lines = messages_of(kind, data)
    for text in expected:
        assert any(text in line for line in lines), f"{text!r} not in {lines}"


def mutate(kind: str, change) -> dict[str, Any]:
    data = VALID[kind]()
    change(data)
    return data


# ---------------------------------------------------------------- every kind


@pytest.mark.parametrize("kind", KINDS)
def test_valid_example_loads_and_round_trips(kind: str) -> None:
    data = VALID[kind]()
    assert validate_data(kind, data) == []
    assert LOADERS[kind](data).to_dict() == data


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_fields_are_kept_or_rejected(kind: str) -> None:
    data = {**VALID[kind](), "future_field": {"x": 1}}
    if kind == "scenario":
        assert_problem(kind, data, "future_field is not a known field")
    else:
        assert LOADERS[kind](data).to_dict()["future_field"] == {"x": 1}


@pytest.mark.parametrize("kind", KINDS)
def test_json_schema_is_generated_and_accepts_the_example(kind: str) -> None:
    schema = json_schema(kind)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert kind in schema["title"] or "scenario" in schema["title"]
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed: schema not checked")
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(VALID[kind](), schema)


@pytest.mark.parametrize("kind", KINDS)
def test_document_must_be_an_object(kind: str) -> None:
    assert messages_of(kind, [1]) == ["the document must be an object, got an array"]


# ---------------------------------------------------------------- envelope


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d.update(windtunnel_interchange=True),
            "windtunnel_interchange must be a positive integer",
        ),
        (lambda d: d.update(windtunnel_interchange=0), "windtunnel_interchange must be a positive integer"),
        (
            lambda d: d.update(windtunnel_interchange=2),
            "unsupported windtunnel_interchange version 2: this wt-otel reads version 1",
        ),
        (
            lambda d: d["session"].pop("model"),
            "session.model must be a non-empty string, but the key is missing",
        ),
        (lambda d: d.pop("messages"), "messages is required"),
        (
            lambda d: d["messages"][1]["parts"][0].update(type="toolCall"),
            "messages[1].parts[0].type must be one of ['text', 'tool_call', 'tool_call_response'], "
            "got string \"toolCall\" (did you mean 'tool_call'?)",
        ),
        (lambda d: d["messages"][1]["parts"][0].pop("type"), "messages[1].parts[0].type is required"),
        (
            lambda d: d["messages"][1]["parts"][0].update(arguments='{"q": 1}'),
            "messages[1].parts[0].arguments must be an object, not a JSON-encoded string "
            "(emit the parsed arguments object, e.g. json.loads(arguments))",
        ),
        (
            lambda d: d["messages"][1]["parts"][0].update(arguments=None),
            "arguments must be an object, got null",
        ),
        (
            lambda d: d["messages"][2]["parts"][0].update(id=""),
            "messages[2].parts[0].id must be a non-empty string",
        ),
        (lambda d: d["messages"][0]["parts"].append("hi"), "messages[0].parts[1] must be an object"),
        (
            lambda d: d["witnessed_calls"][0].update(args=[1]),
            "witnessed_calls[0].args must be an object, got an array",
        ),
        (
            lambda d: d["witnessed_calls"][0].update(correlation="guess"),
            "witnessed_calls[0].correlation must be one of",
        ),
        (
            lambda d: d["tool_definitions"][0].update(result_schema="x"),
            "tool_definitions[0].result_schema must be",
        ),
        (lambda d: d.update(warnings="none"), "warnings must be an array"),
    ],
)
def test_envelope_errors(change, expected: str) -> None:
    assert_problem("envelope", mutate("envelope", change), expected)


def test_envelope_reports_every_problem_at_once() -> None:
    def break_all(d: dict[str, Any]) -> None:
        d.pop("windtunnel_interchange")
        d["session"]["model"] = ""
        d["witnessed_calls"][0].pop("args")

    assert len(messages_of("envelope", mutate("envelope", break_all))) == 3


def test_tag_names_never_appear_in_paths() -> None:
    data = mutate("envelope", lambda d: d["messages"][1]["parts"][0].pop("name"))
    with pytest.raises(ContractError) as info:
        load_envelope(data)
    assert [p.path for p in info.value.problems] == ["messages[1].parts[0].name"]


def test_parts_written_by_code_keep_their_type() -> None:
    assert TextPart(content="hi").to_dict() == {"type": "text", "content": "hi"}


def test_clean_envelope_has_no_warnings() -> None:
    assert lint_envelope(load_envelope(envelope())) == []


def test_lint_truncated_values_everywhere() -> None:
    def cut(d: dict[str, Any]) -> None:
        d["messages"][1]["parts"][0]["arguments"] = {"q": ["ok", "Blue[truncated]"]}
        d["messages"][2]["parts"][0]["response"] = "[truncated]"
        d["witnessed_calls"][0]["result"] = {"weird key": "...[truncated]"}

    warnings = lint_envelope(load_envelope(mutate("envelope", cut)))
    assert [w.path for w in warnings] == [
        "messages[1].parts[0].arguments.q[1]",
        "messages[2].parts[0].response",
        'witnessed_calls[0].result["weird key"]',
    ]
    assert all("contains '[truncated]': the producer cut this value" in str(w) for w in warnings)


def test_lint_unpaired_calls_both_ways() -> None:
    def unpair(d: dict[str, Any]) -> None:
        d["messages"][2]["parts"][0]["id"] = "call_9"

    warnings = [str(w) for w in lint_envelope(load_envelope(mutate("envelope", unpair)))]
    assert warnings[0].startswith(
        "messages[2].parts[0].id 'call_9' has no matching tool_call in the message stream"
    )
    assert warnings[1].startswith("messages[1].parts[0].id 'call_1' has no tool_call_response")


def test_a_response_before_its_call_is_unpaired() -> None:
    def swap(d: dict[str, Any]) -> None:
        d["messages"][1], d["messages"][2] = d["messages"][2], d["messages"][1]

    warnings = [str(w) for w in lint_envelope(load_envelope(mutate("envelope", swap)))]
    assert any("has no matching tool_call" in w for w in warnings)


# ---------------------------------------------------------------- universe


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.pop("windtunnel_universe"), "windtunnel_universe must be a positive integer"),
        (lambda d: d.update(windtunnel_universe="1"), "windtunnel_universe must be a positive integer"),
        (
            lambda d: d["tools"][0].update(input_schema=None),
            "tools[0].input_schema must be an object, got null",
        ),
        (
            lambda d: d["tools"][0].update(mode="once"),
            "tools[0].mode must be one of ['stateless', 'sequence']",
        ),
        (lambda d: d["recordings"][0].pop("args"), "recordings[0].args must be an object"),
        (
            lambda d: d["recordings"][0].update(tool_name="client_lookupp"),
            "recordings[0].tool_name must name a tool listed in tools, got 'client_lookupp'",
        ),
        (
            lambda d: d["matching"].update(on_miss="skip"),
            "matching.on_miss must be one of ['fail_call', 'empty'",
        ),
        (
            lambda d: d["matching"]["per_tool_on_miss"].update(client_lookup="guess"),
            "matching.per_tool_on_miss.client_lookup must be one of",
        ),
        (
            lambda d: d["matching"]["arg_keys"].update(ghost=["q"]),
            "matching.arg_keys.ghost must name a tool listed in tools",
        ),
        (
            lambda d: d["matching"]["per_tool_on_miss"].update(ghost="empty"),
            "matching.per_tool_on_miss.ghost must name a tool listed in tools",
        ),
        (
            lambda d: d["stubbed_schemas"].append("ghost"),
            "stubbed_schemas[1] must name a tool listed in tools",
        ),
        (
            lambda d: d["tools"].append(copy.deepcopy(d["tools"][0])),
            "tools[2].name 'client_lookup' is already",
        ),
    ],
)
def test_universe_errors(change, expected: str) -> None:
    assert_problem("universe", mutate("universe", change), expected)


def test_universe_defaults() -> None:
    u = load_universe({"windtunnel_universe": 1})
    assert (u.tools, u.recordings, u.matching.on_miss, u.matching.arg_keys) == ([], [], "fail_call", {})


def test_universe_lints_truncated_recordings() -> None:
    data = mutate("universe", lambda d: d["recordings"][0].update(result="[truncated]"))
    assert [w.path for w in check_data("universe", data).warnings] == ["recordings[0].result"]


# ---------------------------------------------------------------- cassette


def test_cassette_calls_shape_holds_a_whole_session() -> None:
    call = {k: v for k, v in trace_entry().items() if k != "trace_id"}
    data = {
        "wt_cassette": 1,
        "scenario": "lookup_bluewing",
        "latest_trace_id": T1,
        "history_keys": [T1],
        "traces": {T1: {"trace_id": T1, "calls": [call, call]}},
    }
    c = load_cassette(data)
    assert len(c.latest().llm_calls()) == 2
    assert load_cassette(cassette()).latest().llm_calls()[0].usage.total_tokens == 15


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(wt_cassette=2), "unsupported wt_cassette version 2"),
        (
            lambda d: d.update(latest_trace_id="abc"),
            "latest_trace_id must be a 32-character lowercase hex trace id",
        ),
        (lambda d: d.update(latest_trace_id=T2), f"latest_trace_id '{T2}' must be among history_keys"),
        (lambda d: d.update(history_keys=[T1, T2]), f"history_keys[1] '{T2}' names no entry in traces"),
        (lambda d: d.update(history_keys=[T1] * 6), "history_keys holds at most 5 trace ids"),
        (lambda d: d["traces"].update(nothex=trace_entry()), "key traces.nothex must be a 32-character"),
        (lambda d: d["traces"][T1].update(trace_id=T2), f'traces["{T1}"].trace_id must equal its key'),
        (lambda d: d["traces"][T1].pop("response_timeline"), "response_timeline is required (or record"),
        (
            lambda d: d["traces"][T1]["response_timeline"][1]["tool_calls"][0]["function"].update(
                arguments={}
            ),
            "function.arguments must be a JSON-encoded string, not an object",
        ),
        (
            lambda d: d["traces"][T1]["response_timeline"][1]["tool_calls"][0]["function"].update(
                arguments="[1]"
            ),
            "function.arguments must be a string holding a JSON object",
        ),
        (lambda d: d["traces"][T1]["usage"].update(total_tokens=-1), "usage.total_tokens must be at least 0"),
        (
            lambda d: d["traces"][T1]["request_context"].update(model=""),
            "request_context.model must be a non-empty",
        ),
    ],
)
def test_cassette_errors(change, expected: str) -> None:
    assert_problem("cassette", mutate("cassette", change), expected)


# ---------------------------------------------------------------- scenario


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d.update(user_turn=["x"]),
            "user_turn is not a known field (check its spelling, or remove it); did you mean 'user_turns'?",
        ),
        (lambda d: d.update(user_turns=[]), "user_turns must be a list of at least one user message"),
        (
            lambda d: d.pop("user_turns"),
            "user_turns must be a list of at least one user message, but the key is",
        ),
        (lambda d: d.update(id="Lookup Bluewing"), "id must be a slug"),
        (lambda d: d["fixtures"].update(universe="/tmp/u.json"), "fixtures.universe must be relative"),
        (
            lambda d: d["fixtures"].update(envelope="../x.wtin.json"),
            "fixtures.envelope must not contain '..'",
        ),
        (lambda d: d["fixtures"].update(cassette="C:\\x.json"), "fixtures.cassette must be relative"),
        (lambda d: d["fixtures"].update(univers="u.json"), "fixtures.univers is not a known field"),
        (lambda d: d.update(scorer="../s.py"), "scorer must not contain '..'"),
        (lambda d: d.update(runs=0), "runs must be at least 1, got number 0"),
        (lambda d: d.update(gates=["outcome", "speed"]), "gates[1] must be one of ['outcome', 'trajectory'"),
        (lambda d: d["assertions"].append({"tools": []}), "assertions[1].type must be a non-empty string"),
        (lambda d: d["metadata"].update(year=2026), "metadata.year must be a string, got number 2026"),
        (lambda d: d.update(wt_scenario=None), "wt_scenario must be a positive integer, got null"),
    ],
)
def test_scenario_errors(change, expected: str) -> None:
    assert_problem("scenario", mutate("scenario", change), expected)


def test_scenario_defaults() -> None:
    s = load_scenario({"wt_scenario": 1, "id": "x", "user_turns": ["hi"]})
    assert (s.runs, s.gates, s.fixtures.universe, s.assertions) == (1, ["outcome"], None, [])


# ---------------------------------------------------------------- files and kinds


@pytest.mark.parametrize(
    ("name", "data", "kind"),
    [
        ("anything.json", {"windtunnel_interchange": "1"}, "envelope"),
        ("x.cassette.json", {"windtunnel_universe": 1}, "universe"),
        ("x.wtin.json", {}, "envelope"),
        ("x.universe.json", [], "universe"),
        ("x.cassette.json", {}, "cassette"),
        ("scenario.yaml", None, "scenario"),
        ("lookup.scenario.yaml", {}, "scenario"),
        ("fixture.json", {"traces": {}, "latest_trace_id": T1}, "cassette"),
        ("fixture.json", {"traces": {}}, "unknown"),
    ],
)
def test_detect_kind(name: str, data: Any, kind: str) -> None:
    assert detect_kind(Path("some/dir") / name, data) == kind


def test_json_path() -> None:
    assert json_path(["messages", 1, "parts", 0, "id"]) == "messages[1].parts[0].id"
    assert json_path(["traces", T1, "usage"]) == f'traces["{T1}"].usage'
    assert json_path([]) == ""


def write(tmp: Path, name: str, data: Any) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data) if name.endswith(".yaml") else json.dumps(data))
    return path


def test_validate_file_reads_yaml_and_json(tmp_path: Path) -> None:
    for kind, name in [
        ("envelope", "a.wtin.json"),
        ("universe", "a.universe.json"),
        ("cassette", "a.cassette.json"),
        ("scenario", "s/scenario.yaml"),
    ]:
        report = validate_file(write(tmp_path, name, VALID[kind]()))
        assert (report.kind, report.problems, report.warnings) == (kind, [], [])


def test_validate_file_unknown_kind_is_invalid(tmp_path: Path) -> None:
    report = validate_file(write(tmp_path, "data.json", {"hello": 1}))
    assert report.kind == "unknown" and "cannot tell which wt-otel format" in str(report.problems[0])


def test_cli_schema_and_validate(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["schema", "universe"])
    assert result.exit_code == 0
    assert json.loads(result.output)["title"].startswith("wt-otel Contract B")
    assert runner.invoke(main, ["schema", "nope"]).exit_code == 2

    write(tmp_path, "ok/s/scenario.yaml", scenario())
    write(tmp_path, "ok/.hidden/x.wtin.json", {})  # hidden folders are skipped
    write(tmp_path, "ok/notes.json", {})  # not a wt-otel name: skipped
    result = runner.invoke(main, ["validate", str(tmp_path / "ok")])
    assert (result.exit_code, result.output) == (0, f"OK {tmp_path / 'ok/s/scenario.yaml'}\n")

    bad = write(tmp_path, "bad.scenario.yaml", {**scenario(), "runs": 0})
    result = runner.invoke(main, ["validate", str(bad)])
    assert (result.exit_code, result.output) == (1, f"INVALID {bad}: runs must be at least 1, got number 0\n")

    broken = tmp_path / "broken.universe.json"
    broken.write_text("{")
    result = runner.invoke(main, ["validate", str(broken), str(bad)])
    assert result.exit_code == 2
    assert f"error: cannot read {broken}:" in result.stderr
    assert f"INVALID {bad}" in result.stdout

    result = runner.invoke(main, ["validate", str(tmp_path / "missing.wtin.json")])
    assert result.exit_code == 2 and "error: cannot read" in result.stderr
    assert runner.invoke(main, ["validate"]).exit_code == 2


def test_cassette_ring_buffer_keeps_the_latest_five_runs():
    from wt_otel.contracts.cassette import HISTORY_CAP, add_run, load_cassette

    cassette: dict = {"wt_cassette": 1, "scenario": "s"}
    keys = [f"{i:032x}" for i in range(1, 8)]
    for key in keys:
        add_run(cassette, {"trace_id": key, "calls": []})
    assert cassette["history_keys"] == keys[-HISTORY_CAP:]
    assert set(cassette["traces"]) == set(keys[-HISTORY_CAP:])
    assert cassette["latest_trace_id"] == keys[-1]
    add_run(cassette, {"trace_id": keys[3], "calls": []})  # re-recording a run moves it to the end
    assert cassette["history_keys"][-1] == keys[3] and len(cassette["history_keys"]) == HISTORY_CAP
    load_cassette(cassette)  # still a valid cassette
