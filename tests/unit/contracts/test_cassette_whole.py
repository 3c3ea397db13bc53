"""Cassettes checked whole (issue 30, item 5): every rule of vcr-fixture-format.md in one pass, each problem
with its JSON path, whatever else is wrong in the file; and imported streamed calls keep `stream: true` and
their time to first token, as the producers recorded them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.paths import PRODUCERS
from wt_otel.cli import main
from wt_otel.contracts.validate import validate_data
from wt_otel.exporters.cassette import cassette as render_cassette
from wt_otel.ingest.dialects.common import base_call
from wt_otel.model.session import Session
from wt_otel.model.spans import Event, SpanRecord

T1, T2 = "0a" * 16, "0b" * 16
LOOKUP = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def streamed(**extra: Any) -> dict[str, Any]:
    call = {"request_context": {"model": "gpt-x", "parameters": {"stream": True}},
            "network_metrics": {"ttfb_ms": 100.0, "total_duration_ms": 300.0},
            "response_timeline": [{"delta_ms": 100.0, "chunk": "Hel"},
                                  {"delta_ms": 50.0, "chunk": "lo", "finish_reason": "stop"}]}
    call.update(extra)
    return call


def unary(**extra: Any) -> dict[str, Any]:
    call = {"request_context": {"model": "gpt-x", "parameters": {"stream": False}},
            "network_metrics": {"ttfb_ms": 80.0, "total_duration_ms": 80.0},
            "response_timeline": [{"delta_ms": 0, "chunk": "hi"}]}
    call.update(extra)
    return call


def doc(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"wt_cassette": 1, "latest_trace_id": T1, "history_keys": [T1],
            "traces": {T1: {"trace_id": T1, "calls": list(calls)}}}


def problems(d: dict[str, Any]) -> dict[str, str]:
    found = validate_data("cassette", d)
    return {p.path: p.message for p in found}


def test_well_formed_calls_are_valid() -> None:
    assert problems(doc(streamed(), unary())) == {}


@pytest.mark.parametrize(("call", "path", "words"), [
    (streamed(response_timeline=[{"delta_ms": 100.0, "tool_calls": [LOOKUP]},
                                 {"delta_ms": 5.0, "chunk": "ok", "finish_reason": "tool_calls"}]),
     "response_timeline[0].tool_calls", "may appear on the final frame only"),
    (streamed(response_timeline=[{"delta_ms": 20.0, "chunk": "a", "finish_reason": "stop"}]),
     "response_timeline[0].delta_ms", "must equal network_metrics.ttfb_ms (100)"),
    (streamed(network_metrics={"ttfb_ms": 100.0, "total_duration_ms": 120.0}),
     "response_timeline", "frames' delta_ms add up to 150 ms"),
    (streamed(request_context={"model": "gpt-x"}, network_metrics={"ttfb_ms": 400.0, "total_duration_ms": 300.0},
              response_timeline=[{"delta_ms": 0.0, "chunk": "x"}]),
     "network_metrics.ttfb_ms", "must not exceed total_duration_ms (300)"),
    (unary(network_metrics={"ttfb_ms": None, "total_duration_ms": 80.0}) | {"network_metrics": {
        "ttfb_ms": 10.0, "total_duration_ms": 80.0}},
     "network_metrics.ttfb_ms", "must equal total_duration_ms (80) for a unary call"),
    (unary(raw_payload={"stream_chunks": [{"id": "x"}]}),
     "raw_payload.stream_chunks", "is for a streamed call, but parameters.stream is false"),
    (streamed(raw_payload={"sync_response": {"id": "x"}}),
     "raw_payload.sync_response", "is for a unary call, but parameters.stream is true"),
    (unary(response_timeline=[{"delta_ms": 0, "chunk": "a"}, {"delta_ms": 0, "chunk": "b"}]),
     "response_timeline", "must hold exactly 1 frame for a unary call"),
])
def test_each_rule_names_its_path(call: dict[str, Any], path: str, words: str) -> None:
    found = problems(doc(streamed(), call))
    full = f'traces["{T1}"].calls[1].{path}'
    assert list(found) == [full], found
    assert found[full].startswith(full + " ") and words in found[full]


def test_every_problem_at_once_whatever_else_is_wrong() -> None:
    """A type error in one call used to hide every cross-field rule of the file (pydantic's after-validators
    run only when all fields parsed): now one pass lists them all, types and rules alike."""
    broken_type = streamed(usage={"prompt_tokens": "many"})
    early_tools = streamed(response_timeline=[{"delta_ms": 100.0, "tool_calls": [LOOKUP]},
                                              {"delta_ms": 1.0, "finish_reason": "tool_calls"}])
    late_first_frame = streamed(response_timeline=[{"delta_ms": 7.0, "chunk": "x", "finish_reason": "stop"}])
    d = doc(broken_type, early_tools, late_first_frame, unary(network_metrics={"ttfb_ms": 5.0,
                                                                               "total_duration_ms": 80.0}))
    d["history_keys"] = [T1, T2]  # T2 names no trace
    d["traces"][T1]["calls"][0]["request_context"]["parameters"]["stream"] = True
    found = problems(d)
    base = f'traces["{T1}"].calls'
    assert set(found) == {f"{base}[0].usage.prompt_tokens", f"{base}[1].response_timeline[0].tool_calls",
                          f"{base}[2].response_timeline[0].delta_ms", f"{base}[3].network_metrics.ttfb_ms",
                          "history_keys[1]"}, found


def test_a_document_that_is_not_even_an_object_is_one_problem() -> None:
    assert len(validate_data("cassette", [1, 2])) == 1


def test_wt_otel_validate_prints_every_problem_with_its_path(tmp_path: Path) -> None:
    d = doc(streamed(response_timeline=[{"delta_ms": 100.0, "tool_calls": [LOOKUP]},
                                        {"delta_ms": 1.0, "finish_reason": "tool_calls"}]),
            unary(network_metrics={"ttfb_ms": 5.0, "total_duration_ms": 80.0}))
    d["traces"][T1]["calls"][1]["usage"] = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 5}
    path = tmp_path / "llm.cassette.json"
    path.write_text(json.dumps(d))
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 1
    lines = [line for line in done.output.splitlines() if line.startswith("INVALID")]
    assert len(lines) == 3, done.output
    for where in ("calls[0].response_timeline[0].tool_calls", "calls[1].network_metrics.ttfb_ms",
                  "calls[1].usage.total_tokens"):
        assert any(f"{where} " in line for line in lines), done.output


# ---------------------------------------------------------------- import keeps streaming and its timing


def span(name: str, attrs: dict[str, Any], events: list[Event] | None = None) -> SpanRecord:
    return SpanRecord(trace_id=T1, span_id="b7ad6b7169203331", name=name, start_ns=1_000_000_000,
                      end_ns=1_800_000_000, attributes=attrs, events=events or [])


@pytest.mark.parametrize(("name", "attrs", "events", "ttfb"), [
    # OpenLLMetry >= 0.55: gen_ai.is_streaming and one event per chunk (the first one is the first token)
    ("openai.chat", {"gen_ai.is_streaming": True},
     [Event(name="gen_ai.content.completion.chunk", time_ns=1_150_000_000),
      Event(name="gen_ai.content.completion.chunk", time_ns=1_300_000_000)], 150.0),
    # OpenLLMetry <= 0.54
    ("openai.chat", {"llm.is_streaming": True},
     [Event(name="llm.content.completion.chunk", time_ns=1_040_000_000)], 40.0),
    # the Vercel AI SDK before v7: the span name says stream, msToFirstChunk is milliseconds
    ("ai.streamText.doStream", {"ai.response.msToFirstChunk": 119.4}, [], 119.4),
    # the AI SDK 7 (@ai-sdk/otel): GenAI's time_to_first_chunk in seconds, no stream flag
    ("chat gpt-4o-mini", {"gen_ai.client.operation.time_to_first_chunk": 0.2}, [], 200.0),
    # OpenInference: invocation parameters say stream
    ("ChatCompletion", {"llm.invocation_parameters": '{"model": "m", "stream": true}'},
     [Event(name="First Token Stream Event", time_ns=1_007_000_000)], 7.0),
])
def test_import_reads_stream_and_first_token(name: str, attrs: dict[str, Any], events: list[Event],
                                             ttfb: float) -> None:
    call = base_call(span(name, attrs, events), "test")
    assert call.stream is True
    assert call.ttfb_ms == pytest.approx(ttfb)


@pytest.mark.parametrize(("name", "attrs"), [
    ("litellm_request", {"llm.is_streaming": "False"}),  # LiteLLM writes the flag as a string
    ("ai.generateText.doGenerate", {}),
])
def test_import_reads_unary_calls(name: str, attrs: dict[str, Any]) -> None:
    assert base_call(span(name, attrs), "test").stream is False


@pytest.mark.parametrize("producer", ["openllmetry-current", "vercel-ai-sdk-legacy"])
def test_an_imported_streamed_call_keeps_stream_true_and_its_ttfb(producer: str, tmp_path: Path) -> None:
    """Real producer dumps (committed fixtures) through `wt-otel import`: the streamed call is written
    `stream: true` with its time to first token as the first frame's delta, and the cassette validates."""
    out = tmp_path / "out"
    done = CliRunner().invoke(main, ["import", str(PRODUCERS / producer / "dump.otlp.jsonl"), "--out", str(out)])
    assert done.exit_code == 0, done.output
    calls = []
    for path in sorted(out.glob("*/llm.cassette.json")):
        data = json.loads(path.read_text())
        assert validate_data("cassette", data) == []
        calls += data["traces"][data["latest_trace_id"]]["calls"]
    streamed_calls = [c for c in calls if c["request_context"]["parameters"]["stream"]]
    assert streamed_calls, [c["request_context"]["parameters"] for c in calls]
    for c in streamed_calls:
        ttfb = c["network_metrics"]["ttfb_ms"]
        assert ttfb is not None and 0 < ttfb <= c["network_metrics"]["total_duration_ms"]
        assert c["network_metrics"]["ttfb_source"] == "first_token"
        assert c["response_timeline"][0]["delta_ms"] == pytest.approx(ttfb)


def test_the_import_writer_output_passes_the_new_rules_unchanged() -> None:
    """A deep copy of a valid streamed call stays valid after a round trip through JSON (no float drift)."""
    d = doc(streamed())
    assert problems(json.loads(json.dumps(copy.deepcopy(d)))) == {}


@pytest.mark.parametrize(("attrs", "end_ns", "want"), [
    # said unary, yet a time-to-first-token attribute: the flag wins, ttfb is the total
    ({"llm.is_streaming": "False", "gen_ai.server.time_to_first_token": 0.1}, 1_800_000_000,
     (False, 800.0, 800.0)),
    # a first token but no end time: the timing cannot be told consistently, so it is unknown
    ({"gen_ai.server.time_to_first_token": 0.1}, 1_000_000_000, (True, None, 0.0)),
])
def test_the_import_writer_always_writes_consistent_timing(attrs: dict[str, Any], end_ns: int,
                                                           want: tuple[bool, float | None, float]) -> None:
    s = span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", **attrs})
    s.end_ns = end_ns
    call = base_call(s, "semconv")
    call.output_messages = [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]
    out = render_cassette(Session(key=T1, trace_ids=[T1], llm_calls=[call]), "s")
    assert validate_data("cassette", out) == []
    written = out["traces"][T1]["calls"][0]
    got = (written["request_context"]["parameters"]["stream"], written["network_metrics"]["ttfb_ms"],
           written["network_metrics"]["total_duration_ms"])
    assert got == want


def test_the_ring_buffer_lists_each_run_once_and_keeps_no_evicted_trace() -> None:
    d = doc(streamed())
    d["history_keys"] = [T1, T1]
    d["traces"][T2] = {"trace_id": T2, "calls": [streamed()]}
    found = problems(d)
    assert set(found) == {"history_keys[1]", f'traces["{T2}"]'}, found
    assert "listed twice" in found["history_keys[1]"] and "evicted" in found[f'traces["{T2}"]']


def test_a_provider_prefixed_model_is_a_warning(tmp_path: Path) -> None:
    d = doc(streamed(request_context={"model": "openai/gpt-x", "provider": "openai", "parameters": {"stream": True}}))
    path = tmp_path / "old.cassette.json"
    path.write_text(json.dumps(d))
    done = CliRunner().invoke(main, ["validate", str(path)])
    assert done.exit_code == 0 and "WARN" in done.output and "'openai/gpt-x' carries a provider prefix" in done.output
    assert CliRunner().invoke(main, ["validate", "--strict", str(path)]).exit_code == 1
