"""`wt-otel import` says what it did not understand: warnings, --strict, and why nothing was found."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tests.support.spans import assistant, chat_span, user
from wt_otel.cli import main

ASK = "Weather in Lisbon?"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_no_genai_spans_at_all_exits_1_saying_so(tmp_path: Path, otlp_dump):
    def build(t):
        with t.start_as_current_span("GET /health", attributes={"http.request.method": "GET"}):
            pass

    r = run("import", str(otlp_dump(build)), "--out", str(tmp_path / "out"))
    assert r.exit_code == 1
    assert "no GenAI session found: no GenAI spans at all" in r.output
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_content_capture_off_exits_1_naming_the_setting(tmp_path: Path, otlp_dump):
    def build(t):
        chat_span(t)  # model calls recorded, message content not

    r = run("import", str(otlp_dump(build)), "--out", str(tmp_path / "out"))
    assert r.exit_code == 1
    assert "content capture is off" in r.output
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in r.output


def test_content_off_names_each_producers_setting(tmp_path: Path, otlp_dump):
    def build(t):
        with t.start_as_current_span("ChatOpenAI", attributes={"openinference.span.kind": "LLM",
                                                                "llm.model_name": "gpt-x"}):
            pass
        with t.start_as_current_span("openai.chat", attributes={"gen_ai.operation.name": "chat",
                                                                 "llm.request.type": "chat"}):
            pass

    r = run("import", str(otlp_dump(build)), "--out", str(tmp_path / "out"))
    assert r.exit_code == 1
    assert "OPENINFERENCE_HIDE_INPUTS" in r.output or "TRACELOOP_TRACE_CONTENT" in r.output


def test_unknown_shape_exits_1_naming_the_attribute(tmp_path: Path, otlp_dump):
    def build(t):
        with t.start_as_current_span("acme.generate", attributes={
                "gen_ai.system": "acme", "gen_ai.prompt_messages": json.dumps([{"who": "me", "said": ASK}])}):
            pass

    r = run("import", str(otlp_dump(build)), "--out", str(tmp_path / "out"))
    assert r.exit_code == 1
    assert "shape wt-otel does not read" in r.output and "gen_ai.prompt_messages" in r.output


def _unanswered(t):
    chat_span(t, inputs=[user(ASK)], outputs=[assistant(calls=[("c1", "get_weather", {"city": "Lisbon"})])])


def test_warnings_reach_stderr_imported_md_and_the_envelope(tmp_path: Path, otlp_dump):
    out = tmp_path / "out"
    r = run("import", str(otlp_dump(_unanswered)), "--out", str(out))
    assert r.exit_code == 0, r.output
    assert "warning:" in r.output and "'get_weather' (c1) has no result" in r.output
    [d] = list(out.iterdir())
    assert "has no result" in (d / "IMPORTED.md").read_text()
    env = json.loads((d / "incident.wtin.json").read_text())
    assert [x["kind"] for x in env["diagnostics"]] == ["tool_call_without_result"]
    assert run("validate", str(d)).exit_code == 0


def test_strict_turns_a_warning_into_exit_1_before_writing(tmp_path: Path, otlp_dump):
    out = tmp_path / "out"
    r = run("import", str(otlp_dump(_unanswered)), "--out", str(out), "--strict")
    assert r.exit_code == 1 and "warning(s)" in r.output and "nothing was written" in r.output
    assert not out.exists() or not list(out.iterdir())


def test_serialized_assistant_turn_and_missing_user_turn_are_flagged(tmp_path: Path, otlp_dump):
    def build(t):
        chat_span(t, inputs=[], outputs=[assistant("Thing(x=Other(1), y=<object at 0x1>)")])

    out = tmp_path / "out"
    r = run("import", str(otlp_dump(build)), "--out", str(out))
    assert r.exit_code == 0, r.output
    [d] = list(out.iterdir())
    kinds = {x["kind"] for x in json.loads((d / "incident.wtin.json").read_text())["diagnostics"]}
    assert kinds == {"no_user_turn", "serialized_turn"}


def test_unfamiliar_names_and_foreign_block_encodings_come_out_right(tmp_path: Path, otlp_dump):
    """Generic fallback: GenAI semconv with unknown span/scope names and Anthropic-style blocks."""
    def build(t):
        history = [{"role": "user", "content": [{"type": "text", "text": ASK}]},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather",
                                                      "input": {"city": "Lisbon"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                 "content": [{"type": "text", "text": '{"temp_c": 21}'}]}]}]
        with t.start_as_current_span("zz.brain.step", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "vendor.noise": "x",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": "21 C in Lisbon."}])}):
            pass

    out = tmp_path / "out"
    r = run("import", str(otlp_dump(build)), "--out", str(out))
    assert r.exit_code == 0 and "warning:" not in r.output, r.output
    [d] = list(out.iterdir())
    env = json.loads((d / "incident.wtin.json").read_text())
    assert [m["role"] for m in env["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert env["messages"][1]["parts"][0]["arguments"] == {"city": "Lisbon"}
    assert env["messages"][2]["parts"][0]["response"] == {"temp_c": 21}
    assert env["diagnostics"] == []


def test_unknown_shape_on_a_read_chat_span_names_that_span(tmp_path: Path, otlp_dump):
    """A chat span a dialect read, whose messages attribute holds an unknown shape, is named itself (not
    whichever span an earlier loop ended on), beside a well-formed chat span of the same session."""
    def build(t):
        with t.start_as_current_span("invoke_agent acme", attributes={"gen_ai.operation.name": "invoke_agent"}):
            with t.start_as_current_span("chat odd-model", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "odd-model",
                    "gen_ai.input.messages": json.dumps([{"who": "me", "said": ASK}])}):
                pass
            chat_span(t, inputs=[user(ASK)], outputs=[assistant("It is sunny in Lisbon.")])

    r = run("import", str(otlp_dump(build)), "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    [line] = [x for x in r.output.splitlines() if "shape wt-otel does not know" in x]
    assert "'chat odd-model'" in line and "gen_ai.input.messages" in line, line
