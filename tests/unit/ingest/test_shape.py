"""The shape reader on what is not a conversation, and on spans built to cost it: it reads nothing it cannot
show to be content, and a hostile span costs a bounded read. (The fixtures' leave-one-producer-out table,
`test_generic_reader.py`, is what it does read.)"""

from __future__ import annotations

import json
import time

import pytest

from wt_otel.ingest.dialects import shape
from wt_otel.ingest.sessions import build_session
from wt_otel.model.session import LLMCall, ToolExecution
from wt_otel.model.spans import Event, SpanRecord

TRACE = "0a" * 16


def span(name: str, attrs: dict, sid: str = "01" * 8, parent: str | None = None, start: int = 1,
         events: list[Event] | None = None) -> SpanRecord:
    return SpanRecord(trace_id=TRACE, span_id=sid, name=name, parent_span_id=parent, start_ns=start, end_ns=start + 10,
                      attributes=attrs, events=events or [])


@pytest.mark.parametrize("record", [
    span("GET /orders", {"http.request.method": "GET", "http.response.body": json.dumps({"order": 7, "ok": True})}),
    span("run query", {"db.system": "postgresql", "db.query.text": "SELECT * FROM orders WHERE id = 7"}),
    span("POST /v1/chat", {"http.request.body": "not json at all", "url.full": "http://127.0.0.1/v1/chat"}),
    span("worker.task", {"messaging.message.body": json.dumps([1, 2, 3])}),
])
def test_spans_that_hold_no_conversation_give_nothing(record):
    assert shape.extract(record) == []


@pytest.mark.parametrize("attrs,role", [
    ({"mlflow.spanType": "CHAT_MODEL"}, shape.LLM),
    ({"langfuse.observation.type": "tool"}, shape.TOOL),
    ({"haystack.component.type": "Agent"}, shape.AGENT),
    ({"openinference.span.kind": "LLM"}, shape.LLM),
    ({"acme.model.name": "m", "acme.usage.input_tokens": 3}, shape.LLM),  # names a model and counts tokens
    ({"http.route": "/run"}, None),
])
def test_span_roles_from_what_the_producer_says(attrs, role):
    assert shape.span_role(span("step", attrs)) == role


def test_a_tools_parameter_schema_is_not_its_arguments():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    [call] = shape.extract(span("get_weather", {"acme.span.kind": "tool", "tool.parameters.input": json.dumps(schema),
                                                "acme.tool.input": '{"city": "Oslo"}',
                                                "acme.tool.output": '{"temp_c": 3}'}))
    assert isinstance(call, ToolExecution) and call.args == {"city": "Oslo"} and call.result == {"temp_c": 3}


def test_an_sdk_repr_cut_short_is_never_an_answer():
    cut = "AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT: 'assistant'>, blocks=[TextBlock(text='Lis..."
    assert shape.extract(span("agent.step", {"acme.span.kind": "agent", "acme.output": cut})) == []
    assert shape.plain_text("assistant: Lisbon is sunny.") == "Lisbon is sunny."


def test_a_hostile_span_costs_a_bounded_read():
    attrs = {f"acme.input.{i}": "x" for i in range(20_000)} | {f"k{i}.output": "{}" for i in range(20_000)}
    events = [Event(name="chunk", attributes={f"a{j}.input": "y" for j in range(50)}) for _ in range(5_000)]
    started = time.monotonic()
    shape.extract(span("agent", attrs, events=events))
    assert len(shape.fields(attrs)) <= 64
    assert time.monotonic() - started < 30  # generous: the point is that it ends, not how fast


def test_the_user_turn_is_an_agents_input_only_where_that_agent_ran_the_model_call():
    prompt = "Current Task: A traveller asks: What's the weather in Lisbon?\nAnswer in one sentence."
    chat = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
        [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}])}
    agent = span("crew.kickoff", {"acme.span.kind": "agent", "acme.input": "What's the weather in Lisbon?"},
                 sid="01" * 8)
    model = span("chat m", chat, sid="02" * 8, parent="01" * 8, start=2)
    session = build_session([agent, model])
    assert session is not None
    assert [m["parts"][0]["content"] for m in session.messages if m["role"] == "user"] == [
        "What's the weather in Lisbon?"]
    assert any("is the agent's input" in w for w in session.warnings)

    # a step beside the model call (a tool node, a chain) whose input happens to be inside the prompt: no evidence
    beside = span("tools.chain", {"acme.span.kind": "chain", "acme.input": "Lisbon"}, sid="03" * 8, start=3)
    session = build_session([beside, span("chat m", chat, sid="02" * 8, start=2)])
    assert session is not None
    assert [m["parts"][0]["content"] for m in session.messages if m["role"] == "user"] == [prompt]


def test_a_model_call_that_encloses_another_is_the_same_evidence():
    msgs = json.dumps([{"role": "user", "content": "hi there"}])
    out = json.dumps([{"role": "assistant", "content": "hello"}])
    outer = span("sdk.generateText", {"acme.model.id": "m", "acme.usage.input_tokens": 3, "acme.prompt.messages": msgs,
                                      "acme.response.messages": out}, sid="01" * 8)
    inner = span("sdk.generateText.doGenerate", {"acme.model.id": "m", "acme.usage.input_tokens": 3,
                                                 "acme.prompt.messages": msgs, "acme.response.messages": out},
                 sid="02" * 8, parent="01" * 8, start=2)
    session = build_session([outer, inner])
    assert session is not None
    assert [c.span_id for c in session.llm_calls] == ["02" * 8]
    assert isinstance(shape.extract(outer)[0], LLMCall)


def test_an_untyped_content_block_beside_the_answer_text_is_kept_not_fatal():
    record = span("chat m", {"acme.output.messages": '[{"role": "assistant", "content": [{"weird": 1}]}]',
                             "acme.response.text": "hi"})
    [call] = shape.extract(record)
    assert call.output_messages[0]["parts"] == [{"type": "text", "content": "hi"}]
    assert {"weird": 1} in call.output_messages[1]["parts"]


def _texts(session) -> list[tuple]:
    return [(m["role"], tuple((p["type"], p.get("name") or p.get("content") or p.get("response"))
                              for p in m["parts"])) for m in session.messages]


def test_parallel_calls_as_separate_items_and_as_one_message_are_one_turn():
    """One response's two calls: one message in its output, two items in the next request's history (the
    Responses API): the same turn, kept once."""
    ask = {"role": "user", "content": "Oslo or Nairobi?"}
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "w", "arguments": json.dumps({"city": c})}}
             for i, c in enumerate(("Oslo", "Nairobi"))]
    first = span("chat m", {"acme.span.kind": "llm", "acme.input.messages": json.dumps([ask]),
                            "acme.output.messages": json.dumps([{"role": "assistant", "tool_calls": calls}])})
    history = [ask, *({"role": "assistant", "tool_calls": [c]} for c in calls),
               *({"role": "tool", "tool_call_id": c["id"], "content": "{}"} for c in calls)]
    second = span("chat m", {"acme.span.kind": "llm", "acme.input.messages": json.dumps(history),
                             "acme.output.messages": json.dumps([{"role": "assistant", "content": "Nairobi."}])},
                  sid="02" * 8, start=20)
    session = build_session([first, second])
    assert [role for role, _ in _texts(session)] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [p["name"] for p in session.messages[1]["parts"]] == ["w", "w"]


def test_a_legacy_function_call_beside_empty_output_parts_is_the_call_and_takes_the_next_views_id():
    ask = [{"role": "user", "parts": [{"type": "text", "content": "Lisbon?"}]}]
    first = span("litellm_request", {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(ask),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": []}]),
        "gen_ai.completion.0.function_call.name": "w", "gen_ai.completion.0.function_call.arguments": '{"c": 1}'})
    history = [*ask, {"role": "assistant", "parts": [], "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "w", "arguments": '{"c": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "parts": [{"type": "text", "content": '{"t": 21}'}]}]
    second = span("litellm_request", {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(history),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "21."}]}])},
        sid="02" * 8, start=20)
    from wt_otel.ingest import dialects
    dialects.switch_off("all")
    try:
        session = build_session([first, second])
    finally:
        dialects.switch_off("")
    call, result = session.messages[1]["parts"][0], session.messages[2]["parts"][0]
    assert (call["name"], call["arguments"], call["id"]) == ("w", {"c": 1}, "call_9")
    assert result["id"] == "call_9" and result["response"] == {"t": 21}
    assert not any(p.get("type") == "text" and "c" in str(p.get("content")) for p in session.messages[1]["parts"])


def test_message_events_whose_bodies_are_json_text_are_read():
    """Semantic Kernel logs each message as a log record whose body is the message as JSON text."""
    events = [Event("", 1, {"event.name": "gen_ai.user.message"}, json.dumps({"role": "user", "content": "Hi?"})),
              Event("", 2, {"event.name": "gen_ai.tool.message"},
                    json.dumps({"role": "tool", "id": "t1", "content": '{"ok": true}'})),
              Event("", 3, {"event.name": "gen_ai.choice"},
                    json.dumps({"index": 0, "message": {"role": "assistant", "content": "Done."}}))]
    session = build_session([span("chat m", {"gen_ai.operation.name": "chat"}, events=events)])
    assert _texts(session) == [("user", (("text", "Hi?"),)), ("tool", (("tool_call_response", {"ok": True}),)),
                               ("assistant", (("text", "Done."),))]


def test_a_choice_event_whose_message_is_its_content_blocks_is_the_answer():
    events = [Event("gen_ai.user.message", 1, {"content": '[{"text": "Hi?"}]'}),
              Event("gen_ai.choice", 2, {"finish_reason": "end_turn", "message": '[{"text": "Hello."}]'})]
    [call] = shape.extract(span("chat", {"acme.span.kind": "llm"}, events=events))
    assert [p["content"] for m in call.output_messages for p in m["parts"]] == ["Hello."]


def test_a_model_call_that_ran_its_own_tool_loop_gets_its_tool_spans_between_ask_and_answer():
    """One span per user turn around an SDK's automatic function calling: the calls are only the tool spans
    under it; a tool span inside another of the same call (re-wrapped function) counts once."""
    turn = span("generate_content m", {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Oslo?"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "3."}]}])},
        sid="01" * 8, start=1)
    turn.end_ns = 100
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "w",
            "gen_ai.tool.call.arguments": '{"city": "Oslo"}', "gen_ai.tool.call.result": '{"t": 3}'}
    outer = span("execute_tool w", tool, sid="02" * 8, parent="01" * 8, start=10)
    inner = span("execute_tool w", tool, sid="03" * 8, parent="02" * 8, start=11)
    session = build_session([turn, outer, inner])
    assert _texts(session) == [("user", (("text", "Oslo?"),)), ("assistant", (("tool_call", "w"),)),
                               ("tool", (("tool_call_response", {"t": 3}),)), ("assistant", (("text", "3."),))]
    assert len(session.witnessed_calls) == 1


def test_a_message_spread_over_dotted_event_keys_is_one_message_and_type_names_are_not_content():
    """LlamaIndex: an end event's `response.message.{role, blocks, ...}` is the model's message; a step's
    `input_event: "AgentSetup"` is a class name, and a tool step with only an object repr is no call."""
    end = Event("LLMChatEndEvent", 2, {
        "messages": json.dumps([{"role": "user", "blocks": [{"block_type": "text", "text": "Lisbon?"}]}]),
        "response.message.role": "assistant",
        "response.message.blocks": json.dumps([{"block_type": "text", "text": "Sunny."}]),
        "response.raw.model": "m", "response.raw.usage.total_tokens": 9})
    step = {"acme.step.input_event": "AgentSetup"}
    [call] = shape.extract(span("OpenAI.achat", step, events=[end]))
    assert isinstance(call, LLMCall) and not call.is_transcript
    assert [(m["role"], p["content"]) for m in call.output_messages for p in m["parts"]] == [("assistant", "Sunny.")]
    assert shape.extract(span("Workflow.run_agent_step", step)) == []
    assert shape.extract(span("Workflow.call_tool", {"acme.step.input_event": "ToolCall",
                                                     "acme.step.output": "ToolCallResult(tool_name='w', ..."})) == []


def test_a_history_that_reprs_earlier_calls_is_the_same_history():
    """CrewAI's later requests repeat earlier tool rounds as `repr`s: the name in quotes, the JSON arguments
    quoted once more; the tool span's result a JSON-quoted repr of the returned dict."""
    from wt_otel.ingest.messages import read_messages, tool_result

    [msg] = read_messages([{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "'get_weather'",
                                                             "arguments": "'{\"city\": \"Oslo\"}'"}]}])
    assert msg["parts"][0]["name"] == "get_weather" and msg["parts"][0]["arguments"] == {"city": "Oslo"}
    assert tool_result(json.dumps("{'city': 'Oslo', 'temp_c': 3}")) == {"city": "Oslo", "temp_c": 3}
    [odd] = read_messages([{"role": "assistant", "parts": [{"type": "tool_call", "id": "c2", "name": "'a b'"}]}])
    assert odd["parts"][0]["name"] == "'a b'"  # only an identifier is taken out of its quotes


def test_the_user_turn_is_the_outermost_runs_one_input_value():
    """A crew's kickoff span logs its inputs as one user message of JSON text; the task and agent spans under
    it log the task description filled in from it; the model sees a prompt built from that: the user's words
    are the kickoff's one value."""
    crew = span("execute crew", {"gen_ai.operation.name": "invoke_workflow", "acme.input.messages": json.dumps(
        [{"role": "user", "content": json.dumps({"question": "Lisbon today?"})}])}, sid="01" * 8)
    task = span("execute task", {"gen_ai.operation.name": "invoke_agent", "acme.input.messages": json.dumps(
        [{"role": "user", "content": "A traveller asks: Lisbon today?"}])}, sid="02" * 8, parent="01" * 8, start=2)
    prompt = "Current Task: A traveller asks: Lisbon today?\nAnswer in one sentence."
    model = span("call llm", {"gen_ai.operation.name": "chat",
                              "gen_ai.input.messages": json.dumps([{"role": "user", "content": prompt}]),
                              "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "Sunny."}])},
                 sid="03" * 8, parent="02" * 8, start=3)
    session = build_session([crew, task, model])
    assert [p["content"] for m in session.messages if m["role"] == "user" for p in m["parts"]] == ["Lisbon today?"]
    assert any("agent's input" in w for w in session.warnings)


def test_a_tool_span_that_logs_the_parameter_schema_as_arguments_takes_the_models_arguments():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    model = span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
        [{"role": "user", "content": "Oslo?"}]), "gen_ai.output.messages": json.dumps([{"role": "assistant",
        "tool_calls": [{"id": "c1", "function": {"name": "w", "arguments": '{"city": "Oslo"}'}}]}])})
    tool = span("execute_tool w", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "w",
                                   "gen_ai.tool.call.arguments": json.dumps(schema),
                                   "gen_ai.tool.call.result": '{"t": 3}'}, sid="02" * 8, start=5)
    [ex] = build_session([model, tool]).witnessed_calls
    assert ex.args == {"city": "Oslo"} and ex.result == {"t": 3}


def _dspy_like_turn(question: str, history: str, answer: str, sid: int, start: int) -> list[SpanRecord]:
    """A run whose model speaks a text protocol (DSPy ReAct): templated prompts, no structured tool call; the
    tool spans ran under the run, a no-argument `finish` marks its end."""
    sids = [f"{sid:02x}{i:02x}" * 4 for i in range(4)]
    run = span("ReAct.forward", {"openinference.span.kind": "CHAIN", "input.value": json.dumps(
        {"input_args": {"question": question, "history": history}}), "output.value": json.dumps(
        {"trajectory": {"thought_0": "look it up"}, "reasoning": "it is known", "answer": answer})},
        sid=sids[0], start=start)
    run.end_ns = start + 100
    lm = span("LM.__call__", {"openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
                              "llm.input_messages.0.message.content": f"[[ ## question ## ]]\n{question}",
                              "llm.output_messages.0.message.role": "assistant",
                              "llm.output_messages.0.message.content": "[[ ## next_tool_name ## ]]\nw"},
              sid=sids[1], parent=sids[0], start=start + 1)
    tool = span("w.__call__", {"openinference.span.kind": "TOOL", "input.value": json.dumps({"kwargs": {"c": 1}}),
                               "output.value": json.dumps({"t": 3})}, sid=sids[2], parent=sids[0], start=start + 20)
    finish = span("finish.__call__", {"openinference.span.kind": "TOOL", "input.value": json.dumps({"kwargs": {}}),
                                      "output.value": "Completed."}, sid=sids[3], parent=sids[0], start=start + 40)
    return [run, lm, tool, finish]


def test_a_text_protocol_run_is_its_ask_its_tool_spans_and_its_answer():
    session = build_session(_dspy_like_turn("Oslo?", "messages=[]", "3 degrees.", 1, 1))
    assert _texts(session) == [("user", (("text", "Oslo?"),)), ("assistant", (("tool_call", "w"),)),
                               ("tool", (("tool_call_response", {"t": 3}),)), ("assistant", (("text", "3 degrees."),))]
    assert [ex.tool_name for ex in session.witnessed_calls] == ["w"]
    assert any("text protocol" in w for w in session.warnings) and any("'finish'" in w for w in session.warnings)


def test_a_runs_history_beside_its_ask_is_the_conversation_so_far():
    assert shape.run_history({"input_args": {"question": "q2", "history": "messages=[{'question': 'q1', "
                                                                         "'answer': 'a1'}]"}}) == [
        {"role": "user", "parts": [{"type": "text", "content": "q1"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "a1"}]}]
    assert shape.run_history({"question": "q", "history": [{"role": "user", "content": "hi"}]})[0]["role"] == "user"
    assert shape.run_history({"question": "q", "history": "messages=[]"}) == []
    assert shape.run_history({"question": "q", "history": [{"x": 1, "y": 2}]}) == []  # not ask/answer records
    assert shape.run_history({"question": "q", "history": "messages=[{'question': "}) == []  # cut short
    assert shape.run_history({"question": "q", "history": "messages=__import__('os')"}) == []  # never evaluated
    assert shape.plain_text({"trajectory": {"t": "x"}, "reasoning": "r", "answer": "the answer"}) == "the answer"


def test_a_text_protocol_conversation_continued_in_another_trace_is_one_session():
    from wt_otel.ingest.joins import merge_continuations

    first = build_session(_dspy_like_turn("Lisbon?", "messages=[]", "Sunny.", 1, 1))
    second_spans = _dspy_like_turn("And in F?", "messages=[{'question': 'Lisbon?', 'answer': 'Sunny.'}]",
                                   "70 F.", 2, 1000)
    for s in second_spans:
        s.trace_id = "0b" * 16
    second = build_session(second_spans)
    [joined] = merge_continuations([first, second])
    assert [m["parts"][0]["content"] for m in joined.messages if m["role"] == "user"] == ["Lisbon?", "And in F?"]


def test_concurrent_calls_of_one_tool_pair_with_their_spans_by_arguments_not_order():
    """Two calls of one tool in one response, run concurrently: the tool spans (no call id) end in either
    order; each pairs with the call that has its arguments."""
    calls = [{"id": f"c{i}", "function": {"name": "w", "arguments": json.dumps({"city": c})}}
             for i, c in enumerate(("Oslo", "Nairobi"))]
    model = span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
        [{"role": "user", "content": "Oslo or Nairobi?"}]), "gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "tool_calls": calls}])})
    tools = [span("execute_tool w", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "w",
                                     "gen_ai.tool.call.arguments": json.dumps({"city": c}),
                                     "gen_ai.tool.call.result": json.dumps({"t": t})}, sid=sid, start=start)
             for c, t, sid, start in (("Nairobi", 24, "02" * 8, 5), ("Oslo", 3, "03" * 8, 6))]
    session = build_session([model, *tools])
    assert {ex.tool_call_id: ex.args["city"] for ex in session.witnessed_calls} == {"c0": "Oslo", "c1": "Nairobi"}


def test_a_tool_named_with_a_lone_surrogate_gets_an_id_not_an_encoding_error():
    """Found by the long fuzz profile: a tool span's name is trace text, a cut emoji included."""
    turn = span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
        [{"role": "user", "content": "hi"}]), "gen_ai.output.messages": json.dumps(
        [{"role": "assistant", "content": "done"}])})
    turn.end_ns = 100
    tool = span("\ud800", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.arguments": "{}",
                           "gen_ai.tool.call.result": "1"}, sid="02" * 8, parent="01" * 8, start=5)
    session = build_session([turn, tool])
    [call] = [p for m in session.messages for p in m["parts"] if p["type"] == "tool_call"]
    assert call["id"].startswith("call_wt_")


def test_a_text_protocol_without_a_run_that_logs_its_ask_and_answer_is_said_not_guessed():
    _, lm, tool, finish = _dspy_like_turn("Oslo?", "messages=[]", "3 degrees.", 1, 1)
    session = build_session([lm, tool, finish])
    assert any("no run span logs both its ask and its answer" in w for w in session.warnings)
    assert [m["role"] for m in session.messages] == ["user", "assistant"]  # the templates, as logged


def test_flattened_keys_are_found_per_key_as_by_the_pattern():
    for key in ("llm.input_messages.0.message.role", "a.12", "a.1b.2", "x.y", "a.01.b", "plain", "v1.2.3", "a..0"):
        m = shape._FLAT_INDEX.search(key)
        assert shape._flat_index(key) == (-1 if m is None else m.start()), key


def test_a_span_with_nothing_to_read_is_not_classified(monkeypatch):
    """Neither content attributes nor messages in its events: no reader could take anything, so the span's
    role (a walk over its keys and name) is not asked for; a span whose events hold a message still is."""
    def no_role(_span):
        raise AssertionError("span_role asked of a span with nothing to read")

    monkeypatch.setattr(shape, "span_role", no_role)
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "conv-1"}
    assert shape.extract(span("invoke_agent x", agent)) == []
    assert shape.extract(span("execute_tool lookup", {"gen_ai.operation.name": "execute_tool"})) == []
    # events that hold no message and no field (an exception, say) give nothing to read either
    assert shape.extract(span("invoke_agent x", agent, events=[Event(name="exception", attributes={"n": 1})])) == []
    with pytest.raises(AssertionError, match="span_role"):
        shape.extract(span("execute_tool lookup", {}, events=[Event(name="gen_ai.choice", body={"content": "r"})]))
