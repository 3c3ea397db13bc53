"""The rotel processor's logic on stand-ins for rotel's objects (a real rotel: tests/e2e/test_rotel_collector.py).

rotel's object types (`rotel_sdk.*`) exist only inside a running rotel binary, so these tests
use small stand-ins with the shapes rotel documents (mutable lists of KeyValue/AnyValue).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from tests.support.paths import ROOT
from tests.support.rotel_objects import (
    SDK,
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
    LogRecord,
    Resource,
    ResourceLogs,
    ResourceSpans,
    ScopeLogs,
    ScopeSpans,
    Span,
)
from wt_otel.processors import rotel as rp

ROTEL_SH = ROOT / "collector-config" / "rotel.sh"


# -- stand-ins for rotel_sdk objects: tests/support/rotel_objects.py (shared with the key-table test)


def kv(key: str, value: Any) -> KeyValue:
    return KeyValue(key, AnyValue(value))


def tagged(attrs: list) -> bool:
    return any(a.key == rp.TAG_KEY and a.value.value == rp.TAG_VALUE for a in attrs)


def processor(**settings: Any) -> rp.RotelGenAIProcessor:
    return rp.RotelGenAIProcessor(rp.Settings(**settings), sdk=SDK)


T1, T2, T3 = b"\x01" * 16, b"\x02" * 16, b"\x03" * 16


# -- unit tests ---------------------------------------------------------------------------------


def test_genai_spans_and_the_rest_of_their_trace_are_tagged_whatever_the_order():
    http = Span("POST /v1/chat", T1, [kv("http.method", "POST")])
    chat = Span("chat gpt-4o", T1)
    tool = Span("lookup", T1, [kv("gen_ai.tool.name", "lookup")])
    other = Span("GET /health", T2)
    batch = ResourceSpans([ScopeSpans([http, chat, tool, other])])
    p = processor()
    p.process_spans(batch)
    assert [tagged(s.attributes) for s in batch.scope_spans[0].spans] == [True, True, True, False]
    assert p.stats["genai_spans"] == 2 and p.stats["tagged_spans"] == 3 and p.stats["errors"] == 0


def test_a_later_batch_of_a_genai_trace_is_tagged_and_tags_are_not_duplicated():
    p = processor()
    p.process_spans(ResourceSpans([ScopeSpans([Span("invoke_agent triage", T1)])]))
    root = Span("workflow", T1, [kv(rp.TAG_KEY, rp.TAG_VALUE)])
    p.process_spans(ResourceSpans([ScopeSpans([root])]))
    assert [a.key for a in root.attributes] == [rp.TAG_KEY]


def test_non_genai_traces_are_kept_by_default_and_dropped_only_when_configured():
    def batch():
        return ResourceSpans([ScopeSpans([Span("GET /", T2), Span("chat m", T1), Span("db", T2)])])

    kept = batch()
    processor().process_spans(kept)
    assert [s.name for s in kept.scope_spans[0].spans] == ["GET /", "chat m", "db"]

    dropped, p = batch(), processor(drop_non_genai=True)
    p.process_spans(dropped)
    assert [s.name for s in dropped.scope_spans[0].spans] == ["chat m"]
    assert p.stats["dropped_spans"] == 2


@pytest.mark.parametrize("key", ["gen_ai.system", "llm.model_name", "traceloop.entity.name",
                                 "openinference.span.kind", "pydantic_ai.all_messages", "wt.incident"])
def test_genai_is_recognised_by_attribute_key_prefix(key):
    span = Span("anything", T1, [kv(key, "x")])
    processor(drop_non_genai=True).process_spans(b := ResourceSpans([ScopeSpans([span])]))
    assert b.scope_spans[0].spans == [span] and tagged(span.attributes)


def test_the_trace_memory_is_bounded():
    p = processor(max_traces=2, drop_non_genai=True)
    for tid in (T1, T2, T3):
        p.process_spans(ResourceSpans([ScopeSpans([Span("chat m", tid)])]))
    late = ResourceSpans([ScopeSpans([Span("root", T1), Span("root", T3)])])
    p.process_spans(late)
    assert [s.trace_id for s in late.scope_spans[0].spans] == [T3]


class Exploding:
    trace_id = T1

    @property
    def name(self):
        raise RuntimeError("rotel object went away")


def test_an_error_never_escapes_and_never_drops_data():
    spans = [Span("GET /", T2), Exploding()]
    batch = ResourceSpans([ScopeSpans(list(spans))])
    p = processor(drop_non_genai=True)
    p.process_spans(batch)
    p.process_logs(None)
    assert batch.scope_spans[0].spans == spans
    assert p.stats["errors"] == 2
    rp.process_spans(None)  # the module-level hooks swallow even a batch that is not one
    rp.process_logs(object())


def rotel_convert(value: Any) -> Any:
    """What rotel 0.0.1a15 does on the way out: every array, at every level, comes out reversed."""
    if isinstance(value, ArrayValue):
        return [rotel_convert(v.value) for v in reversed(value)]
    if isinstance(value, KeyValueList):
        return {k.key: rotel_convert(k.value.value) for k in value}
    return value


def test_array_order_survives_rotels_reversing_conversion():
    messages = ArrayValue([
        AnyValue(KeyValueList([kv("role", "user"), kv("parts", ArrayValue([AnyValue("a"), AnyValue("b")]))])),
        AnyValue(KeyValueList([kv("role", "assistant")])),
    ])
    span = Span("chat m", T1, [kv("gen_ai.input.messages", messages), kv("n", 1)])
    resource = Resource([kv("process.command_args", ArrayValue([AnyValue("x"), AnyValue("y")]))])
    processor().process_spans(ResourceSpans([ScopeSpans([span])], resource))
    assert rotel_convert(messages) == [{"role": "user", "parts": ["a", "b"]}, {"role": "assistant"}]
    assert rotel_convert(resource.attributes[0].value.value) == ["x", "y"]


def test_array_repair_can_be_switched_off():
    arr = ArrayValue([AnyValue(1), AnyValue(2)])
    processor(fix_array_order=False).process_spans(ResourceSpans([ScopeSpans([Span("chat", T1, [kv("a", arr)])])]))
    assert [v.value for v in arr] == [1, 2]


def test_log_records_follow_the_same_rules():
    body = AnyValue(KeyValueList([kv("tool_calls", ArrayValue([AnyValue("1"), AnyValue("2")]))]))
    choice = LogRecord(T1, "gen_ai.choice", body)
    legacy = LogRecord(T2, "", None, [kv("event.name", "gen_ai.user.message")])
    same_trace = LogRecord(T1, "", AnyValue("app log"))
    plain = LogRecord(T3, "", AnyValue("GET / 200"))
    no_trace = LogRecord(b"", "", AnyValue("startup"))
    batch = ResourceLogs([ScopeLogs([plain, same_trace, choice, legacy, no_trace])])
    p = processor(drop_non_genai=True)
    p.process_logs(batch)
    assert batch.scope_logs[0].log_records == [same_trace, choice, legacy]
    assert all(tagged(r.attributes) for r in batch.scope_logs[0].log_records)
    assert rotel_convert(body.value) == {"tool_calls": ["1", "2"]}
    assert p.stats["dropped_log_records"] == 2 and p.stats["errors"] == 0


def test_a_genai_log_marks_its_trace_for_the_span_hook():
    p = processor(drop_non_genai=True)
    p.process_logs(ResourceLogs([ScopeLogs([LogRecord(T1, "gen_ai.user.message")])]))
    batch = ResourceSpans([ScopeSpans([Span("root", T1)])])
    p.process_spans(batch)
    assert tagged(batch.scope_spans[0].spans[0].attributes)


def test_settings_from_env():
    assert rp.Settings.from_env({}) == rp.Settings()
    s = rp.Settings.from_env({"WT_ROTEL_DROP_NON_GENAI": "true", "WT_ROTEL_MAX_TRACES": "7",
                              "WT_ROTEL_FIX_ARRAY_ORDER": "0"})
    assert s == rp.Settings(drop_non_genai=True, max_traces=7, fix_array_order=False)


def test_the_entry_file_rotel_loads_exports_the_hooks():
    spec = importlib.util.spec_from_file_location("rotel_entry", ROOT / "collector-config" / "rotel_processor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.process_spans is rp.process_spans and module.process_logs is rp.process_logs
