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
