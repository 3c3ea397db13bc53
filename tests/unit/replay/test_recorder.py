"""Record mode: the real clients talk through the recording proxy to a live (fake) provider; what it
writes is a valid cassette whose ring buffer grows run by run, and which replays the same conversation
with zero divergence."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from fake_openai import FIRST_ANSWER, start_server

import tests.support.producers  # noqa: F401  (puts the fake provider on sys.path)
from tests.support.llm_calls import ANSWER, ANTHROPIC_FOLLOW_UP, ASK, CALLS, SYSTEM, TOOLS, cassette, llm_call
from tests.support.servers import StartedServers
from wt_otel.contracts.cassette import HISTORY_CAP, load_cassette
from wt_otel.contracts.problems import ContractError
from wt_otel.replay.cassette_server import CassetteServer
from wt_otel.replay.recorder import RecordingProxy

CHAT_TOOLS = [{"type": "function", "function": {"name": "client_lookup", "description": "Look up a client.",
                                                 "parameters": {"type": "object",
                                                                "properties": {"query": {"type": "string"}}}}}]


@pytest.fixture
def upstream() -> Iterator[str]:
    server, port = start_server()
    yield f"http://127.0.0.1:{port}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxies() -> Iterator[StartedServers]:
    with StartedServers() as start:
        yield start


def chat_conversation(client: openai.OpenAI, stream: bool) -> str:
    """A plain openai-client tool loop: ask, run the tool, answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}]
    while True:
        if stream:
            parts, calls = [], {}
            for chunk in client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=CHAT_TOOLS,
                                                        stream=True, stream_options={"include_usage": True}):
                delta = chunk.choices[0].delta if chunk.choices else None
                if delta and delta.content:
                    parts.append(delta.content)
                for tc in (delta.tool_calls or []) if delta else []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
            text, tool_calls = "".join(parts), list(calls.values())
        else:
            message = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                                     tools=CHAT_TOOLS).choices[0].message
            text = message.content or ""
            tool_calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                          for c in message.tool_calls or []]
        if not tool_calls:
            return text
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in tool_calls]})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": '{"email": "ops@bluewing.example"}'}
                     for c in tool_calls]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_record_then_replay_with_zero_divergence(tmp_path, upstream, proxies, stream):
    out = tmp_path / "llm.cassette.json"
    proxy = proxies(RecordingProxy(upstream, out, port=0))
    live = chat_conversation(openai.OpenAI(base_url=proxy.base_url, api_key="sk-live"), stream)
    assert live == FIRST_ANSWER
    assert not out.exists(), "nothing is written while the run is under way"
    assert proxy.end_run(keep=True).written
    data = json.loads(out.read_text())
    cas = load_cassette(data)
    [run] = cas.history_keys
    calls = cas.traces[run].llm_calls()
    assert [bool(c.response_timeline[-1].tool_calls) for c in calls] == [True, False]
    assert calls[0].response_timeline[-1].finish_reason == "tool_calls"
    assert calls[1].usage and calls[1].usage.completion_tokens == 14
    assert data["traces"][run]["calls"][0]["request_context"]["tools"][0]["function"]["name"] == "client_lookup"
    raw = calls[1].raw_payload
    assert (raw.stream_chunks if stream else raw.sync_response), "the provider's own payload is kept"
    replay = proxies(CassetteServer(out, port=0))
    assert chat_conversation(openai.OpenAI(base_url=replay.base_url, api_key="sk-replay"), stream) == live
    assert [(e["match"], e["recorded_index"]) for e in replay.call_log()] == [("exact", 0), ("exact", 1)]


def test_stream_chunks_are_coalesced_by_the_record_tick(tmp_path, upstream, proxies):
    wide = proxies(RecordingProxy(upstream, tmp_path / "wide.json", port=0, tick_ms=1e9))
    narrow = proxies(RecordingProxy(upstream, tmp_path / "narrow.json", port=0, tick_ms=0))
    for proxy in (wide, narrow):
        client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-live")
        list(client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}],
                                            stream=True))
        proxy.end_run(keep=True)
    [wide_call] = load_cassette(json.loads((tmp_path / "wide.json").read_text())).latest().llm_calls()
    [narrow_call] = load_cassette(json.loads((tmp_path / "narrow.json").read_text())).latest().llm_calls()
    words = len(FIRST_ANSWER.split(" "))
    assert len(wide_call.response_timeline) == 1 and wide_call.response_timeline[0].chunk == FIRST_ANSWER
    assert len(narrow_call.response_timeline) == words
    assert "".join(f.chunk for f in narrow_call.response_timeline) == FIRST_ANSWER
    assert len(narrow_call.raw_payload.stream_chunks) == len(wide_call.raw_payload.stream_chunks) == words + 2
    assert wide_call.network_metrics.ttfb_ms == wide_call.response_timeline[0].delta_ms
    assert [f.finish_reason for f in narrow_call.response_timeline][-1] == "stop"
    assert all(f.finish_reason is None for f in narrow_call.response_timeline[:-1])


def test_responses_stream_recorded_and_replayed(tmp_path, upstream, proxies):
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(upstream, out, port=0))
    tools = [{"type": "function", "name": "client_lookup", "parameters": {"type": "object", "properties": {}}}]
    live = openai.OpenAI(base_url=proxy.base_url, api_key="sk-live")
    with live.responses.stream(model="gpt-4o-mini", instructions=SYSTEM, input=ASK, tools=tools) as s:
        first = s.get_final_response()
    proxy.end_run(keep=True)
    [call] = load_cassette(json.loads(out.read_text())).latest().llm_calls()
    assert call.request_context.messages[0].content == SYSTEM
    assert call.response_timeline[-1].tool_calls[0].id == first.output[0].call_id
    replay = proxies(CassetteServer(out, port=0))
    again = openai.OpenAI(base_url=replay.base_url, api_key="sk-replay").responses.create(
        model="gpt-4o-mini", instructions=SYSTEM, input=ASK, tools=tools)
    assert (again.output[0].name, again.output[0].call_id) == ("client_lookup", first.output[0].call_id)
    assert replay.call_log()[0]["match"] == "exact"


def test_anthropic_messages_recorded_through_the_proxy(tmp_path, proxies):
    """The upstream here speaks Anthropic Messages (a cassette server replaying the canonical calls)."""
    provider = proxies(CassetteServer(load_cassette(cassette(CALLS)), port=0))
    out = tmp_path / "anthropic.cassette.json"
    proxy = proxies(RecordingProxy(provider.base_url.removesuffix("/v1"), out, port=0))
    client = anthropic.Anthropic(base_url=proxy.base_url.removesuffix("/v1"), api_key="sk-live")
    with client.messages.stream(model="gpt-4o-mini", system=SYSTEM, max_tokens=64, tools=TOOLS,
                                messages=[{"role": "user", "content": ASK}]) as s:
        assert s.get_final_message().content[0].input == {"query": "Bluewing"}
    done = client.messages.create(model="gpt-4o-mini", system=SYSTEM, max_tokens=64, tools=TOOLS,
                                  messages=ANTHROPIC_FOLLOW_UP)
    assert done.content[0].text == ANSWER
    proxy.end_run(keep=True)
    calls = load_cassette(json.loads(out.read_text())).latest().llm_calls()
    assert [c.request_context.provider for c in calls] == ["anthropic", "anthropic"]
    assert calls[1].request_context.messages[-1].role == "tool"
    replay = proxies(CassetteServer(out, port=0))
    again = anthropic.Anthropic(base_url=replay.base_url.removesuffix("/v1"), api_key="x").messages.create(
        model="gpt-4o-mini", system=SYSTEM, max_tokens=64, tools=TOOLS, messages=ANTHROPIC_FOLLOW_UP)
    assert again.content[0].text == ANSWER and replay.call_log()[0]["match"] == "exact"


def test_runs_fill_the_ring_buffer_oldest_evicted(tmp_path, upstream, proxies):
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(upstream, out, port=0))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-live")
    runs = []
    for _ in range(HISTORY_CAP + 2):
        client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}])
        runs.append(proxy.cassette.run)
        urllib.request.urlopen(urllib.request.Request(proxy.base_url.removesuffix("/v1") + "/wt/reset",
                                                      data=b"{}", method="POST"), timeout=10)
    data = json.loads(out.read_text())
    assert data["history_keys"] == runs[-HISTORY_CAP:] and data["latest_trace_id"] == runs[-1]
    assert sorted(data["traces"]) == sorted(runs[-HISTORY_CAP:])
    # a second proxy on the same file appends, it does not start the history over
    again = proxies(RecordingProxy(upstream, out, port=0))
    openai.OpenAI(base_url=again.base_url, api_key="sk-live").chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}])
    ended = again.end_run(keep=True)
    assert json.loads(out.read_text())["history_keys"] == runs[-HISTORY_CAP + 1:] + [ended.run]


def test_upstream_error_is_passed_through_recorded_and_replayed(tmp_path, proxies):
    failing = llm_call([{"role": "user", "content": ASK}], [], ("RateLimitError", "slow down"))
    provider = proxies(CassetteServer(load_cassette(cassette([failing])), port=0))
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(provider.base_url, out, port=0))
    ask = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": ASK}]}
    with pytest.raises(openai.RateLimitError, match="slow down"):
        openai.OpenAI(base_url=proxy.base_url, api_key="sk", max_retries=0).chat.completions.create(**ask)
    proxy.end_run(keep=True)
    [call] = load_cassette(json.loads(out.read_text())).latest().llm_calls()
    assert call.exception_boundary.occurred and call.exception_boundary.error_type == "rate_limit_error"
    assert call.response_timeline == []
    replay = proxies(CassetteServer(out, port=0))
    with pytest.raises(openai.RateLimitError, match="slow down"):
        openai.OpenAI(base_url=replay.base_url, api_key="sk", max_retries=0).chat.completions.create(**ask)


def test_dead_upstream_is_a_502_and_nothing_recorded(tmp_path, proxies):
    out = tmp_path / "c.json"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    proxy = proxies(RecordingProxy(f"http://127.0.0.1:{dead}/v1", out, port=0))
    with pytest.raises(openai.InternalServerError, match="unreachable"):
        openai.OpenAI(base_url=proxy.base_url, api_key="sk", max_retries=0).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}])
    assert not out.exists()
    assert proxy.call_log()[0]["event"] == "upstream_error"


def test_an_unreadable_existing_cassette_is_refused_not_clobbered(tmp_path, upstream):
    out = tmp_path / "c.json"
    out.write_text('{"latest_trace_id": "nope", "traces": {}}')
    with pytest.raises(ContractError, match="latest_trace_id"):
        RecordingProxy(upstream, out, port=0)
    assert out.read_text() == '{"latest_trace_id": "nope", "traces": {}}'


def test_cli_cassette_record(tmp_path, upstream):
    out = tmp_path / "rec" / "llm.cassette.json"
    proc = subprocess.Popen([sys.executable, "-m", "wt_otel.cli", "cassette", "record", "--upstream", upstream,
                             "--out", str(out), "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stdout.readline()
        url = next(word for word in first.split() if word.startswith("http://"))
        openai.OpenAI(base_url=url, api_key="sk-live").chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": ASK}])
        line = proc.stdout.readline()
        assert "recorded[0]" in line and "200" in line and "openai_chat" in line
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert load_cassette(json.loads(out.read_text())).latest().llm_calls()[0].response_timeline[0].chunk == (
        FIRST_ANSWER)


def test_cli_cassette_record_rejects_a_bad_upstream(tmp_path):
    done = subprocess.run([sys.executable, "-m", "wt_otel.cli", "cassette", "record", "--upstream", "ftp://x",
                           "--out", str(tmp_path / "c.json"), "--port", "0"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "http(s) URL" in done.stderr


def test_malformed_but_forwarded_request_is_not_recorded(tmp_path, upstream, proxies):
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(upstream, out, port=0))
    request = urllib.request.Request(proxy.base_url + "/models", method="GET")
    with pytest.raises(urllib.error.HTTPError):  # the fake has no GET routes: passed through, not recorded
        urllib.request.urlopen(request, timeout=10)
    assert not out.exists()
