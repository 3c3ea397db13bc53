"""`python:MODULE:ATTR` takes the agents people write: agent(text), agent(text, session_id), async."""

from __future__ import annotations

from wt_otel.replay.runtimes import PythonRuntime, call_agent


def plain(text):
    return f"echo {text}"


async def async_agent(text, session_id):
    return {"reply": f"{session_id}: {text}", "tool_calls": [{"name": "lookup", "arguments": {"q": text}}]}


class Stateful:
    def __call__(self, text: str) -> tuple[str, list]:
        return text.upper(), []

    def reset(self) -> None:
        pass


def test_plain_one_argument_function_returning_a_string():
    turn = PythonRuntime(plain).inject("s1", "hi")
    assert (turn.reply, turn.tool_calls, turn.error) == ("echo hi", [], None)


def test_async_two_argument_function():
    turn = PythonRuntime(async_agent).inject("s1", "hi")
    assert turn.reply == "s1: hi" and [(c.name, c.arguments) for c in turn.tool_calls] == [("lookup", {"q": "hi"})]


def test_callable_object_with_one_argument_and_lambda_with_two():
    assert PythonRuntime(Stateful()).inject("s", "hi").reply == "HI"
    assert call_agent(lambda text, sid: (sid, []), "t", "s9") == ("s9", [])


def test_run_help_states_the_python_contract_and_the_llm_default():
    from click.testing import CliRunner

    from wt_otel.cli import main

    text = " ".join(CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output.split())
    assert "agent(text) or agent(text, session_id)" in text and "plain or async" in text
    assert "openai-agents:MODULE:ATTR" in text
    assert "auto, the default here and in serve's auto-replay alike" in text
