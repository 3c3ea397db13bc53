"""Misses that explain themselves (issue 30): answers for new calls (`universe add`, `universe record`), the
hints `wt-otel run` prints, and one verdict for the same miss under every runtime (docs/fix-loop.md)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from tests.support import llm_calls
from tests.support.inject_endpoint import JsonEndpoint, Reply
from tests.support.universe_agent import UNIVERSE, UniverseAgent, _call, write_scenario
from wt_otel.cli import main
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.misses import add_command, args_diff, explain_tool_miss, hint_lines, tool_misses
from wt_otel.replay.runner import ENV_LLM_BASE_URL, ENV_UNIVERSE_URL, RunOptions, Sweep, SweepRun, load_all
from wt_otel.replay.runtimes import HttpInjectRuntime, PythonRuntime
from wt_otel.replay.scenarios import find_scenarios
from wt_otel.replay.tool_recorder import result_value

# ---------------------------------------------------------------- explaining a tool miss


def test_a_changed_call_is_diffed_against_the_recording_sharing_most_values() -> None:
    universe = load_universe({**UNIVERSE, "recordings": [
        {"tool_name": "lookup_order", "args": {"order_id": "A-1"}, "result": 1},
        {"tool_name": "lookup_order", "args": {"order_id": "B-2", "region": "eu"}, "result": 2}]})
    found = explain_tool_miss("lookup_order", {"order_id": "B-2", "region": "us", "full": True}, universe)
    assert found == {"kind": "tool_call_changed", "nearest": 1,
                     "diff": ['+ full: true', '~ region: "eu" -> "us"']}
    assert args_diff({"a": 1, "b": 2}, {"a": 1}) == ["- b: 2"]
    assert "not in the universe" in explain_tool_miss("refund", {}, universe)["diff"][0]


def test_the_printed_add_command_quotes_untrusted_arguments_for_the_shell() -> None:
    """Tool names and arguments come from the agent, so from trace content: `$(...)`, quotes and `;` must
    reach `universe add` as data, never as shell."""
    args = {"q": "x'; touch /tmp/pwned; echo '$(id)`id`", "n": [1, "two"]}
    line = add_command(Path("scen dir/fixture.universe.json"), "lookup; rm -rf ~", args)
    argv = shlex.split(line)
    assert argv[:5] == ["wt-otel", "universe", "add", "scen dir/fixture.universe.json", "--tool"]
    assert argv[5] == "lookup; rm -rf ~" and json.loads(argv[7]) == args and argv[8:] == ["--result", "RESULT_JSON"]


def test_result_value_keeps_what_the_tool_returned_not_the_sdk_wrap() -> None:
    assert result_value({"result": [1, 2]}, ["[1, 2]"]) == [1, 2]
    assert result_value({"result": {"a": 1}}, ["{}"]) == {"result": {"a": 1}}  # an object is the tool's own
    assert result_value(None, ["Paris"]) == "Paris"
    assert result_value(None, ['{"a": 1}']) == {"a": 1}


# ---------------------------------------------------------------- universe add


def universe_file(tmp_path: Path, data: dict | None = None) -> Path:
    path = tmp_path / "fixture.universe.json"
    path.write_text(json.dumps(data or UNIVERSE))
    return path


def test_universe_add_writes_a_manual_answer_that_validation_and_replay_accept(tmp_path: Path) -> None:
    path = universe_file(tmp_path)
    res = CliRunner().invoke(main, ["universe", "add", str(path), "--tool", "lookup_order",
                                    "--args", '{"order_id": "B-2"}', "--result", '[{"status": "lost"}]'])
    assert res.exit_code == 0, res.output
    assert "added recordings[1]" in res.output and "source manual" in res.output
    data = json.loads(path.read_text())
    assert data["recordings"][1] == {"tool_name": "lookup_order", "args": {"order_id": "B-2"},
                                     "result": [{"status": "lost"}], "source": "manual"}
    assert CliRunner().invoke(main, ["validate", str(path)]).exit_code == 0
    # the same call again replaces the answer (a corrected review), a new tool is added and flagged
    CliRunner().invoke(main, ["universe", "add", str(path), "--tool", "lookup_order", "--args", '{"order_id": "B-2"}',
                              "--error", "order service down"], catch_exceptions=False)
    res = CliRunner().invoke(main, ["universe", "add", str(path), "--tool", "refund", "--args", '{"amount": 5}',
                                    "--result", '"ok"'])
    data = json.loads(path.read_text())
    assert len(data["recordings"]) == 3 and data["recordings"][1]["error"] == "order service down"
    assert data["stubbed_schemas"] == ["refund"] and "added tool 'refund'" in res.output
    assert data["tools"][-1]["input_schema"] == {"type": "object", "properties": {"amount": {"type": "integer"}}}
    load_universe(data)


@pytest.mark.parametrize(("argv", "code", "said"), [
    (["--args", "{}"], 2, "exactly one of --result JSON or --error TEXT"),
    (["--args", "{}", "--result", "1", "--error", "x"], 2, "exactly one of"),
    (["--args", "[1]", "--result", "1"], 2, "--args must be a JSON object"),
    (["--args", "{}", "--result", "RESULT_JSON"], 2, "replace it with the tool's answer"),
])
def test_universe_add_says_what_is_wrong_without_a_traceback(tmp_path: Path, argv: list[str], code: int,
                                                             said: str) -> None:
    path = universe_file(tmp_path)
    res = CliRunner().invoke(main, ["universe", "add", str(path), "--tool", "lookup_order", *argv])
    assert res.exit_code == code and said in res.output and "Traceback" not in res.output, res.output
    assert json.loads(path.read_text()) == UNIVERSE


def test_universe_add_refuses_a_file_that_is_not_a_universe(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("[1]")
    res = CliRunner().invoke(main, ["universe", "add", str(path), "--tool", "t", "--args", "{}", "--result", "1"])
    assert res.exit_code == 1 and "not a universe file" in res.output


# ---------------------------------------------------------------- a sweep with a miss, and universe record


def sweep(paths: list[Path], runtime: Any, tmp_path: Path, **kwargs: Any) -> SweepRun:
    options = RunOptions(runtime=runtime, runs_dir=tmp_path / "runs", emit=lambda line: None, universe_port=0,
                         llm_port=0, **kwargs)
    return Sweep(options).run(load_all(find_scenarios(paths), options.llm))


def test_run_prints_the_add_command_and_universe_record_answers_from_a_stdio_server(tmp_path: Path) -> None:
    """A tool call production never made: the run's hint names it; `universe record --from COMMAND` asks the
    real server (here one started on stdio) once, shows and records the answer; the next run has no miss."""
    scenario = write_scenario(tmp_path / "s", "orders", assertions=[{"type": "output", "contains": "delayed"}])
    agent = UniverseAgent([("lookup_order", {"order_id": "B-2"})])
    done = sweep([scenario], PythonRuntime(agent), tmp_path)
    [row] = done.record.scenarios
    assert row.verdict == "FAIL" and row.triage == "recording_gap"
    hints = done.miss_hints()
    assert '      + order_id: "B-2"' not in hints and '      ~ order_id: "A-1" -> "B-2"' in hints, hints
    path = scenario / "fixture.universe.json"
    assert f"    {add_command(path, 'lookup_order', {'order_id': 'B-2'})}" in hints
    [record] = [shlex.split(h)[1:] for h in hints if h.strip().startswith("wt-otel universe record")]

    production = tmp_path / "production.universe.json"
    production.write_text(json.dumps({**UNIVERSE, "recordings": [
        {"tool_name": "lookup_order", "args": {"order_id": "B-2"}, "result": ["delayed", "in Lyon"]}]}))
    command = shlex.join([sys.executable, "-m", "wt_otel.cli", "universe", "serve", str(production), "--stdio"])
    res = CliRunner().invoke(main, [command if a == "URL_OR_COMMAND" else a for a in record])
    assert res.exit_code == 0, res.output
    assert 'lookup_order({"order_id": "B-2"}) -> ["delayed", "in Lyon"]' in res.output
    assert json.loads(path.read_text())["recordings"][-1] == {
        "tool_name": "lookup_order", "args": {"order_id": "B-2"}, "result": ["delayed", "in Lyon"],
        "source": "recorded"}

    again = sweep([scenario], PythonRuntime(agent), tmp_path)
    assert again.record.scenarios[0].verdict == "PASS" and again.miss_hints() == []


def test_universe_record_says_when_the_server_cannot_be_reached(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path / "s", "orders")
    done = sweep([scenario], PythonRuntime(UniverseAgent([("lookup_order", {"order_id": "B-2"})])), tmp_path)
    res = CliRunner().invoke(main, ["universe", "record", str(scenario / "fixture.universe.json"), "--from",
                                    "http://127.0.0.1:9/mcp", "--sweep", str(done.directory), "--timeout", "5"])
    assert res.exit_code == 1 and "cannot ask the tool server at http://127.0.0.1:9/mcp" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(main, ["universe", "record", str(scenario / "fixture.universe.json"), "--from", "x",
                                    "--sweep", str(tmp_path)])
    assert res.exit_code == 1 and "is not a sweep of `wt-otel run`" in res.output


def test_hints_are_empty_without_misses_and_name_a_scenario_without_universe() -> None:
    assert hint_lines([], Path("runs/x")) == []
    assert tool_misses("s", None, []) == []


# ---------------------------------------------------------------- one verdict per miss, whatever the runtime


def ask_model(text: str) -> str:
    """A naive agent: its real OpenAI client against the served model, with a prompt the recording never
    saw; whatever the client raises, it raises."""
    client = openai.OpenAI(base_url=os.environ[ENV_LLM_BASE_URL], api_key="x", max_retries=0)
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": llm_calls.SYSTEM + " Be brief."}, {"role": "user", "content": text}])
    return answer.choices[0].message.content or ""


def ask_tool(text: str) -> str:
    """A naive agent's tool step: one call the universe has no answer for; an error result raises."""
    [(result, is_error)] = asyncio.run(_call(os.environ[ENV_UNIVERSE_URL], [("lookup_order", {"order_id": "Z"})],
                                             None))
    if is_error:
        raise RuntimeError(f"lookup_order failed: {result}")
    return json.dumps(result)


def python_agent(work: Callable[[str], str]) -> Callable[[str, str], dict[str, Any]]:
    def agent(text: str, session_id: str) -> dict[str, Any]:
        return {"reply": work(text), "tool_calls": []}

    agent.reset = lambda: None  # type: ignore[attr-defined]
    return agent


class Endpoint(JsonEndpoint):
    """The same agent behind Contract C: an exception is a 500 (`crash`) or a 200 with `error` set."""

    def __init__(self, crash: bool, work: Callable[[str], str]) -> None:
        super().__init__()
        self.crash, self.work = crash, work

    def handle(self, path: str, body: Any) -> Reply:
        if path != "/wt/inject":
            return 200, {"wt_inject": 1}
        try:
            return 200, {"wt_inject": 1, "reply": self.work(body["text"]), "tool_calls": []}
        except Exception as exc:
            if self.crash:
                return 500, {"detail": str(exc)}
            return 200, {"wt_inject": 1, "reply": "", "tool_calls": [], "error": str(exc)}


def runtimes(work: Callable[[str], str]) -> Iterator[dict[str, Callable[[], Any]]]:
    with Endpoint(True, work) as crash, Endpoint(False, work) as honest:
        yield {"python (raises)": lambda: PythonRuntime(python_agent(work)),
               "http_inject (500)": lambda: HttpInjectRuntime(crash.url, 10),
               "http_inject (200 + error)": lambda: HttpInjectRuntime(honest.url, 10)}


@pytest.fixture
def endpoints() -> Iterator[dict[str, Callable[[], Any]]]:
    yield from runtimes(ask_model)


@pytest.fixture
def tool_endpoints() -> Iterator[dict[str, Callable[[], Any]]]:
    yield from runtimes(ask_tool)


def test_the_same_tool_miss_is_one_verdict_under_every_runtime(tmp_path: Path,
                                                                tool_endpoints: dict[str, Callable[[], Any]]) -> None:
    scenario = write_scenario(tmp_path / "s", "orders", assertions=[{"type": "output", "contains": "shipped"}])
    seen = {}
    for name, runtime in tool_endpoints.items():
        [row] = sweep([scenario], runtime(), tmp_path / name).record.scenarios
        seen[name] = (row.verdict, row.triage)
    assert set(seen.values()) == {("FAIL", "recording_gap")}, seen


def test_the_same_llm_miss_is_one_verdict_under_every_runtime(tmp_path: Path,
                                                               endpoints: dict[str, Callable[[], Any]]) -> None:
    """The docs' verdict table: a model request the cassette does not hold is FAIL, triaged by why it missed,
    whether the agent raised (python), answered 500 or reported the error in a 200 (http_inject)."""
    scenario = write_scenario(tmp_path / "s", "apis", universe={**UNIVERSE, "tools": [], "recordings": []},
                              user_turns=[llm_calls.ASK], assertions=[{"type": "output", "contains": "ops@"}])
    (scenario / "llm.cassette.json").write_text(json.dumps(llm_calls.cassette(llm_calls.CALLS)))
    doc = (scenario / "scenario.yaml").read_text().replace("fixtures:\n", "fixtures:\n  cassette: llm.cassette.json\n")
    (scenario / "scenario.yaml").write_text(doc)
    seen = {}
    for name, runtime in endpoints.items():
        done = sweep([scenario], runtime(), tmp_path / name, llm="replay")
        [row] = done.record.scenarios
        seen[name] = (row.verdict, row.triage)
        assert "the agent failed after a miss" in (row.detail or "") or "422" in (row.detail or ""), row.detail
    assert set(seen.values()) == {("FAIL", "prompt_changed")}, seen


def test_a_failure_without_any_miss_stays_an_error(tmp_path: Path) -> None:
    """Only a miss explains an agent's crash: without one, a raising agent is still ERROR (environment)."""
    def broken(text: str, session_id: str) -> dict[str, Any]:
        raise RuntimeError("the agent is broken")

    broken.reset = lambda: None  # type: ignore[attr-defined]
    scenario = write_scenario(tmp_path / "s", "orders")
    [row] = sweep([scenario], PythonRuntime(broken), tmp_path).record.scenarios
    assert (row.verdict, row.triage) == ("ERROR", "environment")


# ---------------------------------------------------------------- why an LLM request missed


def test_an_llm_miss_says_whether_the_prompt_changed_the_path_is_new_or_an_old_run_is_back() -> None:
    from wt_otel.contracts.cassette import load_cassette
    from wt_otel.replay.cassette import CassetteReplay

    old, new = "d" * 32, llm_calls.RUN
    incident = llm_calls.llm_call([{"role": "system", "content": "Old prompt."}, {"role": "user", "content": "Hi"}],
                                  [{"delta_ms": 0, "chunk": "Hello", "finish_reason": "stop"}])
    data = llm_calls.cassette(llm_calls.CALLS)
    data["history_keys"] = [old, new]
    data["traces"][old] = {"trace_id": old, "calls": [incident]}
    replay = CassetteReplay(load_cassette(data))

    def kind(messages: list[dict]) -> dict:
        reply = replay.answer({"model": "gpt-4o-mini", "messages": messages})
        assert reply.status == 422
        return {k: v for k, v in reply.error["divergence"].items() if k in ("kind", "changed", "matches_run")}

    system = {"role": "system", "content": llm_calls.SYSTEM}
    assert kind([{"role": "system", "content": "New."}, {"role": "user", "content": llm_calls.ASK}]) == {
        "kind": "prompt_changed", "changed": ["system prompt"]}
    assert kind([system, {"role": "user", "content": "Phone of Bluewing?"}]) == {"kind": "new_path"}
    assert kind(incident["request_context"]["messages"]) == {"kind": "reintroduced", "matches_run": old}


def test_imported_mcp_results_drop_the_sdk_wrap_of_a_list() -> None:
    from wt_otel.model.parts import unwrap_mcp

    text = [{"type": "text", "text": '[{"id": 1}]'}]
    assert unwrap_mcp({"content": text, "structuredContent": {"result": [{"id": 1}]}, "isError": False}) == [
        {"id": 1}]
    assert unwrap_mcp({"content": text, "structuredContent": {"result": {"id": 1}}}) == {"result": {"id": 1}}
