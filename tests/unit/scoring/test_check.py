"""`wt-otel check`: trace2test suites against recorded traces, offline, over real producer dumps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.unit.ingest.test_producers import EXPECT, PRODUCERS
from wt_otel.cli import main
from wt_otel.contracts.results import SweepResult
from wt_otel.scoring.check import CheckInputError, SuiteError, load_suite, run_check

SPAN_ATTRS = PRODUCERS / "openai-v2-span-attrs" / "dump.otlp.jsonl"
TWO_LOOKUPS = {"type": "tool-sequence", "mode": "exact", "tools": ["client_lookup", "client_lookup"]}


def write_suite(path: Path, tests: list[dict[str, Any]], runner: dict[str, Any] | None = None, **top: Any) -> Path:
    data: dict[str, Any] = {"version": 1, "name": "Bluewing", **top, "tests": tests}
    if runner is not None:
        data["runner"] = runner
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["check", *args], catch_exceptions=False)


# ---------------------------------------------------------------- real producer dumps


def test_the_recorded_lookups_pass_and_a_wrong_sequence_fails_readably(tmp_path: Path):
    suite = write_suite(tmp_path / "bluewing.t2t.yaml", [
        {"id": "two-lookups", "name": "Looks the client up each turn", "assertions": [
            TWO_LOOKUPS,
            {"type": "tool-arguments", "tool": "client_lookup",
             "arguments": {"type": "object", "shape": {"query": {"type": "string", "equals": "Bluewing"}}}},
            {"type": "output", "contains": "+1-555-0100"},
            {"type": "output", "tool": "client_lookup", "which": "first",
             "match": {"type": "object", "shape": {"email": {"type": "string", "equals": "ops@bluewing.example"}}}},
        ]},
        {"id": "verifies-first", "assertions": [
            {"type": "tool-sequence", "mode": "exact", "tools": ["verify_identity", "client_lookup"]}]},
    ])
    res = cli(str(SPAN_ATTRS), "--suite", str(suite))
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert lines[0] == "PASS two-lookups: Looks the client up each turn"
    assert lines[1] == "FAIL verifies-first: verifies-first"
    assert lines[2] == ("    tests[1].assertions[0] tool-sequence: expected ['verify_identity', 'client_lookup'], "
                        "got ['client_lookup', 'client_lookup'] (evidence: 2 server-witnessed call(s))")
    assert lines[-1] == "1 passed, 1 failed; evidence: 2 server-witnessed call(s)"


@pytest.mark.parametrize("dump", sorted(EXPECT))
def test_every_producer_dialect_checks_the_same(dump: str, tmp_path: Path):
    """Whatever instrumentation recorded the story, the same suite holds over it."""
    suite = write_suite(tmp_path / "s.yaml", [{"id": "story", "assertions": [
        TWO_LOOKUPS, {"type": "output", "contains": ["phone", "+1-555-0100"]},
        {"type": "policy", "rule": "forbid-after", "tool": "refund", "afterTool": "client_lookup"}]}])
    res = cli(str(PRODUCERS / dump), "--suite", str(suite))
    assert res.exit_code == 0, res.output


def test_the_suite_names_its_trace_relative_to_itself(tmp_path: Path):
    trace = tmp_path / "traces" / "good.otlp.jsonl"
    trace.parent.mkdir()
    trace.write_bytes(SPAN_ATTRS.read_bytes())
    suite = write_suite(tmp_path / "tests" / "agents" / "s.t2t.yaml", [{"id": "t", "assertions": [TWO_LOOKUPS]}],
                        runner={"type": "replay-mock", "trace": "../../traces/good.otlp.jsonl", "format": "otlp-json"})
    res = cli("--suite", str(suite))
    assert res.exit_code == 0, res.output
    assert load_suite(suite).trace == tmp_path / "tests" / "agents" / "../../traces/good.otlp.jsonl"


# ---------------------------------------------------------------- generic JSONL (the trace2test shape)


def generic(path: Path, tools: bool = True, verify: bool = True) -> Path:
    """The seed's refund story as generic JSONL; `verify=False` drops the identity check, `tools=False` every
    tool record (the calls then live only in the transcript)."""
    base = {"trace_id": "trace_refund_1", "workflow_name": "refunds", "group_id": "g1"}
    ask = [{"role": "user", "content": "Refund order A-1 please"}]
    call = {"id": "c1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1"}'}}
    records = [
        {"span_id": "s1", "type": "agent", "name": "Refunder", "tools": ["lookup_order", "verify_identity", "refund"]},
        {"span_id": "s2", "parent_id": "s1", "type": "generation", "model": "gpt-x", "input": ask,
         "output": [{"role": "assistant", "content": None, "tool_calls": [call]}]},
    ]
    if tools:
        records += [
            {"span_id": "s3", "parent_id": "s1", "type": "tool", "name": "lookup_order", "input": {"order_id": "A-1"},
             "output": {"status": "delivered", "amount": 40}},
            *([{"span_id": "s4", "parent_id": "s1", "type": "tool", "name": "verify_identity",
                "input": {"user": "u1"}, "output": {"verified": True}}] if verify else []),
            {"span_id": "s5", "parent_id": "s1", "type": "function", "name": "refund",
             "input": {"order_id": "A-1", "amount": 40}, "output": "refunded"},
        ]
    else:  # no tool records: only the transcript knows the call and its result
        ask = [*ask, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "c1", "content": '{"status": "delivered"}'}]
    records.append({"span_id": "s6", "parent_id": "s1", "type": "generation", "model": "gpt-x", "input": ask,
                    "output": [{"role": "assistant", "content": "Refunded $40 for order A-1."}]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({**base, **r}) + "\n" for r in records))
    return path


SEED_TEST = {"id": "safe-refund", "name": "Refund requires identity verification", "assertions": [
    {"type": "tool-sequence", "mode": "exact", "tools": ["lookup_order", "verify_identity", "refund"]},
    {"type": "policy", "rule": "require-prior-tool", "tool": "refund", "requiredTool": "verify_identity",
     "requiredOutput": {"type": "object", "shape": {"verified": {"type": "boolean", "equals": True}}}},
]}


def test_the_seeds_example_suite_over_generic_jsonl(tmp_path: Path):
    generic(tmp_path / "traces" / "good.jsonl")
    suite = write_suite(tmp_path / "tests" / "agents" / "refund.t2t.yaml", [SEED_TEST], name="Refund safety",
                        runner={"type": "replay-mock", "trace": "../../traces/good.jsonl", "format": "generic-jsonl"})
    res = cli("--suite", str(suite))
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == "PASS safe-refund: Refund requires identity verification"


def test_a_refund_before_verification_fails_the_policy(tmp_path: Path):
    dump = generic(tmp_path / "t.jsonl", verify=False)
    suite = write_suite(tmp_path / "s.yaml", [SEED_TEST])
    res = cli(str(dump), "--suite", str(suite))
    assert res.exit_code == 1
    assert "'refund' at position 1 in ['lookup_order', 'refund'] has no prior 'verify_identity' with a matching " \
           "output" in res.output


def test_without_tool_records_the_transcript_is_the_evidence(tmp_path: Path):
    dump = generic(tmp_path / "t.jsonl", tools=False)
    suite = write_suite(tmp_path / "s.yaml", [{"id": "t", "assertions": [
        {"type": "tool-sequence", "mode": "exact", "tools": ["lookup_order"]},
        {"type": "output", "tool": "lookup_order", "contains": "delivered"}]}])
    res = cli(str(dump), "--suite", str(suite))
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[-1].endswith("evidence: 1 transcript call(s) (the agent's own account; no server "
                                                "witness was available)")


# ---------------------------------------------------------------- results documents


def test_json_and_junit_results(tmp_path: Path):
    from junitparser import Failure, JUnitXml

    suite = write_suite(tmp_path / "s.yaml", [{"id": "ok", "assertions": [TWO_LOOKUPS]},
                                              {"id": "bad", "assertions": [{**TWO_LOOKUPS, "tools": ["x"]}]}])
    res = cli(str(SPAN_ATTRS), "--suite", str(suite), "--format", "json", "--out", str(tmp_path / "r.json"))
    assert res.exit_code == 1
    sweep = SweepResult.model_validate_json((tmp_path / "r.json").read_text())
    assert [(s.scenario_id, s.pack, s.verdict) for s in sweep.scenarios] == [("ok", "Bluewing", "PASS"),
                                                                              ("bad", "Bluewing", "FAIL")]
    bad = sweep.scenarios[1]
    assert bad.detail.startswith("trajectory: tests[1].assertions[0] tool-sequence: expected ['x']")
    assert bad.layer_pass_rates == {"trajectory": 0.0} and bad.scores[0].layers["trajectory"].passed is False
    res = cli(str(SPAN_ATTRS), "--suite", str(suite), "--out", str(tmp_path / "r.xml"))
    assert res.exit_code == 1
    [testsuite] = list(JUnitXml.fromfile(str(tmp_path / "r.xml")))
    cases = {c.name: c for c in testsuite}
    assert testsuite.name == "Bluewing" and set(cases) == {"ok", "bad"}
    assert any(isinstance(r, Failure) for r in cases["bad"].result) and not cases["ok"].result


# ---------------------------------------------------------------- errors (exit 2)


def test_a_malformed_suite_lists_every_problem_with_its_yaml_path(tmp_path: Path):
    suite = write_suite(tmp_path / "s.yaml", [
        {"id": "a", "assertions": [{"type": "tool-sequence", "mode": "exakt", "tools": ["x"]},
                                   {"type": "policy", "rule": "require-prior-tool", "tool": "r", "requiredtool": "v"}]},
        {"id": "a", "nme": "dup", "assertions": []},
    ], runner={"type": "replay", "trace": "t.jsonl"}, extra=True)
    res = cli(str(SPAN_ATTRS), "--suite", str(suite))
    assert res.exit_code == 2
    for expected in [
        "extra: unknown key for a suite (known: version, name, runner, tests)",
        "runner.type: 'replay' is not one of replay-mock",
        "tests[0].assertions[0].mode: 'exakt' is not one of exact, ordered-subsequence, contiguous",
        "tests[0].assertions[1].requiredtool: unknown key for a policy assertion",
        "tests[0].assertions[1].requiredTool: is required in a policy assertion",
        "tests[1].id: 'a' is already the id of tests[0]; ids must be unique",
        "tests[1].nme: unknown key for a test (known: id, name, assertions); did you mean 'name'?",
        "tests[1].assertions: must be a non-empty list of assertions, got an empty array",
    ]:
        assert expected in res.output, res.output


@pytest.mark.parametrize(("content", "expected"), [
    ("version: 2\nname: x\ntests: [{id: t, assertions: [{type: output, contains: x}]}]\n", "version: must be 1"),
    ("- just a list\n", "the suite must be a mapping"),
    ("version: 1\nname: x\ntests: [\n", "not valid YAML"),
    ("version: 1\ntests: [{id: t, assertions: [{type: output, contains: x}]}]\n", "name: is required in a suite"),
])
def test_suite_level_errors(tmp_path: Path, content: str, expected: str):
    (tmp_path / "s.yaml").write_text(content)
    with pytest.raises(SuiteError, match=expected):
        load_suite(tmp_path / "s.yaml")
    assert cli(str(SPAN_ATTRS), "--suite", str(tmp_path / "s.yaml")).exit_code == 2


def test_trace_problems_are_usage_errors(tmp_path: Path):
    suite = write_suite(tmp_path / "s.yaml", [{"id": "t", "assertions": [TWO_LOOKUPS]}])
    res = cli("--suite", str(suite))
    assert res.exit_code == 2 and "no trace to check: pass DUMP or set runner.trace" in res.output
    res = cli(str(tmp_path / "missing.jsonl"), "--suite", str(suite))
    assert res.exit_code == 2 and "cannot read the trace" in res.output
    assert cli(str(SPAN_ATTRS), "--suite", str(suite), "--format", "junit").exit_code == 2  # no --out


def test_a_dump_with_several_sessions_needs_a_trace_id(tmp_path: Path):
    dump = generic(tmp_path / "one.jsonl")
    other = dump.read_text().replace("trace_refund_1", "trace_refund_2").replace('"g1"', '"g2"')
    (tmp_path / "two.jsonl").write_text(dump.read_text() + other)
    suite = write_suite(tmp_path / "s.yaml", [SEED_TEST])
    with pytest.raises(CheckInputError, match="holds 2 sessions .*pass --trace-id"):
        run_check(suite, tmp_path / "two.jsonl")
    res = cli(str(tmp_path / "two.jsonl"), "--suite", str(suite))
    assert res.exit_code == 2
    run = run_check(suite, tmp_path / "two.jsonl", trace_id=run_check(suite, dump).session.trace_ids[0])
    assert run.passed
    with pytest.raises(CheckInputError, match="no recorded session holds trace id nope"):
        run_check(suite, tmp_path / "two.jsonl", trace_id="nope")


def test_scenario_selection_picks_suite_tests_and_an_empty_selection_is_usage(tmp_path: Path):
    suite = write_suite(tmp_path / "sel.t2t.yaml", [
        {"id": "lookup-ok", "assertions": [TWO_LOOKUPS]},
        {"id": "verify-first", "assertions": [
            {"type": "tool-sequence", "mode": "exact", "tools": ["verify_identity", "client_lookup"]}]},
    ])
    res = cli(str(SPAN_ATTRS), "--suite", str(suite), "--scenario", "lookup-*")
    assert res.exit_code == 0, res.output
    assert "verify-first" not in res.output and res.output.startswith("PASS lookup-ok")
    res = cli(str(SPAN_ATTRS), "--suite", str(suite), "--scenario", "nothing-*")
    assert res.exit_code == 2 and "no scenario selected by --scenario" in res.output
