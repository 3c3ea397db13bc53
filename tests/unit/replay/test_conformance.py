"""`wt-otel conformance` against a conforming endpoint and deliberately broken ones."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from tests.unit.replay.test_inject import VALID_SURFACE, FakeAgent, free_port, serve
from wt_otel.cli import main
from wt_otel.replay.conformance import RECALL_PROBES, run_conformance

SETTLE_S = 0.3  # the async-reset fault clears after 0.1 s


def check(**faults: Any) -> tuple[bool, list[str], FakeAgent]:
    agent = FakeAgent(**faults)
    lines: list[str] = []
    with serve(agent) as url:
        report = run_conformance(url, timeout_s=5, emit=lines.append, settle_s=SETTLE_S)
    return report.conforming, lines, agent


def statuses(lines: list[str]) -> dict[str, str]:
    """check name -> PASS/FAIL/SKIP/INFO (the last line with that name)."""
    return {line.split(" ", 2)[1].rstrip(":"): line.split(" ", 1)[0] for line in lines}


def test_conforming_endpoint_passes_every_check() -> None:
    ok, lines, _ = check()
    assert ok, lines
    assert statuses(lines) == {
        "endpoint": "INFO", "reset.response": "PASS", "reset.idempotent": "PASS", "inject.version_echo": "PASS",
        "inject.shape": "PASS", "inject.version_mismatch": "PASS", "reset.synchronous": "PASS",
        "reset.total": "PASS", "reset.canary": "PASS", "sessions.isolated": "PASS", "surface": "SKIP",
        "result": "INFO",
        # the failure paths: not provoked without --scenario / --state-probe (honest INFO / SKIP lines)
        "inject.timeout_s": "INFO", "inject.error_path": "SKIP", "runtime.must_call": "SKIP",
        "reset.state_probe": "SKIP",
    }
    assert "PASS reset.canary: no leak observed (not proof of isolation)" in lines
    assert "PASS sessions.isolated: no cross-session leak observed (not proof of isolation)" in lines
    assert "SKIP surface: not implemented (conforming): /wt/surface answered HTTP 404 (not implemented)" in lines
    assert "PASS inject.version_mismatch: rejected wt_inject 999 with HTTP 400" in lines
    assert lines[-1] == "INFO result: conforming"


def test_canary_is_run_as_the_spec_words_it() -> None:
    _, _, agent = check()
    injects = [body for route, body in agent.requests if route == "/wt/inject"]
    routes = [route for route, _ in agent.requests]
    # find the canary: a nonce turn, then a reset, then both recall probes in one new session
    for i, body in enumerate(injects):
        if "remember this code" not in body["text"]:
            continue
        nonce = body["text"].split(": ", 1)[1].split(".", 1)[0]
        after = injects[i + 1:i + 3]
        if [b["text"] for b in after] == list(RECALL_PROBES) and after[0]["session_id"] != body["session_id"] \
                and after[0]["session_id"] == after[1]["session_id"]:
            assert len(nonce) == 36 and nonce.count("-") == 4  # a UUID, never a memorable phrase
            break
    else:
        pytest.fail(f"no canary sequence in {injects}")
    assert routes.count("/wt/reset") >= 5


def test_surface_reported_and_invalid() -> None:
    ok, lines, _ = check(surface=VALID_SURFACE)
    assert ok and "PASS surface: reported 1 system instruction part(s), 1 tool definition(s), 1 extra segment(s)" \
        in lines
    ok, lines, _ = check(surface={"system_instructions": [], "tool_definitions": []})
    assert not ok
    assert any(line.startswith("FAIL surface: implemented but invalid: /wt/surface response broke Contract C: "
                               "surface.extra_segments must be an array, but the key is missing") for line in lines)
    ok, lines, _ = check(surface=501)
    assert ok and statuses(lines)["surface"] == "SKIP"


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        ({"no_tool_calls": True}, "FAIL inject.shape: tool_calls must be an array, but the key is missing"),
        ({"string_arguments": True},
         "FAIL inject.shape: tool_calls[0].arguments must be an object, not a JSON-encoded string"),
        ({"wrong_echo": True}, "FAIL inject.version_echo: wt_inject echo is 2 but the request sent 1"),
        ({"empty_reply": True}, "FAIL inject.shape: reply must not be empty unless error is set"),
        ({"inject_status": 500}, "FAIL inject.response: HTTP 500, expected 200 with a response envelope"),
        ({"garbage_body": True}, "FAIL inject.response: the body is not UTF-8 JSON"),
        ({"leaky_reset": True}, "FAIL reset.synchronous: the session still recalled the nonce after /wt/reset "
                                "answered 200 (and 0.3 s later)"),
        ({"leaky_reset": True}, "FAIL reset.total: 2 of 2 sessions still recalled their nonce after one /wt/reset"),
        ({"async_reset": 0.1}, "FAIL reset.synchronous: /wt/reset answered 200 before the state was gone"),
        ({"leaky_index": True}, "FAIL reset.canary: leak proven: after /wt/reset a new session answered"),
        ({"shared_memory": True}, "FAIL sessions.isolated: leak proven: session B answered"),
        ({"reset_status": 500}, "FAIL reset.response: POST "),
        ({"reset_no_echo": True}, "wt_inject must be a positive integer, but the key is missing"),
    ],
)
def test_broken_endpoints_fail_the_right_check(faults: dict[str, Any], expected: str) -> None:
    ok, lines, _ = check(**faults)
    assert not ok
    assert any(line.startswith(expected) or (expected in line and line.startswith("FAIL")) for line in lines), lines
    assert lines[-1].startswith("INFO result: NOT conforming")


def test_async_reset_fails_only_synchronous() -> None:
    _, lines, _ = check(async_reset=0.1)
    got = statuses(lines)
    assert (got["reset.synchronous"], got["reset.total"], got["reset.canary"]) == ("FAIL", "PASS", "PASS")


def test_leaky_reset_keeps_per_session_memory_canary_alone_would_miss_it() -> None:
    _, lines, _ = check(leaky_reset=True)
    got = statuses(lines)
    # the canary probes a *new* session, so per-session leftovers pass it; the other reset checks catch them
    assert (got["reset.canary"], got["reset.total"], got["reset.synchronous"]) == ("PASS", "FAIL", "FAIL")


def test_failed_reset_skips_the_checks_that_need_it() -> None:
    _, lines, _ = check(reset_status=500)
    got = statuses(lines)
    assert got["reset.response"] == "FAIL"
    assert {got[n] for n in ("reset.synchronous", "reset.total", "reset.canary")} == {"SKIP"}
    assert "SKIP reset.canary: needs a working /wt/reset (see reset.response)" in lines
    assert got["sessions.isolated"] == "PASS"  # runs without reset: fresh sessions and a fresh nonce


def test_version_mismatch_blind_echo_is_info_not_failure() -> None:
    ok, lines, _ = check(echo_any_version=True)
    assert ok
    assert any(line.startswith("INFO inject.version_mismatch: accepted wt_inject 999 and echoed it back")
               for line in lines)


def test_agent_level_error_greeting_is_reported_as_info() -> None:
    ok, lines, _ = check(error_turn=True)
    assert statuses(lines)["inject.shape"] == "PASS"
    assert any(line.startswith("INFO inject.error: the greeting got an agent-level error") for line in lines)


# ---------------------------------------------------------------- the command


def test_cli_exit_codes() -> None:
    runner = CliRunner()
    with serve(FakeAgent()) as url:
        result = runner.invoke(main, ["conformance", "--url", url, "--timeout", "5"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == "INFO result: conforming"

    with serve(FakeAgent(no_tool_calls=True)) as url:
        result = runner.invoke(main, ["conformance", "--url", url, "--timeout", "5"])
    assert result.exit_code == 1 and "FAIL inject.shape" in result.output

    dead = f"http://127.0.0.1:{free_port()}"
    result = runner.invoke(main, ["conformance", "--url", dead])
    assert result.exit_code == 1
    assert result.output.splitlines()[1:] == [
        f"FAIL endpoint: POST {dead}/wt/reset: reset failed, the run cannot be isolated: cannot connect to {dead}: "
        "[Errno 111] Connection refused. Is the agent endpoint running there? Point the driver elsewhere with "
        "--url or WT_INJECT_URL (not retried)",
        "SKIP remaining checks: the endpoint is unreachable",
        "INFO result: NOT conforming: 1 check(s) failed",
    ]

    result = runner.invoke(main, ["conformance", "--url", "localhost:8647"])
    assert result.exit_code == 2 and "must be an http(s) base URL" in result.output
    assert runner.invoke(main, ["conformance", "--timeout", "0"]).exit_code == 2


def test_broken_inject_skips_the_state_checks_instead_of_failing_each() -> None:
    _, lines, _ = check(wrong_echo=True)
    got = statuses(lines)
    assert [line for line in lines if line.startswith("FAIL")] == [
        "FAIL inject.version_echo: wt_inject echo is 2 but the request sent 1: the endpoint speaks another protocol "
        "version (a stale server or driver); upgrade the older side"]
    assert {got[n] for n in ("reset.synchronous", "reset.total", "reset.canary", "sessions.isolated")} == {"SKIP"}
