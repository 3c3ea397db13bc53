"""The cassette LLM server as an agent meets it: the real `openai` client against a served cassette."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from chat_agent import run_conversation
from opentelemetry.trace import NoOpTracer

from tests.support.paths import PRODUCERS
from wt_otel.contracts.cassette import load_cassette
from wt_otel.exporters.scenario_dir import ScenarioDirWriter
from wt_otel.ingest.importer import import_dumps
from wt_otel.replay.cassette_server import (
    DIVERGENCE_CODE,
    DIVERGENCE_STATUS,
    IGNORED_FIELDS,
    KEY_FIELDS,
    CassetteServer,
    http_status,
)

PRODUCERS = PRODUCERS
SPAN_ATTRS = PRODUCERS / "openai-v2-span-attrs" / "dump.otlp.jsonl"
RUN_A, RUN_B = "a" * 32, "b" * 32
SYSTEM = {"role": "system", "content": "You are a CRM assistant."}
ASK = {"role": "user", "content": "Email of Bluewing?"}
LOOKUP = {"id": "call_1", "type": "function",
          "function": {"name": "client_lookup", "arguments": '{"query":"Bluewing"}'}}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"email":"ops@bluewing.example"}'}


def call(messages: list[dict], frames: list[dict], usage: tuple[int, int] = (10, 5), error: tuple | None = None,
         model: str = "gpt-4o-mini") -> dict[str, Any]:
    boundary = {"occurred": True, "error_type": error[0], "message": error[1]} if error else {"occurred": False}
    return {"request_context": {"model": model, "provider": "openai", "messages": messages},
            "response_timeline": frames, "exception_boundary": boundary,
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}}


def frame(chunk: str = "", tool_calls: list | None = None, finish: str | None = None, delta_ms: float = 0.0) -> dict:
    return {"delta_ms": delta_ms, "chunk": chunk, "tool_calls": tool_calls or [], "finish_reason": finish}


AGENT_CALLS = [
    call([SYSTEM, ASK], [frame(tool_calls=[LOOKUP], finish="tool_calls")], (44, 17)),
    call([SYSTEM, ASK, {"role": "assistant", "content": "", "tool_calls": [LOOKUP]}, TOOL_RESULT],
         [frame("The email is "), frame("ops@bluewing.example."), frame(finish="stop")], (68, 14)),
]


def cassette(*runs: list[dict]) -> dict[str, Any]:
    keys = [RUN_A, RUN_B][: len(runs)]
    return {"wt_cassette": 1, "scenario": "test", "latest_trace_id": keys[-1], "history_keys": keys,
            "traces": {k: {"trace_id": k, "calls": calls} for k, calls in zip(keys, runs, strict=True)}}


@pytest.fixture
def serve() -> Iterator:
    """Start servers on free ports; each is stopped at the end of the test."""
    started: list[CassetteServer] = []

    def start(data: dict | Path, **kw: Any) -> tuple[CassetteServer, openai.OpenAI]:
        server = CassetteServer(data if isinstance(data, Path) else load_cassette(data), port=0, **kw)
        started.append(server)
        return server, openai.OpenAI(base_url=server.start(), api_key="sk-replay", max_retries=2)

    yield start
    for server in started:
        server.stop()


def http(url: str, method: str = "GET") -> dict:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request) as r:
        return json.loads(r.read())


def text(client: openai.OpenAI, messages: list[dict] | None = None) -> str | None:
    """The content of a non-streamed answer to `messages` (default: system + question)."""
    out = client.chat.completions.create(model="gpt-4o-mini", messages=messages or [SYSTEM, ASK])
    return out.choices[0].message.content


# ------------------------------------------------------------------ answers


def test_json_completion_with_tool_call_and_usage(serve):
    _, client = serve(cassette(AGENT_CALLS))
    out = client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK])
    assert out.object == "chat.completion" and out.model == "gpt-4o-mini"
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [tc] = choice.message.tool_calls
    assert (tc.id, tc.function.name, tc.function.arguments) == ("call_1", "client_lookup", '{"query":"Bluewing"}')
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) == (44, 17, 61)


def test_json_completion_joins_frames(serve):
    _, client = serve(cassette(AGENT_CALLS))
    out = client.chat.completions.create(model="gpt-4o-mini", messages=AGENT_CALLS[1]["request_context"]["messages"])
    assert out.choices[0].message.content == "The email is ops@bluewing.example."
    assert out.choices[0].finish_reason == "stop"


def test_stream_replays_one_chunk_per_frame_then_finish_usage_and_done(serve):
    _, client = serve(cassette(AGENT_CALLS))
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=AGENT_CALLS[1]["request_context"]["messages"],
                                            stream=True, stream_options={"include_usage": True})
    got = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in got)
    deltas = [c.choices[0].delta.content for c in got if c.choices]
    assert deltas == ["The email is ", "ops@bluewing.example.", "", None]
    assert got[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in got if c.choices][-1] == "stop"
    assert got[-1].choices == [] and got[-1].usage.total_tokens == 82


def test_stream_tool_call_is_reassembled_from_deltas(serve):
    second = {"id": "call_2", "type": "function", "function": {"name": "audit", "arguments": "{}"}}
    # §2.2: the terminal frame carries every tool call (a non-final one may not)
    calls = [call([SYSTEM, ASK], [frame("Looking up."), frame(tool_calls=[LOOKUP, second], finish="tool_calls")])]
    _, client = serve(cassette(calls))
    said, contents, assembled, finish = "", [], {}, None
    for chunk in client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK], stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        said += delta.content or ""
        contents.append(delta.content)
        finish = chunk.choices[0].finish_reason or finish
        for tc in delta.tool_calls or []:
            slot = assembled.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            slot["name"] += (tc.function.name or "") if tc.function else ""
            slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
    assert said == "Looking up." and finish == "tool_calls"
    assert contents == ["Looking up.", None, None], "a tool-call-only frame has content null, as OpenAI's"
    assert assembled == {0: {"id": "call_1", "name": "client_lookup", "arguments": '{"query":"Bluewing"}'},
                         1: {"id": "call_2", "name": "audit", "arguments": "{}"}}
    # the JSON answer merges the same frames the same way
    out = client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK])
    assert [(t.id, t.function.arguments) for t in out.choices[0].message.tool_calls] == [
        ("call_1", '{"query":"Bluewing"}'), ("call_2", "{}")]


def test_models_lists_the_recorded_models(serve):
    calls = [*AGENT_CALLS, call([SYSTEM, {"role": "user", "content": "x"}], [frame("y")], model="gpt-4.1")]
    _, client = serve(cassette(calls))
    assert [m.id for m in client.models.list()] == ["gpt-4o-mini", "gpt-4.1"]


# ------------------------------------------------------------------ matching


def test_exact_match_ignores_volatile_fields_and_wire_spelling(serve):
    server, client = serve(cassette(AGENT_CALLS))
    messages = [SYSTEM, {"role": "user", "content": [{"type": "text", "text": "Email of Bluewing?"}]},
                {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
                    {**LOOKUP, "function": {"name": "client_lookup", "arguments": '{ "query": "Bluewing" }'}}]},
                {**TOOL_RESULT, "content": '{"email": "ops@bluewing.example"}'}]
    out = client.chat.completions.create(model="gpt-4o-mini", messages=messages, temperature=0.3, seed=7,
                                         user="u1", metadata={"run": "x"}, max_tokens=99)
    assert out.choices[0].message.content == "The email is ops@bluewing.example."
    [entry] = server.call_log()
    assert (entry["event"], entry["match"], entry["recorded_index"], entry["status"]) == ("llm_call", "exact", 1, 200)
    assert set(KEY_FIELDS).isdisjoint(IGNORED_FIELDS) and {"temperature", "seed", "stream"} <= IGNORED_FIELDS


def test_exact_miss_is_a_structured_divergence_not_retried(serve):
    server, client = serve(cassette(AGENT_CALLS))
    changed = [{"role": "system", "content": "You are a sales assistant."}, ASK]
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=changed)
    err = caught.value
    assert err.status_code == DIVERGENCE_STATUS == 422 and err.code == DIVERGENCE_CODE
    assert err.param == "messages[0]" and "sales assistant" in err.message and "CRM assistant" in err.message
    [entry] = server.call_log()  # x-should-retry: false, so the client's 2 retries did not happen
    assert entry["event"] == "llm_divergence" and entry["match"] == "miss" and entry["recorded_index"] is None
    assert entry["divergence"]["at"] == "messages[0]" and entry["divergence"]["nearest_recorded_index"] == 0
    assert entry["divergence"]["expected"].startswith("system: You are a CRM")


def test_exact_miss_on_model(serve):
    server, client = serve(cassette(AGENT_CALLS))
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="gpt-5", messages=[SYSTEM, ASK])
    divergence = server.call_log()[0]["divergence"]
    assert divergence.pop("diff") == ["model changed: 'gpt-4o-mini' -> 'gpt-5'"]
    assert divergence == {"at": "model", "expected": "gpt-4o-mini", "received": "gpt-5", "nearest_recorded_index": 0,
                          "kind": "prompt_changed", "changed": ["model"]}  # why it missed: replay.misses


def test_tools_count_only_when_recorded(serve):
    tool = {"type": "function", "function": {"name": "client_lookup", "parameters": {"type": "object"}}}
    recorded = call([SYSTEM, ASK], [frame("ok")])
    recorded["request_context"]["tools"] = [tool]
    _, client = serve(cassette([recorded]))
    assert client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK], tools=[tool]).choices
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK])
    assert caught.value.param == "tools"
    _, untooled = serve(cassette(AGENT_CALLS))  # the importer records no tools: any tools match
    assert untooled.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK], tools=[tool]).choices


def test_sequence_mode_serves_recorded_order_until_the_end_then_reset(serve):
    server, client = serve(cassette(AGENT_CALLS), match="sequence")
    other = [{"role": "user", "content": "something else entirely"}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=other)
    assert first.choices[0].message.tool_calls[0].id == "call_1"
    second = client.chat.completions.create(model="gpt-4o-mini", messages=other)
    assert second.choices[0].message.content == "The email is ops@bluewing.example."
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=other)
    assert caught.value.code == DIVERGENCE_CODE and "end of recording (2 call(s))" in caught.value.message
    log = server.call_log()
    assert [(e["match"], e["recorded_index"], e.get("request_matched")) for e in log] == [
        ("sequence", 0, False), ("sequence", 1, False), ("miss", None, None)]
    server.reset()
    assert server.call_log() == []
    again = client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK])
    assert again.choices[0].message.tool_calls[0].id == "call_1"
    assert server.call_log()[0]["request_matched"] is True


def test_identical_requests_get_the_next_identical_recording(serve):
    """A retry after a recorded error is answered with what the recording got next."""
    calls = [call([SYSTEM, ASK], [], error=("RateLimitError", "slow down")), call([SYSTEM, ASK], [frame("hi")])]
    server, client = serve(cassette(calls))
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK])
    for _ in range(2):  # then the last one again: a further retry is not a divergence
        assert text(client) == "hi"
    assert [e["recorded_index"] for e in server.call_log()] == [0, 1, 1]


def test_call_log_and_reset_over_http(serve):
    server, client = serve(cassette(AGENT_CALLS))
    client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK], stream=True).close()
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="gpt-4o-mini", messages=[ASK])
    root = server.base_url.removesuffix("/v1")
    log = http(root + "/wt/llm-calls")
    assert log["run"] == RUN_A and log["match"] == "exact"
    assert [(e["seq"], e["event"], e["match"], e["stream"]) for e in log["calls"]] == [
        (0, "llm_call", "exact", True), (1, "llm_divergence", "miss", False)]
    assert http(root + "/wt/reset", "POST")["ok"] is True
    assert http(root + "/wt/llm-calls")["calls"] == []


def test_runs_follow_the_ring_buffer(serve):
    old = [call([SYSTEM, ASK], [frame("old answer")])]
    new = [call([SYSTEM, ASK], [frame("new answer")])]
    _, latest = serve(cassette(old, new))
    assert text(latest) == "new answer"
    _, chosen = serve(cassette(old, new), run=RUN_A)
    assert text(chosen) == "old answer"
    with pytest.raises(ValueError, match="history_keys"):
        CassetteServer(load_cassette(cassette(old, new)), run="c" * 32)


def test_spec_single_call_trace_is_served(serve):
    data = cassette([])
    entry = data["traces"][RUN_A]
    del entry["calls"]
    entry.update(call([SYSTEM, ASK], [frame("only call", finish="stop")]))
    _, client = serve(data)
    assert text(client) == "only call"


# ------------------------------------------------------------------ recorded exceptions


@pytest.mark.parametrize(("error_type", "status", "exc"), [
    ("RateLimitError", 429, openai.RateLimitError),
    ("openai.APITimeoutError", 504, openai.InternalServerError),
    ("PermissionError", 403, openai.PermissionDeniedError),
    ("InputGuardrailTripwireTriggered", 403, openai.PermissionDeniedError),
    ("BadRequestError", 400, openai.BadRequestError),
    ("KeyError", 500, openai.InternalServerError),
])
def test_recorded_exception_becomes_the_matching_http_error(serve, error_type, status, exc):
    server, client = serve(cassette([call([SYSTEM, ASK], [], error=(error_type, "recorded detail"))]))
    with pytest.raises(exc) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK])
    assert caught.value.status_code == status and caught.value.body["message"] == "recorded detail"
    assert caught.value.body["recorded_error_type"] == error_type
    assert len(server.call_log()) == 1, "replayed errors are not retried"


def test_error_mapping_table():
    assert http_status("TimeoutError") == (504, "timeout_error")
    assert http_status("429") == (429, "api_error")
    assert http_status("anthropic.OverloadedError") == (503, "service_unavailable_error")
    assert http_status(None) == (500, "server_error")


def test_stream_replays_frames_then_the_recorded_error(serve):
    calls = [call([SYSTEM, ASK], [frame("Partial "), frame("answer")], error=("GuardrailError", "DLP block"))]
    server, client = serve(cassette(calls))
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK], stream=True):
            received.append(chunk.choices[0].delta.content)
    assert received == ["Partial ", "answer"]
    assert caught.value.message == "DLP block" and caught.value.type == "permission_error"
    assert server.call_log()[0]["error"] == "GuardrailError"
    # the same call without stream: the HTTP error
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK])


def test_pace_replays_recorded_delays(serve):
    calls = [call([SYSTEM, ASK], [frame("a", delta_ms=120), frame("b", delta_ms=120, finish="stop")])]
    for pace, slow in ((True, True), (False, False)):
        _, client = serve(cassette(calls), pace=pace)
        start = time.perf_counter()
        list(client.chat.completions.create(model="gpt-4o-mini", messages=[SYSTEM, ASK], stream=True))
        assert (time.perf_counter() - start >= 0.24) is slow


# ------------------------------------------------------------------ an imported cassette


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported")
    report = import_dumps([SPAN_ATTRS], ScenarioDirWriter(out))
    assert report.ok, report.errors
    [scenario] = report.written
    return scenario


def _recorded(scenario: Path) -> list[dict]:
    data = json.loads((scenario / "llm.cassette.json").read_text())
    return data["traces"][data["latest_trace_id"]]["calls"]


@pytest.mark.parametrize("match", ["sequence", "exact"])
def test_imported_cassette_replays_its_calls(serve, imported, match):
    server, client = serve(imported, match=match)
    recorded = _recorded(imported)
    assert len(recorded) == 4
    for n, rec in enumerate(recorded):
        ctx = rec["request_context"]
        messages = ctx["messages"] if match == "exact" else [{"role": "user", "content": f"turn {n}"}]
        msg = client.chat.completions.create(model=ctx["model"], messages=messages).choices[0].message
        [want] = rec["response_timeline"]
        assert (msg.content or "") == want["chunk"]
        assert [(t.id, t.function.name, t.function.arguments) for t in msg.tool_calls or []] == [
            (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in want["tool_calls"]]
    assert [(e["match"], e["recorded_index"]) for e in server.call_log()] == [(match, i) for i in range(4)]


def test_the_recording_agent_replays_with_zero_divergence(serve, imported):
    """The agent loop that made the producer fixture, run against its own imported cassette:
    every request (the last one streamed) matches exactly, and the conversation comes out the same."""
    server, client = serve(imported)
    history = run_conversation(client, NoOpTracer())
    log = server.call_log()
    assert [(e["event"], e["match"], e["recorded_index"]) for e in log] == [
        ("llm_call", "exact", i) for i in range(4)]
    assert log[-1]["stream"] is True
    assert history[-1]["content"] == _recorded(imported)[-1]["response_timeline"][0]["chunk"]


def test_openai_agents_sdk_replays_with_zero_divergence(serve):
    """The framework the reference agent is built on: its chat-completions model, streamed, with a
    function tool whose dict result it sends back as `str(result)` (a Python literal, not JSON)."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def client_lookup(query: str) -> dict:
        """Look up a client by name."""
        return {"email": "ops@bluewing.example"}

    server, _ = serve(cassette(AGENT_CALLS))
    model = agents.OpenAIChatCompletionsModel("gpt-4o-mini", openai.AsyncOpenAI(base_url=server.base_url,
                                                                                 api_key="sk-replay"))
    agent = agents.Agent("crm", instructions=SYSTEM["content"], model=model, tools=[client_lookup])

    async def run() -> str:
        result = agents.Runner.run_streamed(agent, ASK["content"])
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert asyncio.run(run()) == "The email is ops@bluewing.example."
    assert [(e["match"], e["recorded_index"], e["stream"]) for e in server.call_log()] == [
        ("exact", 0, True), ("exact", 1, True)]


# ------------------------------------------------------------------ CLI


def test_cli_serve_prints_the_url_and_one_line_per_request(imported):
    proc = subprocess.Popen([sys.executable, "-m", "wt_otel.cli", "cassette", "serve", str(imported), "--port", "0",
                             "--match", "sequence"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        url = next(word for word in first.split() if word.startswith("http://"))
        client = openai.OpenAI(base_url=url, api_key="sk-replay")
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        line = proc.stdout.readline()
        assert "sequence" in line and "recorded[0]" in line and "200" in line
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_malformed_request_is_a_400_not_a_dropped_connection(serve):
    server, client = serve(cassette(AGENT_CALLS))
    with pytest.raises(openai.BadRequestError, match="messages must be an array"):
        client.chat.completions.create(model="gpt-4o-mini", messages="hello")  # type: ignore[arg-type]
    assert server.call_log() == [], "not a call: nothing to match"
