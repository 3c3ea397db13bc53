"""Hypothesis strategies for hostile trace content (issue 13's fuzzing suite), and the case counter."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import strategies as st

from wt_otel.model.spans import Event, LogRecord, SpanRecord

CASES: Counter[str] = Counter()


def count(name: str) -> None:
    """Called once per generated case by every property (the fuzz conftest prints the totals)."""
    CASES[name] += 1


# -- scalars: huge and negative numbers, surrogates, control characters, enormous strings

huge_ints = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(min_value=2**64, max_value=10**40), st.integers(min_value=-(10**40), max_value=-(2**63) - 1),
    st.sampled_from([2**64, -(2**63) - 1, 10**400, -(10**400), 12345678901234567890123]),
)
odd_floats = st.floats(allow_nan=True, allow_infinity=True)
surrogate_text = st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=4)
control_text = st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=20)
hostile_text = st.one_of(
    st.text(max_size=40), control_text, surrogate_text,
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=8), surrogate_text, st.text(max_size=8)),
    st.sampled_from(["../../etc/passwd", "a/b\\c", "\x00", "{{7*7}}", "${jndi:x}", "'; DROP TABLE x; --", "..",
                     "CON", "\u202e", "\ufeff"]),
    st.integers(min_value=10_000, max_value=200_000).map(lambda n: "x" * n),  # enormous
)
scalars = st.one_of(st.none(), st.booleans(), huge_ints, odd_floats, hostile_text)


def deep(depth: int, leaf: Any = 1) -> Any:
    """`leaf` nested `depth` levels deep in alternating lists and objects, built without recursion."""
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


deep_values = st.integers(min_value=200, max_value=1500).map(deep)
json_values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                          st.dictionaries(hostile_text, kids, max_size=4)),
                           max_leaves=12)
hostile_values = st.one_of(json_values, deep_values)


def _json_text(value: Any) -> str:
    """The value as JSON text, as a producer would put it in a string attribute (ints kept exact)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (ValueError, RecursionError):
        return str(value)


# values in attributes: whatever OTLP could carry plus what a lax JSON producer sends, and JSON text of them
attribute_values = st.one_of(hostile_values, hostile_values.map(_json_text))

GENAI_KEYS = ["gen_ai.operation.name", "gen_ai.request.model", "gen_ai.provider.name", "gen_ai.input.messages",
              "gen_ai.output.messages", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.call.arguments",
              "gen_ai.tool.call.result", "gen_ai.conversation.id", "gen_ai.system_instructions",
              "gen_ai.tool.definitions", "llm.input_messages", "input.value", "output.value", "wt.incident",
              "gen_ai.usage.input_tokens", "traceloop.entity.input", "gen_ai.prompt", "gen_ai.completion"]
attribute_dicts = st.dictionaries(st.one_of(st.sampled_from(GENAI_KEYS), hostile_text), attribute_values,
                                  max_size=6)
ops = st.sampled_from(["chat", "execute_tool", "invoke_agent", "text_completion", "embeddings", "x", ""])
hex_ids = st.sampled_from([f"{n:032x}" for n in range(1, 4)])


@st.composite
def span_records(draw: st.DrawFn) -> SpanRecord:
    trace = draw(hex_ids)
    attrs = draw(attribute_dicts)
    attrs.setdefault("gen_ai.operation.name", draw(ops))
    return SpanRecord(trace_id=trace, span_id=f"{draw(st.integers(1, 2**32)):016x}", name=draw(hostile_text)[:200],
                      parent_span_id=draw(st.one_of(st.none(), st.just("00000000000000aa"))),
                      start_ns=draw(st.integers(0, 2**64 - 1)), end_ns=draw(st.integers(0, 2**64 - 1)),
                      attributes=attrs, resource={"service.name": draw(hostile_text)[:100]},
                      events=draw(st.lists(st.builds(Event, name=hostile_text, time_ns=st.integers(0, 2**64 - 1),
                                                     attributes=attribute_dicts), max_size=2)),
                      status_code=draw(st.sampled_from(["UNSET", "OK", "ERROR"])),
                      status_message=draw(hostile_text)[:200])


log_records = st.builds(LogRecord, event_name=st.sampled_from(["gen_ai.user.message", "gen_ai.choice", "x"]),
                        trace_id=hex_ids, span_id=st.just("00000000000000aa"), time_ns=st.integers(0, 2**64 - 1),
                        body=attribute_values, attributes=attribute_dicts)
record_lists = st.lists(st.one_of(span_records(), span_records(), log_records), min_size=1, max_size=6)


# -- OTLP/JSON documents: valid structure with hostile leaves, and structure gone wrong

def _any_value(value: Any) -> Any:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _any_value(v)} for k, v in value.items()]}}
    return {}


@st.composite
def otlp_json_documents(draw: st.DrawFn) -> Any:
    spans = []
    for record in draw(st.lists(span_records(), min_size=1, max_size=3)):
        attrs = record.attributes
        if any(isinstance(v, dict | list) and _depth(v) > 60 for v in attrs.values()):
            attrs = {k: v for k, v in attrs.items() if not (isinstance(v, dict | list) and _depth(v) > 60)}
        spans.append({"traceId": record.trace_id, "spanId": record.span_id, "name": record.name,
                      "startTimeUnixNano": draw(st.one_of(st.just(str(record.start_ns)), huge_ints.map(str),
                                                          huge_ints, hostile_text)),
                      "endTimeUnixNano": str(record.end_ns), "kind": draw(st.one_of(st.integers(-5, 10), hostile_text)),
                      "attributes": [{"key": k, "value": _any_value(v)} for k, v in attrs.items()]})
    doc: Any = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]}
    mutate = draw(st.integers(0, 5))
    if mutate == 1:
        doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"] = draw(json_values)
    elif mutate == 2:
        doc["resourceSpans"] = draw(json_values)
    elif mutate == 3:
        doc = draw(json_values)
    return doc


def _depth(value: Any) -> int:
    depth, level = 0, [value]
    while level:
        depth += 1
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                nxt.extend(v.values())
            elif isinstance(v, list):
                nxt.extend(v)
        level = nxt
    return depth


# -- real GenAI sessions with hostile values put where the dialects look

def _message(value: Any, role: Any) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": value},
                                    {"type": "tool_call", "id": "c1", "name": "weather", "arguments": value}]}


@st.composite
def hostile_sessions(draw: st.DrawFn) -> list[Any]:
    """`support.hostile.genai_session` (a session every dialect path builds) with 1-4 values replaced."""
    from tests.support.hostile import genai_session

    spans = genai_session(f"{draw(st.integers(1, 3)):032x}",
                          conversation=draw(st.one_of(st.none(), hostile_text.map(lambda t: t[:50] or "c"))))
    for _ in range(draw(st.integers(1, 4))):
        span = spans[draw(st.integers(0, len(spans) - 1))]
        key = draw(st.sampled_from(sorted(span.attributes) + GENAI_KEYS))
        value = draw(hostile_values)
        kind = draw(st.integers(0, 3))
        if kind == 0:
            span.attributes[key] = value
        elif kind == 1:
            span.attributes[key] = _json_text(value)
        elif kind == 2:  # a message list whose content / arguments are hostile
            span.attributes[key] = _json_text([_message(value, draw(st.one_of(st.just("user"), scalars)))])
        else:
            span.attributes[key] = _json_text({"args": value})
    return spans
