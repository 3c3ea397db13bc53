"""vcr-fixture-format.md §2.2/§2.3 rules, provider-prefix normalisation, ttfb from first-token evidence."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from wt_otel.contracts.validate import validate_data
from wt_otel.exporters.cassette import cassette as render_cassette
from wt_otel.exporters.cassette import split_model
from wt_otel.ingest.dialects.common import base_call
from wt_otel.model.session import Session
from wt_otel.model.spans import Event, SpanRecord

T1 = "0af7651916cd43dd8448eb211c80319c"


def doc(**call: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "trace_id": T1,
        "request_context": {"model": "gpt-x", "provider": "openai", "parameters": {"stream": True}},
        "network_metrics": {"ttfb_ms": 100.0, "total_duration_ms": 300.0},
        "response_timeline": [{"delta_ms": 100.0, "chunk": "Hel"}, {"delta_ms": 50.0, "chunk": "lo",
                                                                  "finish_reason": "stop"}],
        "exception_boundary": {"occurred": False},
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    entry.update(call)
    return {"wt_cassette": 1, "latest_trace_id": T1, "history_keys": [T1], "traces": {T1: entry}}


def messages(d: dict[str, Any]) -> list[str]:
    return [p.message for p in validate_data("cassette", d)]


def test_a_well_formed_stream_is_valid() -> None:
    assert messages(doc()) == []


def test_total_tokens_must_be_the_sum() -> None:
    bad = doc(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 9})
    assert messages(bad) == [f'traces["{T1}"].usage.total_tokens must be the sum of prompt_tokens and '
                             "completion_tokens (5), got 9"]


def test_finish_reason_only_on_the_final_frame() -> None:
    bad = doc(response_timeline=[{"delta_ms": 100, "chunk": "a", "finish_reason": "stop"},
                                 {"delta_ms": 1, "chunk": "b", "finish_reason": "stop"}])
    (msg,) = messages(bad)
    assert "response_timeline[0].finish_reason may appear on the final frame only" in msg


def test_a_terminal_frame_calling_tools_says_tool_calls() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    bad = doc(response_timeline=[{"delta_ms": 100, "chunk": "a"}, {"delta_ms": 1, "tool_calls": [call],
                                                                "finish_reason": "stop"}])
    (msg,) = messages(bad)
    assert 'response_timeline[1].finish_reason must be "tool_calls"' in msg


def test_error_type_while_not_occurred_is_invalid() -> None:
    bad = doc(exception_boundary={"occurred": False, "error_type": "TimeoutError"})
    (msg,) = messages(bad)
    assert "exception_boundary.error_type must be omitted while occurred is false" in msg
    ok = doc(exception_boundary={"occurred": True, "error_type": "TimeoutError", "message": "cut"})
    assert messages(ok) == []


def test_unary_call_is_one_frame_at_delta_zero() -> None:
    ctx = {"model": "gpt-x", "parameters": {"stream": False}}
    assert any("must hold exactly 1 frame for a unary call" in m for m in messages(doc(request_context=ctx)))
    one = doc(request_context=ctx, response_timeline=[{"delta_ms": 5, "chunk": "x"}])
    assert any("delta_ms must be 0 for a unary call" in m for m in messages(one))


def test_rules_apply_inside_additive_calls_too() -> None:
    good = copy.deepcopy(doc()["traces"][T1])
    bad = copy.deepcopy(good)
    bad.pop("trace_id")
    bad["usage"]["total_tokens"] = 1
    d = doc(calls=[{k: v for k, v in good.items() if k != "trace_id"}, bad])
    assert any(".calls[1].usage.total_tokens must be the sum" in m for m in messages(d))


@pytest.mark.parametrize(("model", "provider", "want"), [
    ("openai/gpt-4o", None, ("gpt-4o", "openai")),
    ("anthropic/claude-haiku-4-5", "anthropic", ("claude-haiku-4-5", "anthropic")),
    ("meta-llama/Llama-3-8B", "ollama", ("meta-llama/Llama-3-8B", "ollama")),  # not a provider prefix
    ("gpt-4o", "openai", ("gpt-4o", "openai")),
    (None, None, ("unknown", None)),
])
def test_split_model(model: str | None, provider: str | None, want: tuple[str, str | None]) -> None:
    assert split_model(model, provider) == want


def span(attrs: dict[str, Any], events: list[Event] | None = None) -> SpanRecord:
    return SpanRecord(trace_id=T1, span_id="b7ad6b7169203331", name="chat openai/gpt-4o", start_ns=1_000_000_000,
                      end_ns=1_800_000_000, attributes={"gen_ai.operation.name": "chat", **attrs},
                      events=events or [])


def exported(call_span: SpanRecord) -> dict[str, Any]:
    call = base_call(call_span, "semconv")
    call.output_messages = [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}]
    out = render_cassette(Session(key=T1, trace_ids=[T1], llm_calls=[call]), "s")
    assert validate_data("cassette", out) == []
    return out["traces"][T1]["calls"][0]


def test_exported_cassette_drops_the_provider_prefix() -> None:
    call = exported(span({"gen_ai.request.model": "openai/gpt-4o"}))
    assert call["request_context"]["model"] == "gpt-4o"
    assert call["request_context"]["provider"] == "openai"


def test_ttfb_from_genai_attribute() -> None:
    call = exported(span({"gen_ai.request.model": "m", "gen_ai.request.stream": True,
                          "gen_ai.server.time_to_first_token": 0.25}))
    assert call["network_metrics"] == {"ttfb_ms": 250.0, "total_duration_ms": 800.0, "ttfb_source": "first_token"}
    assert call["response_timeline"][0]["delta_ms"] == 250.0  # §2.2: the first frame's delta is the ttfb


def test_ttfb_in_milliseconds_as_strands_writes_it() -> None:
    """Strands Agents puts timeToFirstByteMs under the GenAI name: 120 cannot be seconds in an 800 ms span."""
    call = exported(span({"gen_ai.request.model": "m", "gen_ai.request.stream": True,
                          "gen_ai.server.time_to_first_token": 120}))
    assert call["network_metrics"]["ttfb_ms"] == 120.0


def test_ttfb_from_openinference_first_token_event() -> None:
    ev = Event(name="First Token Stream Event", time_ns=1_120_000_000)
    call = exported(span({"llm.model_name": "m", "llm.is_streaming": True}, [ev]))
    assert call["network_metrics"]["ttfb_ms"] == pytest.approx(120.0)


def test_ttfb_unknown_for_a_stream_without_evidence() -> None:
    call = exported(span({"gen_ai.request.model": "m", "gen_ai.request.stream": True}))
    assert call["network_metrics"]["ttfb_ms"] is None
    assert call["network_metrics"]["ttfb_source"] == "unknown"


def test_ttfb_is_the_total_for_a_unary_call() -> None:
    call = exported(span({"gen_ai.request.model": "m", "gen_ai.request.stream": False}))
    assert call["network_metrics"]["ttfb_ms"] == call["network_metrics"]["total_duration_ms"] == 800.0


def test_exported_total_tokens_is_the_sum_and_keeps_a_differing_report() -> None:
    call = exported(span({"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 3,
                          "gen_ai.usage.output_tokens": 2, "llm.usage.total_tokens": 9}))
    assert call["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                             "reported_total_tokens": 9}
