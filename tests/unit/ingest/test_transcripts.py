"""Transcripts are built once per session: views of the same history are the same evidence."""

from __future__ import annotations

import json

from wt_otel.ingest.sessions import build_session, merge_continuations
from wt_otel.model.spans import SpanRecord

ASK, ANSWER = "Weather in Lisbon?", "Sunny, 21 C."
CALL = {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Lisbon"}}
RESULT = {"type": "tool_call_response", "id": "c1", "response": {"temp_c": 21}}


def span(sid: str, start: int, op: str | None, inputs=None, outputs=None, trace: str = "a", **attrs) -> SpanRecord:
    a = dict(attrs)
    if op:
        a["gen_ai.operation.name"] = op
    if inputs is not None:
        a["gen_ai.input.messages"] = json.dumps(inputs)
    if outputs is not None:
        a["gen_ai.output.messages"] = json.dumps(outputs)
    return SpanRecord(trace_id=trace * 32, span_id=sid * 16, name=f"{op} x", start_ns=start, end_ns=start + 10,
                      attributes=a)


def msg(role: str, *parts) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": p} if isinstance(p, str) else p for p in parts]}


def roles_and_texts(session) -> list:
    return [(m["role"], [p.get("content") or p.get("name") or p.get("response") for p in m["parts"]])
            for m in session.messages]


EXPECTED = [("user", [ASK]), ("assistant", ["get_weather"]), ("tool", [{"temp_c": 21}]), ("assistant", [ANSWER])]


def test_an_agent_span_around_its_chat_spans_is_not_concatenated():
    s = build_session([
        span("1", 0, "invoke_agent", [msg("user", ASK)], [msg("assistant", ANSWER, CALL, RESULT)]),
        span("2", 1, "chat", [msg("user", ASK)], [msg("assistant", CALL)]),
        span("3", 3, "chat", [msg("user", ASK), msg("assistant", CALL), msg("tool", RESULT)],
             [msg("assistant", ANSWER)]),
    ])
    assert roles_and_texts(s) == EXPECTED


def test_an_sdk_span_beside_an_instrumentation_span_is_the_same_call():
    """The Anthropic SDK's own span (content blocks) and an instrumentation's (parts) for one call."""
    blocks = [{"role": "user", "content": [{"type": "text", "text": ASK}]},
              {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "get_weather",
                                                 "input": {"city": "Lisbon"}}]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                            "content": [{"type": "text", "text": '{"temp_c": 21}'}]}]}]
    s = build_session([
        span("1", 0, "chat", [msg("user", ASK)], [msg("assistant", CALL)]),
        span("2", 0, "chat", blocks[:1], blocks[1:2]),
        span("3", 5, "chat", [msg("user", ASK), msg("assistant", CALL), msg("tool", RESULT)],
             [msg("assistant", ANSWER)]),
        span("4", 5, "chat", blocks, [{"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]),
    ])
    assert roles_and_texts(s) == EXPECTED


def test_a_lossy_resent_history_adds_only_what_follows():
    """An app that resends only the texts on the next turn (AI SDK, Responses input without tool items)."""
    s = build_session([
        span("1", 0, "chat", [msg("user", ASK)], [msg("assistant", CALL)]),
        span("2", 2, "chat", [msg("user", ASK), msg("assistant", CALL), msg("tool", RESULT)],
             [msg("assistant", ANSWER)]),
        span("3", 4, "chat", [msg("user", ASK), msg("assistant", ANSWER), msg("user", "And Oslo?")],
             [msg("assistant", "Snow.")]),
    ])
    assert roles_and_texts(s) == EXPECTED + [("user", ["And Oslo?"]), ("assistant", ["Snow."])]


def test_empty_turns_are_not_invented():
    s = build_session([span("1", 0, "chat", [msg("user", ASK), msg("assistant", "")], [msg("assistant", "")]),
                       span("2", 1, "chat", [msg("user", ASK)], [msg("assistant", ANSWER)])])
    assert roles_and_texts(s) == [("user", [ASK]), ("assistant", [ANSWER])]


def test_a_setup_only_trace_is_no_session():
    assert build_session([span("1", 0, "create_agent", agent="x", **{"gen_ai.agent.name": "weather"})]) is None


def test_per_turn_traces_without_an_id_continue_one_another():
    first = build_session([span("1", 0, "chat", [msg("user", ASK)], [msg("assistant", ANSWER)], trace="a")])
    second = build_session([span("2", 20, "chat", [msg("user", ASK), msg("assistant", ANSWER), msg("user", "Oslo?")],
                                 [msg("assistant", "Snow.")], trace="b")])
    other = build_session([span("3", 5, "chat", [msg("user", "Unrelated")], [msg("assistant", "Ok.")], trace="c")])
    merged = merge_continuations([second, other, first])
    assert len(merged) == 2
    [joined] = [s for s in merged if len(s.trace_ids) == 2]
    assert [t for _, t in roles_and_texts(joined)] == [[ASK], [ANSWER], ["Oslo?"], ["Snow."]]
    assert joined.trace_ids == ["a" * 32, "b" * 32]


def test_model_call_arguments_win_over_a_tool_spans_wrapper():
    s = build_session([
        span("1", 0, "chat", [msg("user", ASK)], [msg("assistant", CALL)]),
        span("2", 1, "execute_tool", **{"gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "c1",
                                        "gen_ai.tool.call.arguments": "Lisbon",
                                        "gen_ai.tool.call.result": '[{"type": "text", "text": "{\\"temp_c\\": 21}"}]'}),
    ])
    [w] = s.witnessed_calls
    assert w.args == {"city": "Lisbon"} and w.args_decoded and w.result == {"temp_c": 21}
