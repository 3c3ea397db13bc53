"""The trace2test vocabulary: every assertion type passing and failing, matchers, evidence, strict parsing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.tracekit import LOOKUP, make_trace
from wt_otel.contracts.assertions import AssertionSyntaxError, parse_assertions
from wt_otel.model.session import Session, ToolExecution
from wt_otel.scoring.assertions import EVALUATORS, evaluate
from wt_otel.scoring.evidence import from_session, from_trace

ORDER = ("lookup_order", {"order_id": "A-1"}, {"status": "delivered", "amount": 40})
VERIFY = ("verify_identity", {"user": "u1"}, {"verified": True})
UNVERIFIED = ("verify_identity", {"user": "u1"}, {"verified": False})
REFUND = ("refund", {"order_id": "A-1", "amount": 40, "notify": True, "tags": ["vip", "late"]}, "refunded")
GOOD = make_trace(reply="Refunded $40 for order A-1.", calls=[ORDER, VERIFY, REFUND])


def judge(assertion: dict[str, Any], trace=GOOD) -> tuple[bool, str]:
    [(_, result)] = evaluate(parse_assertions([assertion]), from_trace(trace), trace)
    return result.passed, result.detail


# ---------------------------------------------------------------- tool-sequence


@pytest.mark.parametrize(("mode", "tools", "ok"), [
    ("exact", ["lookup_order", "verify_identity", "refund"], True),
    ("exact", ["lookup_order", "refund"], False),
    ("ordered-subsequence", ["lookup_order", "refund"], True),
    ("ordered-subsequence", ["refund", "lookup_order"], False),
    ("contiguous", ["verify_identity", "refund"], True),
    ("contiguous", ["lookup_order", "refund"], False),
])
def test_tool_sequence_modes(mode, tools, ok):
    passed, detail = judge({"type": "tool-sequence", "mode": mode, "tools": tools})
    assert passed is ok
    assert detail.startswith("assertions[0] tool-sequence: ") and "(evidence: 3 server-witnessed call(s))" in detail


def test_tool_sequence_failure_is_readable():
    _, detail = judge({"type": "tool-sequence", "mode": "ordered-subsequence", "tools": ["lookup_order", "escalate"]})
    assert "expected ['lookup_order', 'escalate'], got ['lookup_order', 'verify_identity', 'refund']" in detail
    assert "'escalate' not found after 'lookup_order'" in detail


def test_witnessed_calls_win_over_the_agents_report():
    """The agent claims it verified; the universe never saw it: the witness decides."""
    trace = make_trace(calls=[ORDER, REFUND], reported=[("lookup_order", {}), ("verify_identity", {}), ("refund", {})])
    passed, detail = judge({"type": "tool-sequence", "mode": "exact", "tools": ["lookup_order", "refund"]}, trace)
    assert passed and "server-witnessed" in detail


def test_transcript_calls_are_the_fallback_and_are_named_as_such():
    trace = make_trace(calls=[ORDER, REFUND], witness="unavailable")
    passed, detail = judge({"type": "tool-sequence", "mode": "exact", "tools": ["lookup_order", "refund"]}, trace)
    assert passed and "transcript call(s) (the agent's own account; no server witness was available)" in detail


# ---------------------------------------------------------------- tool-arguments and matchers


def args(matcher: dict[str, Any], **select: Any) -> tuple[bool, str]:
    return judge({"type": "tool-arguments", "tool": "refund", "arguments": matcher, **select})


def test_tool_arguments_object_string_number_boolean_array():
    matcher = {"type": "object", "shape": {
        "order_id": {"type": "string", "regex": "^A-\\d+$", "contains": "A-"},
        "amount": {"type": "number", "min": 1, "max": 100},
        "notify": {"type": "boolean", "equals": True},
        "tags": {"type": "array", "items": {"type": "string"}, "contains": {"type": "literal", "value": "vip"},
                 "length": 2},
        "reason": {"type": "optional", "matcher": {"type": "string"}},
        "memo": {"type": "any"},
    }, "optional": ["memo"]}
    passed, detail = args(matcher)
    assert passed, detail


@pytest.mark.parametrize(("matcher", "reason"), [
    ({"type": "object", "shape": {"amount": {"type": "number", "max": 10}}},
     "arguments.amount: expected a number <= 10, got 40"),
    ({"type": "object", "shape": {"order_id": {"type": "string", "equals": "B-2"}}},
     "arguments.order_id: expected 'B-2', got 'A-1'"),
    ({"type": "object", "shape": {"order_id": {"type": "string", "regex": "^B"}}}, "expected a string matching /^B/"),
    ({"type": "object", "shape": {"notify": {"type": "boolean", "equals": False}}},
     "arguments.notify: expected false, got true"),
    ({"type": "object", "shape": {"tags": {"type": "array", "length": 3}}},
     "arguments.tags: expected 3 item(s), got 2"),
    ({"type": "object", "shape": {"tags": {"type": "array", "contains": {"type": "literal", "value": "gold"}}}},
     "arguments.tags: no item matches"),
    ({"type": "object", "shape": {"tags": {"type": "array", "items": {"type": "number"}}}},
     "arguments.tags[0]: expected a number, got 'vip'"),
    ({"type": "object", "shape": {"memo": {"type": "any"}}}, "arguments.memo: missing (present keys: order_id"),
    ({"type": "literal", "value": {"order_id": "A-1"}}, "arguments: expected exactly"),
    ({"type": "object", "shape": {"amount": {"type": "literal", "value": True}}}, "expected exactly true, got 40"),
])
def test_tool_arguments_mismatches_say_where_and_what(matcher, reason):
    passed, detail = args(matcher)
    assert not passed and "refund call #0: " in detail and reason in detail


def test_tool_arguments_selection_by_which_and_index():
    trace = make_trace(calls=[("search", {"q": "a"}, []), ("search", {"q": "b"}, [])])
    q = {"type": "object", "shape": {"q": {"type": "string", "equals": "b"}}}
    base = {"type": "tool-arguments", "tool": "search", "arguments": q}
    assert not judge(base, trace)[0]  # which: all (the default)
    assert judge({**base, "which": "any"}, trace)[0]
    assert judge({**base, "which": "last"}, trace)[0]
    assert not judge({**base, "which": "first"}, trace)[0]
    assert judge({**base, "index": 1}, trace)[0] and judge({**base, "index": -1}, trace)[0]
    passed, detail = judge({**base, "index": 5}, trace)
    assert not passed and "no 'search' call at index 5 (2 call(s))" in detail
    passed, detail = judge({**base, "tool": "refund"}, trace)
    assert not passed and "no call of 'refund' (calls: ['search', 'search'])" in detail


# ---------------------------------------------------------------- output


def test_output_final_reply_contains_and_not_contains():
    assert judge({"type": "output", "contains": ["refunded", "A-1"], "notContains": "denied"})[0]
    passed, detail = judge({"type": "output", "contains": "denied", "notContains": ["$40"]})
    assert not passed and "the final reply does not contain 'denied'" in detail and "contains '$40'" in detail
    assert judge({"type": "output", "match": {"type": "string", "regex": "\\$40"}})[0]
    assert not judge({"type": "output", "match": {"type": "string", "equals": "ok"}})[0]


def test_output_of_selected_tool_calls():
    shape = {"type": "object", "shape": {"status": {"type": "string", "equals": "delivered"}}}
    assert judge({"type": "output", "tool": "lookup_order", "match": shape, "contains": "delivered"})[0]
    passed, detail = judge({"type": "output", "tool": "lookup_order", "notContains": "delivered"})
    assert not passed and "lookup_order call #0: output contains 'delivered'" in detail
    assert judge({"type": "output", "tool": "refund", "match": {"type": "literal", "value": "refunded"}})[0]


def test_output_of_a_transcript_call_has_no_result_to_check():
    trace = make_trace(calls=[ORDER], witness="unavailable")
    passed, detail = judge({"type": "output", "tool": "lookup_order", "contains": "delivered"}, trace)
    assert not passed and "transcript calls report no results" in detail


# ---------------------------------------------------------------- policy


REQUIRE = {"type": "policy", "rule": "require-prior-tool", "tool": "refund", "requiredTool": "verify_identity",
           "requiredOutput": {"type": "object", "shape": {"verified": {"type": "boolean", "equals": True}}}}


def test_require_prior_tool_with_required_output():
    assert judge(REQUIRE)[0]
    passed, detail = judge(REQUIRE, make_trace(calls=[ORDER, UNVERIFIED, REFUND]))
    assert not passed and "'refund' at position 2" in detail
    assert "no prior 'verify_identity' with a matching output" in detail
    passed, _ = judge(REQUIRE, make_trace(calls=[ORDER, REFUND, VERIFY]))  # verified only afterwards
    assert not passed
    passed, detail = judge(REQUIRE, make_trace(calls=[ORDER]))
    assert passed and "'refund' was not called" in detail


def test_require_prior_tool_without_output_and_on_a_transcript():
    bare = {k: v for k, v in REQUIRE.items() if k != "requiredOutput"}
    assert judge(bare, make_trace(calls=[ORDER, UNVERIFIED, REFUND]))[0]
    passed, detail = judge(REQUIRE, make_trace(calls=[VERIFY, REFUND], witness="unavailable"))
    assert not passed and "the transcript carries no tool results" in detail


def test_forbid_after():
    rule = {"type": "policy", "rule": "forbid-after", "tool": "refund", "afterTool": "cancel_order"}
    cancel = ("cancel_order", {"order_id": "A-1"}, {"cancelled": True})
    assert judge(rule, make_trace(calls=[REFUND, cancel]))[0]
    passed, detail = judge(rule, make_trace(calls=[cancel, ORDER, REFUND]))
    assert not passed and "'refund' at position 2 follows 'cancel_order' at position 0" in detail
    only_if = {**rule, "afterOutput": {"type": "object", "shape": {"cancelled": {"type": "boolean", "equals": False}}}}
    assert judge(only_if, make_trace(calls=[cancel, REFUND]))[0]  # that cancel does not trigger the ban


def test_no_divergence_policy_needs_a_replay():
    rule = {"type": "policy", "rule": "no-divergence"}
    assert judge(rule)[0]
    miss = make_trace(calls=[("refund", {"order_id": "Z"}, {"error": "no_recorded_result"}, "fail_call")])
    passed, detail = judge(rule, miss)
    assert not passed and "matched no recording" in detail
    with pytest.raises(AssertionSyntaxError, match="not in an offline suite"):
        parse_assertions([rule], replay=False)


# ---------------------------------------------------------------- sessions (wt-otel check's evidence)


def session(witnessed: bool) -> Session:
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "Refund A-1"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "lookup_order",
                                         "arguments": {"order_id": "A-1"}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": {"status": "delivered"}}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "It was delivered."}]},
    ]
    calls = [ToolExecution("lookup_order", {"order_id": "A-1"}, {"status": "delivered"}, start_ns=1),
             ToolExecution("refund", {"order_id": "A-1"}, "refunded", start_ns=2)] if witnessed else []
    return Session(key="k", messages=messages, witnessed_calls=calls)


def test_session_views_prefer_witnessed_calls_and_fall_back_to_transcript_results():
    witnessed = from_session(session(True))
    assert witnessed.source == "witnessed" and witnessed.names == ["lookup_order", "refund"]
    transcript = from_session(session(False))
    assert transcript.source == "transcript" and transcript.names == ["lookup_order"]
    assert transcript.calls[0].has_result and transcript.calls[0].result == {"status": "delivered"}
    assert transcript.final_reply == "It was delivered." and transcript.user_turns == ["Refund A-1"]
    [(_, result)] = evaluate(parse_assertions([{"type": "output", "tool": "lookup_order", "contains": "delivered"}]),
                             transcript)
    assert result.passed and "transcript call(s)" in result.detail


# ---------------------------------------------------------------- strict parsing


@pytest.mark.parametrize(("assertion", "message"), [
    ({"type": "tool-sequence", "mode": "exakt", "tools": ["a"]},
     "assertions[0].mode: 'exakt' is not one of exact, ordered-subsequence, contiguous; did you mean 'exact'?"),
    ({"type": "tool_sequence", "mode": "exact", "tools": ["a"]},
     "assertions[0].type: 'tool_sequence' is not one of tool-sequence, tool-arguments, output, policy; "
     "did you mean 'tool-sequence'?"),
    ({"type": "tool-sequence", "mode": "exact", "tools": ["a"], "strict": True},
     "assertions[0].strict: unknown key for a tool-sequence assertion (known: type, mode, tools)"),
    ({"type": "tool-sequence", "mode": "exact", "tools": "a"}, "assertions[0].tools: must be a non-empty list"),
    ({"type": "tool-sequence", "mode": "exact", "tools": ["a", 3]},
     "assertions[0].tools[1]: must be a non-empty string"),
    ({"type": "tool-arguments", "tool": "r"}, "assertions[0].arguments: is required in a tool-arguments assertion"),
    ({"type": "tool-arguments", "tool": "r", "arguments": {"type": "object", "shape": {"a": {"type": "str"}}}},
     "assertions[0].arguments.shape.a.type: 'str' is not one of any, string, number"),
    ({"type": "tool-arguments", "tool": "r", "arguments": {"type": "number", "min": "1"}},
     "assertions[0].arguments.min: must be a number, got string \"1\""),
    ({"type": "tool-arguments", "tool": "r", "arguments": {"type": "string", "regex": "("}},
     "assertions[0].arguments.regex: is not a valid regular expression"),
    ({"type": "tool-arguments", "tool": "r", "which": "every", "arguments": {"type": "any"}},
     "assertions[0].which: 'every' is not one of all, any, first, last"),
    ({"type": "tool-arguments", "tool": "r", "which": "any", "index": 0, "arguments": {"type": "any"}},
     "assertions[0].index: use either index or which, not both"),
    ({"type": "tool-arguments", "tool": "r", "arguments": {"type": "object", "shape": {}, "optional": ["x"]}},
     "assertions[0].arguments.optional[0]: 'x' is not a key of shape"),
    ({"type": "output"}, "assertions[0]: an output assertion needs at least one of contains, notContains, match"),
    ({"type": "output", "which": "first", "contains": "x"}, "assertions[0].which: selects tool calls: name the tool"),
    ({"type": "output", "not_contains": "x"}, "did you mean 'notContains'?"),
    ({"type": "policy", "rule": "require-prior-tool", "tool": "refund", "requiredtool": "verify"},
     "assertions[0].requiredtool: unknown key for a policy assertion (known: type, rule, tool, requiredTool, "
     "requiredOutput); did you mean 'requiredTool'?"),
    ({"type": "policy", "rule": "forbid-before", "tool": "x"},
     "assertions[0].rule: 'forbid-before' is not one of require-prior-tool, forbid-after, no-divergence"),
    ({"type": "policy", "rule": "forbid-after", "tool": "x"}, "assertions[0].afterTool: is required"),
    ("tool-sequence", "assertions[0]: an assertion must be a mapping, got string"),
])
def test_malformed_assertions_name_the_value_and_its_path(assertion, message):
    with pytest.raises(AssertionSyntaxError) as caught:
        parse_assertions([assertion])
    assert message in str(caught.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(AssertionSyntaxError) as caught:
        parse_assertions([{"type": "tool-sequence", "mode": "x", "tools": []}, {"type": "nope"}], ("tests", 0,
                                                                                                   "assertions"))
    paths = [p.split(":")[0] for p in str(caught.value).splitlines()]
    assert paths == ["tests[0].assertions[0].mode", "tests[0].assertions[0].tools", "tests[0].assertions[1].type"]


def test_a_raising_assertion_is_a_failure_not_a_crash(monkeypatch):
    [a] = parse_assertions([{"type": "tool-sequence", "mode": "exact", "tools": ["x"]}])
    monkeypatch.setitem(EVALUATORS, type(a), lambda assertion, view, trace=None: 1 / 0)
    [(_, result)] = evaluate([a], from_trace(make_trace(calls=[LOOKUP])))
    assert not result.passed and "raised ZeroDivisionError" in result.detail
