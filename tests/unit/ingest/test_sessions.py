"""Session building on spans made with the real OTel SDK: variants the producer
fixtures do not cover, and the judgment calls (dedup, ids, capture off...)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.spans import assistant, chat_span, tool, user
from wt_otel.ingest.dumps import read_dump
from wt_otel.ingest.sessions import SessionGrouper, build_session


def sessions_of(path: Path):
    with SessionGrouper() as g:
        g.add_all(r for r in read_dump(path) if not hasattr(r, "message"))
        return [s for s in (build_session(grp) for grp in g.groups()) if s]


def texts(session, role):
    return [p["content"] for m in session.messages if m["role"] == role for p in m["parts"] if p["type"] == "text"]


def test_history_repeated_by_every_chat_span_is_not_duplicated(otlp_dump):
    q, call = user("weather in Oslo?"), assistant(calls=[("c1", "weather", {"city": "Oslo"})])
    answer = assistant("It is 3 degrees in Oslo.")

    def build(t):
        with t.start_as_current_span("invoke_agent", attributes={"gen_ai.operation.name": "invoke_agent"}):
            chat_span(t, inputs=[q], outputs=[call])
            chat_span(t, inputs=[q, call, tool("c1", {"temp": 3})], outputs=[answer])

    [s] = sessions_of(otlp_dump(build))
    assert [m["role"] for m in s.messages] == ["user", "assistant", "tool", "assistant"]
    assert len(s.llm_calls) == 2


def test_each_call_its_own_trace_merged_by_session_id(otlp_dump):
    def build(t):
        chat_span(t, inputs=[user("hi")], outputs=[assistant("hello")], **{"session.id": "s-42"})
        chat_span(t, inputs=[user("hi"), assistant("hello"), user("bye")], outputs=[assistant("ciao")],
                  **{"session.id": "s-42"})
        chat_span(t, inputs=[user("other")], outputs=[assistant("x")], **{"session.id": "s-43"})

    sessions = sessions_of(otlp_dump(build))
    assert len(sessions) == 2
    s42 = next(s for s in sessions if s.conversation_id == "s-42")
    assert s42.user_turns == ["hi", "bye"] and len(s42.trace_ids) == 2
    assert texts(s42, "assistant") == ["hello", "ciao"]


def test_agent_without_history_in_input_appends_new_turns(otlp_dump):
    """Responses-API style: each call sends only the new input; nothing repeats."""
    def build(t):
        with t.start_as_current_span("invoke_agent"):
            chat_span(t, inputs=[user("one")], outputs=[assistant("1")])
            chat_span(t, inputs=[user("two")], outputs=[assistant("2")])

    [s] = sessions_of(otlp_dump(build))
    assert s.user_turns == ["one", "two"] and texts(s, "assistant") == ["1", "2"]


def test_content_events_1_26(otlp_dump):
    def build(t):
        with t.start_as_current_span("chat gpt-x", attributes={"gen_ai.system": "openai",
                                                               "gen_ai.request.model": "gpt-x"}) as span:
            span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps(
                [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}])})
            span.add_event("gen_ai.content.completion", {"gen_ai.completion": json.dumps(
                [{"role": "assistant", "content": "4"}])})

    [s] = sessions_of(otlp_dump(build))
    assert s.user_turns == ["2+2?"] and s.final_answer == "4"
    assert s.system_instructions[0]["content"] == "be brief"
    assert "content_events" in s.dialects and s.provider == "openai"


def test_genai_events_as_span_events_with_event_name_attribute(otlp_dump):
    def build(t):
        with t.start_as_current_span("chat gpt-x", attributes={"gen_ai.operation.name": "chat"}) as span:
            span.add_event("event", {"event.name": "gen_ai.user.message", "content": "ping"})
            span.add_event("gen_ai.choice", {"finish_reason": "stop", "content": "pong"})

    [s] = sessions_of(otlp_dump(build))
    assert s.user_turns == ["ping"] and s.final_answer == "pong"


def test_capture_off_is_reported_not_mistaken_for_an_empty_answer(otlp_dump):
    def build(t):
        chat_span(t)  # content capture off: no messages at all

    [s] = sessions_of(otlp_dump(build))
    assert not s.content_captured
    assert any("not captured" in w for w in s.warnings)


def test_redaction_placeholders_are_detected(otlp_dump):
    def build(t):
        chat_span(t, inputs=[user("[REDACTED]")], outputs=[assistant("readacted")])

    [s] = sessions_of(otlp_dump(build))
    assert not s.content_captured
    assert any("placeholder" in w for w in s.warnings)


def test_parts_contract_a_cannot_carry_are_listed_not_dropped(otlp_dump):
    out = {"role": "assistant", "parts": [{"type": "thinking", "content": "hmm"},
                                          {"type": "text", "content": "done"}]}

    def build(t):
        chat_span(t, inputs=[user("go")], outputs=[out])

    [s] = sessions_of(otlp_dump(build))
    assert s.omitted_parts == [{"message_index": 1, "role": "assistant",
                                "part": {"type": "reasoning", "content": "hmm"}}]


def test_missing_tool_call_ids_are_synthesized_deterministically(otlp_dump):
    call = {"role": "assistant", "parts": [{"type": "tool_call", "name": "f", "arguments": "{\"a\": 1}"}]}
    resp = {"role": "user", "parts": [{"type": "tool_call_response", "result": "ok"}]}

    def build(t):
        chat_span(t, inputs=[user("x"), call, resp], outputs=[assistant("y")])

    path = otlp_dump(build)
    [a], [b] = sessions_of(path), sessions_of(path)
    ids = [p["id"] for m in a.messages for p in m["parts"] if p["type"] in ("tool_call", "tool_call_response")]
    assert ids[0].startswith("call_wt_") and ids == [ids[0], ids[0]]
    assert ids == [p["id"] for m in b.messages for p in m["parts"] if "id" in p]
    # tool result sent as role user is a tool message; `result` became `response`; arguments decoded
    assert a.messages[2]["role"] == "tool" and a.messages[2]["parts"][0]["response"] == "ok"
    assert a.messages[1]["parts"][0]["arguments"] == {"a": 1}


def test_execute_tool_without_call_id_is_matched_by_name_and_order(otlp_dump):
    def build(t):
        with t.start_as_current_span("invoke_agent"):
            calls = [("id1", "f", {"n": 1}), ("id2", "f", {"n": 2})]
            chat_span(t, inputs=[user("x")], outputs=[assistant(calls=calls)])
            for n in (1, 2):
                with t.start_as_current_span("execute_tool f", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                        "gen_ai.tool.call.arguments": json.dumps({"n": n}), "gen_ai.tool.call.result": str(n)}):
                    pass

    [s] = sessions_of(otlp_dump(build))
    assert [(w.tool_call_id, w.correlation, w.args, w.result) for w in s.witnessed_calls] == [
        ("id1", "name_order", {"n": 1}, 1), ("id2", "name_order", {"n": 2}, 2)]


def test_undecodable_arguments_are_kept_as_text_with_a_warning(otlp_dump):
    def build(t):
        with t.start_as_current_span("execute_tool f", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                "gen_ai.tool.call.arguments": "{not json", "gen_ai.tool.call.result": "ok"}):
            pass

    [s] = sessions_of(otlp_dump(build))
    assert s.witnessed_calls[0].args == "{not json" and not s.witnessed_calls[0].args_decoded
    assert any("not JSON" in w for w in s.warnings)


def test_error_span_and_flag(otlp_dump):
    from opentelemetry.trace import Status, StatusCode

    def build(t):
        with t.start_as_current_span("chat gpt-x", attributes={
                "gen_ai.operation.name": "chat", "error.type": "RateLimitError",
                "gen_ai.input.messages": json.dumps([user("x")]), "wt.incident": "INC-7"}) as span:
            span.set_status(Status(StatusCode.ERROR, "429 too many"))

    [s] = sessions_of(otlp_dump(build))
    assert s.flagged and s.flag_ref == "INC-7"
    assert (s.llm_calls[0].error_type, s.llm_calls[0].error_message) == ("RateLimitError", "429 too many")


def test_log_records_reach_their_span_as_events(tmp_path):
    """openai-v2's default mode: content only in logs linked by traceId/spanId."""
    from wt_otel.model.spans import LogRecord, SpanRecord

    span = SpanRecord(trace_id="a" * 32, span_id="b" * 16, name="chat m", attributes={"gen_ai.operation.name": "chat"})
    logs = [LogRecord(event_name="gen_ai.user.message", trace_id="a" * 32, span_id="b" * 16, time_ns=1,
                      body={"content": "hello"}),
            LogRecord(event_name="gen_ai.choice", trace_id="a" * 32, span_id="b" * 16, time_ns=2,
                      body={"message": {"content": "hi there"}, "finish_reason": "stop"})]
    s = build_session([logs[1], span, logs[0]])  # arrival order does not matter
    assert s.user_turns == ["hello"] and s.final_answer == "hi there"


def test_system_prompt_sent_as_a_system_message_becomes_system_instructions(otlp_dump):
    system = {"role": "system", "parts": [{"type": "text", "content": "Be terse."}]}

    def build(t):
        chat_span(t, inputs=[system, user("hi")], outputs=[assistant("yo")])

    [s] = sessions_of(otlp_dump(build))
    assert s.system_instructions == [{"type": "text", "content": "Be terse."}]
    assert [m["role"] for m in s.messages] == ["user", "assistant"]


def test_mcp_content_wrappers_are_unwrapped_in_witnessed_results(otlp_dump):
    wrapped = [{"type": "text", "text": '{"email": "a@b.example"}', "annotations": None}]

    def build(t):
        for result in (wrapped, {"type": "text", "text": "plain"},
                       {"content": wrapped, "structuredContent": {"email": "s@b.example"}, "isError": False}):
            with t.start_as_current_span("execute_tool f", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                    "gen_ai.tool.call.arguments": "{}", "gen_ai.tool.call.result": json.dumps(result)}):
                pass

    sessions = sessions_of(otlp_dump(build))
    results = sorted((w.result for s in sessions for w in s.witnessed_calls), key=str)
    assert results == sorted([{"email": "a@b.example"}, "plain", {"email": "s@b.example"}], key=str)


def _reference_transcript(calls):
    """`_fill_from_calls`' transcript as it was written before each signature was computed once: the plain
    path the fast one must equal."""
    from wt_otel.ingest.sessions import _merge, _sig

    transcript, sigs = [], []
    spoke = any(c.input_messages or c.output_messages for c in calls if not c.is_transcript)
    for call in sorted(calls, key=lambda c: (c.is_transcript, c.start_ns)):
        history = []
        for m in call.input_messages + call.output_messages:
            if m.get("role") == "system" or not any(_sig(m)[1]):
                continue
            if (history and history[-1]["role"] == "assistant" and m["role"] == "assistant"
                    and all(p["type"] == "tool_call" for p in m["parts"])):  # parallel calls: one message
                history[-1] = {**history[-1], "parts": history[-1]["parts"] + m["parts"]}
            else:
                history.append(m)
        if call.is_transcript and not spoke and history and all(m["role"] == "assistant" for m in history):
            continue  # answers alone where no model call logged content
        _merge(transcript, sigs, history, extend_only=call.is_transcript and spoke)
    return transcript


def test_the_transcript_is_the_one_the_plain_merge_makes():
    """Every producer fixture and the generated import dump: signatures computed once per message give the
    transcript that computing them twice gave, message for message."""
    import copy

    from tests.support.importdump import write_dump
    from tests.support.paths import PRODUCERS
    from wt_otel.ingest import dialects
    from wt_otel.ingest.sessions import _fill_from_calls, attach_logs
    from wt_otel.model.session import LLMCall, Session

    paths = sorted(p for p in PRODUCERS.glob("*/*") if p.name.startswith(("dump", "trace")) and p.parent.name[0] != "_")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        paths += write_dump(Path(tmp), sessions=60, seed=5)
        compared = 0
        for path in paths:
            with SessionGrouper() as g:
                g.add_all(r for r in read_dump(path) if not hasattr(r, "message"))
                for group in g.groups():
                    calls = [o for s in attach_logs(group) for o in dialects.observe(s) if isinstance(o, LLMCall)]
                    session = Session(key="k")
                    _fill_from_calls(session, copy.deepcopy(calls))
                    assert session.messages == _reference_transcript(copy.deepcopy(calls)), path
                    compared += bool(session.messages)
    assert compared > 50


def test_conversation_id_reads_what_the_key_by_key_lookup_reads():
    from wt_otel.ingest.dialects.common import conversation_id, first
    from wt_otel.ingest.keys import CONVERSATION_KEYS

    samples = [{}, {"x": 1}, {"session.id": ""}, {"session.id": None, "thread.id": "t"}, {"gen_ai.conversation.id": 7},
               {"thread.id": "a", "session.id": "b"}, dict.fromkeys(CONVERSATION_KEYS, ""), {"Session.Id": "no"}]
    for attrs in samples:
        v = first(attrs, CONVERSATION_KEYS)
        assert conversation_id(attrs) == (str(v) if v is not None else None), attrs
