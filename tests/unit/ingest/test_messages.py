"""The message-shape layer: each producer encoding -> the same parts-model messages."""

from __future__ import annotations

import json

import pytest

from wt_otel.ingest.messages import _recent, looks_serialized, parse_literal, read_messages, tool_arguments, tool_result

CALL = {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"q": "x"}}
RESULT = {"type": "tool_call_response", "id": "c1", "response": {"ok": 1}}
EXPECTED = [
    {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
    {"role": "assistant", "parts": [CALL]},
    {"role": "tool", "parts": [RESULT]},
    {"role": "assistant", "parts": [{"type": "text", "content": "done"}]},
]

ENCODINGS = {
    "openai-chat": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": 1}'},
        {"role": "assistant", "content": "done"},
    ],
    "openai-responses": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "x"}', "id": "fc_1"},
        {"type": "function_call_output", "call_id": "c1", "output": '{"ok": 1}'},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done",
                                                               "annotations": []}]},
    ],
    "anthropic": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "lookup", "input": {"q": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                      "content": [{"type": "text", "text": '{"ok": 1}'}]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ],
    "converse-strands": [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": "c1", "name": "lookup", "input": {"q": "x"}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": "c1", "status": "success",
                                                     "content": [{"text": '{"ok": 1}'}]}}]},
        {"role": "assistant", "content": [{"text": "done"}]},
    ],
    "gemini": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"function_call": {"id": "c1", "name": "lookup", "args": {"q": "x"}}}]},
        {"role": "user", "parts": [{"function_response": {"id": "c1", "name": "lookup",
                                                          "response": {"result": {"ok": 1}}}}]},
        {"role": "model", "parts": [{"text": "done"}]},
    ],
    "langchain-lc": [
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "HumanMessage"],
         "kwargs": {"content": "hi", "type": "human"}},
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"],
         "kwargs": {"content": "", "tool_calls": [{"name": "lookup", "args": {"q": "x"}, "id": "c1",
                                                   "type": "tool_call"}]}},
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
         "kwargs": {"content": '{"ok": 1}', "tool_call_id": "c1", "name": "lookup"}},
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"],
         "kwargs": {"content": "done"}},
    ],
    "langchain-dict": [
        {"type": "human", "data": {"content": "hi"}},
        {"type": "ai", "data": {"content": "", "tool_calls": [{"name": "lookup", "args": {"q": "x"}, "id": "c1"}]}},
        {"type": "tool", "data": {"content": '{"ok": 1}', "tool_call_id": "c1"}},
        {"type": "ai", "data": {"content": "done"}},
    ],
    "vercel-ai-sdk": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "c1", "toolName": "lookup",
                                           "input": {"q": "x"}}]},
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "lookup",
                                      "output": {"type": "json", "value": {"ok": 1}}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ],
    "genai-parts": [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "lookup", "arguments": '{"q":"x"}'}]},
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1", "result": [{"text": '{"ok": 1}'}]}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "done"}]},
    ],
}


def _strip(messages):
    for m in messages:
        for p in m["parts"]:
            p.pop("name", None) if p["type"] == "tool_call_response" else None
    return messages


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_encoding_reads_to_the_same_parts(encoding):
    assert _strip(read_messages(ENCODINGS[encoding])) == EXPECTED


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_json_text_reads_like_data(encoding):
    assert _strip(read_messages(json.dumps(ENCODINGS[encoding]))) == EXPECTED


def test_containers_and_plain_text():
    assert read_messages({"messages": [[ENCODINGS["langchain-lc"][0]]]}) == EXPECTED[:1]
    assert read_messages("hi") == EXPECTED[:1]
    assert read_messages("done", default_role="assistant") == EXPECTED[3:]
    assert read_messages({"choices": [{"message": {"role": "assistant", "content": "done"}}]}) == EXPECTED[3:]


def test_python_repr_of_sdk_objects_is_recovered_without_eval():
    text = ("ResponseFunctionToolCall(arguments='{\"q\": \"x\"}', call_id='c1', name='lookup', "
            "type='function_call', id='__fake_id__', status=None)")
    assert read_messages([{"role": "assistant", "content": text}]) == [EXPECTED[1]]
    msg = repr({"id": "__fake_id__", "content": [{"annotations": [], "text": "done", "type": "output_text"}],
                "role": "assistant", "status": "completed", "type": "message"})
    assert read_messages([{"role": "assistant", "content": msg}]) == EXPECTED[3:]
    assert parse_literal("__import__('os').system('true')") == ("__import__('os').system('true')", False)
    assert parse_literal("Foo(1, x=2)")[1] is False


def test_unrecoverable_repr_stays_text_and_is_recognised():
    text = "<openai.types.Thing object at 0x7f>"
    [m] = read_messages([{"role": "assistant", "content": "Thing(x=Other(1))"}])
    assert m["parts"][0]["type"] == "text"
    assert looks_serialized("Thing(x=Other(1))") and looks_serialized("{'a': 1}")
    assert not looks_serialized("The email is ops@example.com") and not looks_serialized(text[:5])


@pytest.mark.parametrize("wrapped", [
    [{"type": "text", "text": '{"ok": 1}'}],
    [{"text": '{"ok": 1}'}],
    [{"json": {"ok": 1}}],
    {"type": "json", "value": {"ok": 1}},
    {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
     "kwargs": {"content": '{"ok": 1}', "tool_call_id": "c1"}},
    {"type": "tool", "data": {"content": '{"ok": 1}', "tool_call_id": "c1"}},
    json.dumps({"type": "tool", "data": {"content": "{'ok': 1}"}}),
    {"content": [{"type": "text", "text": '{"ok": 1}'}], "isError": False},
    "{'ok': 1}",
    {"output": {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
                "kwargs": {"content": '{"ok": 1}', "tool_call_id": "c1"}}, "kwargs": {"name": "lookup"}},
])
def test_tool_results_are_unwrapped(wrapped):
    assert tool_result(wrapped) == {"ok": 1}


def test_plain_results_stay_as_sent():
    assert tool_result("42 degrees") == "42 degrees"
    assert tool_result({"output": 1}) == {"output": 1}
    assert tool_result([1, 2]) == [1, 2]


@pytest.mark.parametrize("raw", [
    '{"q": "x"}', {"q": "x"}, "{'q': 'x'}", {"_raw_arguments": '{"q": "x"}'},
    json.dumps({"input_str": "{'q': 'x'}", "tags": [], "metadata": {}, "inputs": {"q": "x"}}),
    {"input_str": "{'q': 'x'}", "tags": None, "metadata": None},
])
def test_tool_arguments_are_unwrapped(raw):
    assert tool_arguments(raw) == ({"q": "x"}, True)


def test_undecodable_arguments_stay_a_string():
    assert tool_arguments("not json") == ("not json", False)
    assert tool_arguments(None) == ({}, True)


def test_a_growing_history_decodes_like_a_fresh_one():
    """The memo reuses an earlier view's head: the result must equal reading the text cold."""
    long = [{"role": "user", "content": "x" * 300}] + ENCODINGS["openai-chat"]
    shorter, longer = json.dumps(long[:3]), json.dumps(long)
    _recent.clear()
    cold = read_messages(longer)
    _recent.clear()
    read_messages(shorter)
    assert read_messages(longer) == cold
    assert read_messages(json.dumps(long[:3])[:-1] + ', {"role": "user"}]')[-1] == cold[2]
    bad = longer[:-1] + ", garbage]"  # extends a seen head, but is not JSON: plain text, as when cold
    assert read_messages(bad) == [{"role": "user", "parts": [{"type": "text", "content": bad}]}]


def test_the_views_memo_finds_what_a_walk_over_every_view_finds():
    """`_Views.extended` (bucketed by role and head) picks the view the linear walk over all views, most
    recently used first, would pick: across roles, shared heads, several candidates, hits and evictions."""
    import random

    from wt_otel.ingest import messages

    rng = random.Random(7)
    walk: list[tuple[tuple[str, str], int]] = []  # (key, stamp): every view, as the walk saw them

    def walked(text: str, role: str) -> int | None:
        """The length of the view the walk picks (the most recently used one `text` continues)."""
        matches = [(stamp, len(seen)) for (r, seen), stamp in walk if r == role and len(seen) < len(text)
                   and text[len(seen) - 1] == "," and text.startswith(seen[:-1])]
        return max(matches)[1] if matches else None

    views = messages._Views()
    stamp = 0
    prefixes = ["[" + "a" * 200, "[" + "a" * 120 + "b" * 80, "[" + "c" * 300]
    for _ in range(3000):
        role = rng.choice(["user", "assistant"])
        text = rng.choice(prefixes) + "".join(f', "{rng.randint(0, 3)}"' for _ in range(rng.randint(0, 4))) + "]"
        found = views.extended(text, role)
        assert (None if found is None else found[1]) == walked(text, role), text
        key = (role, text)
        stamp += 1
        if views.get(key) is not None:
            walk = [(k, stamp if k == key else s) for k, s in walk]
            continue
        views.add(key, [{"role": role, "parts": []}])
        walk.append((key, stamp))
        if len(walk) > messages._RECENT_SIZE:
            walk.remove(min(walk, key=lambda ks: ks[1]))
        assert len(views) == len(walk)


def test_memoized_results_are_copies():
    first = read_messages(ENCODINGS["openai-chat"])
    first[1]["parts"][0]["id"] = "changed"
    assert read_messages(ENCODINGS["openai-chat"])[1]["parts"][0]["id"] == "c1"


def test_hostile_input_does_not_explode():
    deep = "[" * 5000 + "]" * 5000
    assert read_messages(deep) in ([], [{"role": "user", "parts": [{"type": "text", "content": deep}]}])
    assert tool_result("(" * 3000) == "(" * 3000


def test_llamaindex_chat_message_reprs_with_enum_members():
    text = ("ChatMessage(role=<MessageRole.ASSISTANT: 'assistant'>, additional_kwargs={'tool_calls': "
            "[ChoiceDeltaToolCall(index=0, id='c1', function=ChoiceDeltaToolCallFunction(arguments='{\"q\": \"x\"}', "
            "name='lookup'), type='function')]}, blocks=[])")
    assert read_messages([text], "assistant") == [EXPECTED[1]]
    tool = ("ChatMessage(role=<MessageRole.TOOL: 'tool'>, additional_kwargs={'tool_call_id': 'c1'}, "
            "blocks=[TextBlock(block_type='text', text=\"{'ok': 1}\")])")
    assert _strip(read_messages([tool])) == [EXPECTED[2]]


def test_finish_reasons_are_read_whether_the_key_is_escaped_or_not():
    """fill_call decodes the output text a second time only when it can name a finish_reason: a key written
    with a JSON escape still counts, a text that never names one reads as none."""
    from wt_otel.ingest.dialects.semconv import fill_call
    from wt_otel.model.session import LLMCall

    def reasons(output: str) -> list[str]:
        call = LLMCall(span_id="s", trace_id="t", dialect="semconv")
        fill_call(call, {"gen_ai.input.messages": "[]", "gen_ai.output.messages": output})
        return call.finish_reasons

    plain = [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "stop"}]
    assert reasons(json.dumps(plain)) == ["stop"]
    assert reasons(json.dumps(plain).replace("finish_reason", "finish\\u005freason")) == ["stop"]
    assert reasons(json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "no reason"}]}])) == []
    assert reasons(json.dumps([{**plain[0], "finish_reason": "len\\u0067th"}])) == ["len\\u0067th"]


def test_a_result_without_wrapper_keys_is_kept_as_is_and_every_wrapper_still_unwraps():
    """`tool_result` and the parts fast path skip the wrapper checks for a dict with none of their keys: for
    every dict, that shortcut says what the checks say."""
    from itertools import combinations

    from wt_otel.ingest.messages import _NONE, _WRAPPER_KEYS, _result_wrapper, _wrapped
    from wt_otel.model.parts import unwrap_mcp

    keys = sorted(_WRAPPER_KEYS) + ["data", "kwargs", "value", "text", "answer", "id", "tool_name"]
    values = [1, "text", {"type": "text", "text": "x"}, [{"type": "text", "text": "x"}], {"lc": 1}, "tool_result"]
    for n in (1, 2, 3):
        for chosen in combinations(keys, n):
            for value in values:
                d = dict.fromkeys(chosen, value)
                if "lc" in d:
                    d.update(lc=1, id=["x", "ToolMessage"], kwargs={"content": "r"})
                assert _outcome(_wrapped, d) == _outcome(
                    lambda x: _result_wrapper(x) is not _NONE or unwrap_mcp(x) is not x, d), d
                if d.keys().isdisjoint(_WRAPPER_KEYS):
                    assert tool_result(d) is d, d
    assert tool_result({"content": [{"type": "text", "text": '{"ok": 1}'}], "isError": False}) == {"ok": 1}
    assert tool_result({"answer": "result 1-0"}) == {"answer": "result 1-0"}


def _outcome(check, d):
    """What a check says of `d`, or the error it raises (an unhashable `type` makes the wrapper checks raise)."""
    try:
        return check(d)
    except TypeError as e:
        return type(e)
