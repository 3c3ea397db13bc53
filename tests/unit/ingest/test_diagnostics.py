"""Which setting turns content capture on, per producer; why a group held no session."""

from __future__ import annotations

import pytest

from wt_otel.ingest.diagnostics import content_setting, conversation_attributes, explain_group
from wt_otel.model.spans import SpanRecord


def span(scope: str = "", name: str = "chat m", **attrs) -> SpanRecord:
    return SpanRecord(trace_id="t" * 32, span_id="s" * 16, name=name, start_ns=0, end_ns=1,
                      attributes=attrs, scope_name=scope)


@pytest.mark.parametrize(("record", "setting"), [
    (span("opentelemetry.instrumentation.openai_v2"), "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
    (span("openinference.instrumentation.langchain", **{"openinference.span.kind": "LLM"}), "OPENINFERENCE_HIDE_"),
    (span("opentelemetry.instrumentation.openai.v1", **{"llm.request.type": "chat"}), "TRACELOOP_TRACE_CONTENT"),
    (span("com.anthropic.sdk.python"), "ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE=content"),
    (span("ai", **{"ai.operationId": "ai.generateText"}), "recordInputs"),
    (span("litellm"), "turn_off_message_logging"),
    (span("pydantic-ai"), "include_content"),
])
def test_the_setting_named_is_the_producers(record: SpanRecord, setting: str):
    assert setting in content_setting(record)


def test_conversation_attributes_skip_metadata():
    s = span(**{"gen_ai.operation.name": "x", "gen_ai.prompt_messages": "[..]", "gen_ai.usage.input_tokens": 3,
                "gen_ai.request.model": "m", "http.url": "/"})
    assert conversation_attributes(s) == ["gen_ai.prompt_messages"]
    assert conversation_attributes(span(**{"http.request.body": "[..]"})) == []


def test_explain_group_ranks_the_most_telling_reason():
    assert explain_group([span(**{"http.method": "GET"})])[0] == 0
    assert explain_group([span(**{"gen_ai.operation.name": "create_agent"})])[0] == 1
    assert explain_group([span(name="x", **{"gen_ai.system": "a", "gen_ai.prompt_messages": "[1]"})])[0] == 2
    rank, why = explain_group([span(**{"gen_ai.operation.name": "chat"})])
    assert rank == 3 and "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in why


@pytest.mark.parametrize("scope", ["opentelemetry.instrumentation.genai.openai",
                                   "opentelemetry.instrumentation.genai.openai_agents",
                                   "opentelemetry.util.genai.handler"])
def test_util_genai_instrumentations_are_not_told_to_set_true(scope: str):
    """opentelemetry-util-genai takes NO_CONTENT / SPAN_ONLY / EVENT_ONLY / SPAN_AND_EVENT and turns capture
    OFF on `true` (it logs "true is not a valid option"): the hint must name a value it takes."""
    setting = content_setting(span(scope))
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY" in setting
    assert "CONTENT=true" not in setting


def test_agent_and_tool_spans_without_a_model_call_say_the_client_is_not_instrumented():
    """genai-openai-agents 1.3b0 without genai-openai records only these three spans (attributes as it emits
    them): the session has a tool call but no ask, no tools offered and no answer, and must say why."""
    from wt_otel.ingest.sessions import build_session

    scope = "opentelemetry.instrumentation.genai.openai_agents"
    workflow = SpanRecord(trace_id="t" * 32, span_id="1" * 16, name="invoke_workflow weather-desk", start_ns=0,
                          end_ns=9, scope_name=scope, attributes={
                              "gen_ai.operation.name": "invoke_workflow", "gen_ai.conversation.id": "conv-1",
                              "gen_ai.workflow.name": "weather-desk"})
    agent = SpanRecord(trace_id="t" * 32, span_id="2" * 16, parent_span_id="1" * 16,
                       name="invoke_agent weather-assistant", start_ns=1, end_ns=8, scope_name=scope, attributes={
                           "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather-assistant",
                           "gen_ai.conversation.id": "conv-1"})
    tool = SpanRecord(trace_id="t" * 32, span_id="3" * 16, parent_span_id="2" * 16, name="execute_tool get_weather",
                      start_ns=2, end_ns=3, scope_name=scope, attributes={
                          "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                          "gen_ai.tool.type": "function", "gen_ai.tool.call.arguments": '{"city":"Lisbon"}',
                          "gen_ai.tool.call.result": '{"city":"Lisbon","temp_c":21}'})
    session = build_session([workflow, agent, tool])
    assert session is not None and session.messages == [] and session.llm_calls == []
    [d] = session.diagnostics
    assert d["kind"] == "no_model_call" and "model client is probably not instrumented" in d["message"]
    assert "'invoke_agent weather-assistant'" in d["message"] and d["message"] in session.warnings
