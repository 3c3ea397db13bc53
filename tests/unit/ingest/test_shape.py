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
