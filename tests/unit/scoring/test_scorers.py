"""The scorer library over hand-built traces: combinators, observation, LLM judge, provenance, facts."""

from __future__ import annotations

import pytest

from tests.support.tracekit import LOOKUP, make_trace
from wt_otel.contracts.results import LayerResult
from wt_otel.scorers import (
    all_of,
    any_of,
    find_numbers,
    forbidden_facts,
    is_asserted,
    llm_judge,
    no_divergence,
    observation,
    parse_judgement,
    run_scorer,
    substantiated_by_tools,
    target_facts,
    target_numbers,
)

OK = make_trace(calls=[LOOKUP])


def passing(trace):
    return LayerResult(passed=True, detail="fine")


def failing(trace):
    return LayerResult(passed=False, detail="the answer is wrong")


def raising(trace):
    raise RuntimeError("boom")


# ---------------------------------------------------------------- running and combining


def test_run_scorer_accepts_tuples_and_bools_and_names_bad_returns():
    assert run_scorer(lambda t: (True, "ok"), OK) == LayerResult(passed=True, detail="ok")
    assert run_scorer(lambda t: False, OK, "mine").detail == "mine returned False"
    bad = run_scorer(lambda t: "yes", OK, "mine")
    assert not bad.passed and "mine returned 'yes'" in bad.detail and "(passed, detail)" in bad.detail


def test_a_raising_scorer_is_a_failure_naming_the_exception():
    result = run_scorer(raising, OK)
    assert not result.passed and result.detail == "raising raised RuntimeError: boom"


def test_all_of_joins_every_failure_and_survives_a_raising_child():
    result = all_of(passing, failing, raising)(OK)
    assert not result.passed
    assert result.detail == "the answer is wrong; raising raised RuntimeError: boom"
    assert all_of(passing, passing)(OK) == LayerResult(passed=True, detail="fine; fine")


def test_any_of_passes_on_one_and_joins_all_failures_otherwise():
    assert any_of(raising, failing, passing)(OK).passed
    result = any_of(failing, raising)(OK)
    assert not result.passed
    assert "the answer is wrong" in result.detail and "raising raised RuntimeError: boom" in result.detail


# ---------------------------------------------------------------- observation


def test_observation_walks_dotted_and_indexed_paths():
    assert observation("mcp_calls", "[0].args.query", lambda v: v == "Bluewing")(OK).passed
    assert observation("mcp_calls", "[-1].result.phone", lambda v: v.startswith("+1"))(OK).passed
    trace = make_trace(reply='{"order": {"lines": [{"sku": "A"}]}}')
    assert observation("final_reply", "order.lines[0].sku", lambda v: v == "A", "sku")(trace).passed
    assert observation("final_reply", "", lambda v: "order" in v)(trace).passed


def test_observation_reads_the_traces_observations_object():
    trace = make_trace(observations={"db": {"rows": [{"status": "refunded"}]}})
    assert observation("db", 'rows[0]["status"]', lambda v: v == "refunded")(trace).passed
    missing = observation("crm", "x", bool)(trace)
    assert not missing.passed and "no observation 'crm'" in missing.detail
    assert "trace observations: db" in missing.detail


def test_observation_failures_name_the_path_and_the_value():
    result = observation("mcp_calls", "[0].result.fax", bool, "fax on file")(OK)
    assert not result.passed and result.detail.startswith("fax on file: [0].result.fax does not exist (keys: email")
    result = observation("mcp_calls", "[3]", bool)(OK)
    assert "[3] does not exist (a list of 1)" in result.detail
    result = observation("mcp_calls", "[0].args.query", lambda v: v == "Acme")(OK)
    assert not result.passed and result.detail == 'mcp_calls[0].args.query: does not hold for Bluewing'
    raised = observation("mcp_calls", "[0].args", lambda v: v["nope"])(OK)
    assert not raised.passed and "the predicate raised KeyError" in raised.detail


def test_observation_rejects_a_malformed_path_when_built():
    with pytest.raises(ValueError, match="bad path"):
        observation("trace", 'a["unterminated', bool)


# ---------------------------------------------------------------- LLM judge


def test_llm_judge_assembles_the_prompt_and_parses_pass_and_fail():
    prompts = []

    def model(prompt: str) -> str:
        prompts.append(prompt)
        return "PASS: the answer cites the looked-up e-mail"

    assert llm_judge("The answer gives the e-mail on file.", model)(OK).passed
    prompt = prompts[0]
    assert "The answer gives the e-mail on file." in prompt and "ops@bluewing.example." in prompt
    assert 'client_lookup({"query": "Bluewing"}) -> {"email"' in prompt and "server-witnessed" in prompt
    assert "What is the email for Bluewing?" in prompt
    result = llm_judge("r", lambda p: "**FAIL** - no e-mail given")(OK)
    assert not result.passed and "no e-mail given" in result.detail


def test_llm_judge_parse_failure_is_a_failure_with_the_raw_response():
    result = llm_judge("r", lambda p: "I think it mostly passes.\nPASS")(OK)
    assert not result.passed and "does not start with PASS or FAIL" in result.detail
    assert "I think it mostly passes." in result.detail
    boom = llm_judge("r", lambda p: 1 / 0)(OK)
    assert not boom.passed and "generate_fn raised ZeroDivisionError" in boom.detail


@pytest.mark.parametrize(("text", "expected"), [
    ("PASS", True), ("fail.", False), ("  \n**PASS**: fine", True), ("FAIL - wrong", False), ("`PASS`", True),
    ("PASSED", None), ("Yes", None), ("", None), ("The verdict: PASS", None),
])
def test_parse_judgement_is_strict(text, expected):
    assert parse_judgement(text) is expected


# ---------------------------------------------------------------- provenance


def test_substantiated_numbers_come_from_witnessed_results():
    trace = make_trace(reply="Call +1-555-0100.", calls=[LOOKUP])
    result = substantiated_by_tools()(trace)
    assert result.passed and "server-witnessed tool results (client_lookup)" in result.detail


def test_a_number_from_nowhere_is_unsubstantiated():
    trace = make_trace(reply="Its balance is 4,200 dollars.", calls=[LOOKUP])
    result = substantiated_by_tools()(trace)
    assert not result.passed and "'4200'" in result.detail and "server-witnessed" in result.detail


def test_numbers_the_user_said_need_no_substantiation():
    trace = make_trace(reply="Order 17 is on its way.", user="Where is order 17?", calls=[LOOKUP])
    assert substantiated_by_tools()(trace).passed


def test_a_fail_call_echo_of_the_agents_own_arguments_is_not_evidence():
    echo = ("client_lookup", {"query": "ACME-991"},
            {"error": "no_recorded_result", "tool": "client_lookup", "args": {"query": "ACME-991"}}, "fail_call")
    trace = make_trace(reply="Account ACME-991 has 991 open tickets.", calls=[echo])
    result = substantiated_by_tools()(trace)
    assert not result.passed
    assert "no witnessed call returned a result" in result.detail and "1 fail_call echo(es)" in result.detail
    facts = substantiated_by_tools(["ACME-991"])(trace)
    assert not facts.passed and "ACME-991" in facts.detail


def test_substantiated_facts_only_judges_facts_the_answer_claims():
    trace = make_trace(reply="The email is ops@bluewing.example.", calls=[LOOKUP])
    result = substantiated_by_tools(["ops@bluewing.example", "billing@bluewing.example"])(trace)
    assert result.passed and "1 fact(s)" in result.detail
    wrong = make_trace(reply="The email is sales@bluewing.example.", calls=[LOOKUP])
    assert not substantiated_by_tools(["sales@bluewing.example"])(wrong).passed


def test_without_a_witness_the_detail_says_there_is_nothing_to_check_against():
    trace = make_trace(reply="Call +1-555-0100.", calls=[LOOKUP], witness="unavailable")
    result = substantiated_by_tools()(trace)
    assert not result.passed and "no server witness was available" in result.detail
    assert "Contract C reports calls, not results" in result.detail
    assert substantiated_by_tools()(make_trace(reply="Nothing numeric.", witness="unavailable")).passed


# ---------------------------------------------------------------- divergence


def test_no_divergence():
    assert no_divergence()(OK).passed
    missed = make_trace(calls=[("client_lookup", {"query": "x"}, {"error": "no_recorded_result"}, "fail_call")])
    result = no_divergence()(missed)
    assert not result.passed and "1 tool call(s) matched no recording" in result.detail and "fail_call" in result.detail
    llm = make_trace(llm_calls=[{"match": "miss", "divergence": {"at": "messages[0]"}}])
    result = no_divergence()(llm)
    assert not result.passed and "1 model request(s)" in result.detail and "messages[0]" in result.detail


# ---------------------------------------------------------------- facts and numbers


def test_target_facts_is_an_and_of_case_insensitive_or_groups():
    trace = make_trace(reply="Email OPS@Bluewing.example, phone 555 0100.")
    assert target_facts(["ops@bluewing.example", ["+1-555-0100", "555 0100"]])(trace).passed
    result = target_facts(["ops@bluewing.example", ["fax", "telex"]])(trace)
    assert not result.passed and result.detail == "the final reply misses 'fax' or 'telex'"
    assert not target_facts(["art"])(make_trace(reply="We start now.")).passed  # word-bounded


@pytest.mark.parametrize(("reply", "asserted"), [
    ("The refund was approved.", True),
    ("The refund was not approved.", False),
    ("No refund approved yet.", False),
    ("We never approved it; it is now approved.", True),  # the second clause asserts it
    ("It isn't approved.", False),
    ("Not that I know, but the team has since approved.", True),  # 'not' is more than 3 words back
    ("Not now. Approved tomorrow.", True),  # a sentence boundary ends the window
])
def test_forbidden_facts_are_negation_aware(reply, asserted):
    assert is_asserted(reply, "approved") is asserted
    assert forbidden_facts(["approved"])(make_trace(reply=reply)).passed is not asserted


def test_forbidden_facts_detail_names_the_fact():
    result = forbidden_facts(["refund issued", "wire sent"])(make_trace(reply="Refund issued today."))
    assert not result.passed and result.detail == "the final reply asserts forbidden fact(s): 'refund issued'"


def test_target_numbers_are_word_bounded_compared_by_value_with_units_nearby():
    trace = make_trace(reply="Refunded 1,200.50 USD in total, across 15 items; fee 2.50%.")
    assert target_numbers([1200.5, "15", "2.5"])(trace).passed
    assert not target_numbers([5])(trace).passed  # not inside 15 or 2.50
    assert target_numbers([(1200.5, "USD"), (2.5, "%")])(trace).passed
    result = target_numbers([15], unit="USD")(trace)
    assert not result.passed and result.detail == "the final reply misses number(s): 15 (USD nearby)"


def test_find_numbers_handles_signs_and_ids():
    assert [str(v) for v, _, _ in find_numbers("-3 then x86 and A-1 or 4.0")] == ["-3", "1", "4.0"]
