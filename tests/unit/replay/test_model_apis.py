"""Every common model API replays from one cassette: the real `openai` client on the Responses API,
the real `anthropic` client on Messages, and the OpenAI Agents SDK on its default (Responses) model,
all served from a cassette recorded in the provider-agnostic chat shape."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.support.llm_calls import (
    ANSWER,
    ANTHROPIC_FOLLOW_UP,
    ASK,
    CALLS,
    RESULT,
    SYSTEM,
    TOOLS,
    cassette,
    llm_call,
)
from wt_otel.contracts.cassette import load_cassette
from wt_otel.replay.cassette_server import DIVERGENCE_CODE, CassetteServer


@pytest.fixture
def server() -> Iterator[CassetteServer]:
    srv = CassetteServer(load_cassette(cassette(CALLS)), port=0)
    srv.start()
    yield srv
    srv.stop()


def host(srv: CassetteServer) -> str:
    return srv.base_url.removesuffix("/v1")


def log(srv: CassetteServer) -> list[tuple[str, Any]]:
    return [(e["match"], e["recorded_index"]) for e in srv.call_log()]


# ------------------------------------------------------------------ OpenAI Responses API

RESPONSES_FOLLOW_UP = [
    {"role": "user", "content": ASK},
    {"type": "function_call", "call_id": "call_1", "name": "client_lookup", "arguments": '{"query":"Bluewing"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": RESULT},
]


def test_responses_json_tool_call_then_text(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-replay")
    first = client.responses.create(model="gpt-4o-mini", instructions=SYSTEM, input=ASK)
    [item] = first.output
    assert (item.type, item.call_id, item.name, json.loads(item.arguments)) == (
        "function_call", "call_1", "client_lookup", {"query": "Bluewing"})
    assert first.usage.input_tokens == 40
    second = client.responses.create(model="gpt-4o-mini", instructions=SYSTEM, input=RESPONSES_FOLLOW_UP)
    assert second.output_text == ANSWER
    assert log(server) == [("exact", 0), ("exact", 1)]


def test_responses_stream_events_assemble_in_the_client(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-replay")
    with client.responses.stream(model="gpt-4o-mini", instructions=SYSTEM, input=ASK) as stream:
        kinds = [e.type for e in stream]
        first = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.done" in kinds
    assert [(o.type, o.call_id) for o in first.output] == [("function_call", "call_1")]
    events = list(client.responses.create(model="gpt-4o-mini", instructions=SYSTEM, input=RESPONSES_FOLLOW_UP,
                                          stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas == ["The email is ", "ops@bluewing.example."]
    assert events[-1].response.output_text == ANSWER


def test_responses_divergence_is_a_422_naming_the_message(server):
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-replay", max_retries=2)
    with pytest.raises(openai.UnprocessableEntityError) as err:
        client.responses.create(model="gpt-4o-mini", instructions="You are terse.", input=ASK)
    assert err.value.code == DIVERGENCE_CODE and "messages[0]" in str(err.value)
    assert len(server.call_log()) == 1, "a divergence is not retried"


def test_responses_malformed_input_is_a_400(server):
    request = urllib.request.Request(server.base_url + "/responses", data=json.dumps({"input": 5}).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400 and b"input must be" in err.value.read()
    assert server.call_log() == []


# ------------------------------------------------------------------ Anthropic Messages

def test_anthropic_json_tool_use_then_text(server):
    client = anthropic.Anthropic(base_url=host(server), api_key="sk-replay")
    first = client.messages.create(model="gpt-4o-mini", system=SYSTEM, max_tokens=256, tools=TOOLS,
                                   messages=[{"role": "user", "content": ASK}])
    [block] = first.content
    assert (block.type, block.id, block.name, block.input, first.stop_reason) == (
        "tool_use", "call_1", "client_lookup", {"query": "Bluewing"}, "tool_use")
    second = client.messages.create(model="gpt-4o-mini", system=SYSTEM, max_tokens=256, tools=TOOLS,
                                    messages=ANTHROPIC_FOLLOW_UP)
    assert (second.content[0].text, second.stop_reason, second.usage.output_tokens) == (ANSWER, "end_turn", 9)
    assert log(server) == [("exact", 0), ("exact", 1)]


def test_anthropic_stream_assembles_in_the_client(server):
    client = anthropic.Anthropic(base_url=host(server), api_key="sk-replay")
    with client.messages.stream(model="gpt-4o-mini", system=[{"type": "text", "text": SYSTEM}], max_tokens=256,
                                messages=[{"role": "user", "content": ASK}]) as stream:
        first = stream.get_final_message()
    assert [(b.type, b.input) for b in first.content] == [("tool_use", {"query": "Bluewing"})]
    with client.messages.stream(model="gpt-4o-mini", system=SYSTEM, max_tokens=256,
                                messages=ANTHROPIC_FOLLOW_UP) as stream:
        pieces = list(stream.text_stream)
    assert pieces == ["The email is ", "ops@bluewing.example."]


def test_anthropic_divergence_and_recorded_error_are_not_retried():
    failing = llm_call(CALLS[0]["request_context"]["messages"], [], ("RateLimitError", "slow down"))
    srv = CassetteServer(load_cassette(cassette([failing])), port=0)
    srv.start()
    try:
        client = anthropic.Anthropic(base_url=host(srv), api_key="sk-replay", max_retries=2)
        with pytest.raises(anthropic.RateLimitError, match="slow down"):
            client.messages.create(model="gpt-4o-mini", system=SYSTEM, max_tokens=64,
                                   messages=[{"role": "user", "content": ASK}])
        with pytest.raises(anthropic.UnprocessableEntityError, match="expected 'user: Email of Bluewing"):
            client.messages.create(model="gpt-4o-mini", system=SYSTEM, max_tokens=64,
                                   messages=[{"role": "user", "content": "something else"}])
        assert len(srv.call_log()) == 2
    finally:
        srv.stop()


# ------------------------------------------------------------------ OpenAI Agents SDK, default model API


@pytest.mark.parametrize("streamed", [False, True])
def test_agents_sdk_on_its_default_responses_model_replays(server, streamed):
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def client_lookup(query: str) -> dict:
        """Look up a client by name."""
        return {"email": "ops@bluewing.example"}

    model = agents.OpenAIResponsesModel("gpt-4o-mini", openai.AsyncOpenAI(base_url=server.base_url,
                                                                          api_key="sk-replay"))
    agent = agents.Agent("crm", instructions=SYSTEM, model=model, tools=[client_lookup])

    async def run() -> str:
        if not streamed:
            return (await agents.Runner.run(agent, ASK)).final_output
        result = agents.Runner.run_streamed(agent, ASK)
        async for _ in result.stream_events():
            pass
        return result.final_output

    assert asyncio.run(run()) == ANSWER
    assert log(server) == [("exact", 0), ("exact", 1)]


@pytest.mark.parametrize("route,body", [
    ("/responses", {"input": [{"type": "message", "role": "user", "content": [1, 2]}]}),
    ("/responses", {"input": [{"type": "function_call", "name": {"x": 1}, "arguments": 5}]}),
    ("/responses", {"input": [{"type": "computer_call"}]}),
    ("/messages", {"messages": [{"role": "user", "content": 7}]}),
    ("/messages", {"messages": [{"role": "tool", "content": "x"}]}),
    ("/messages", {"system": 5, "messages": []}),
    ("/messages", {"messages": [], "tools": [{"input_schema": {}, "name": 3}]}),
    ("/messages", "[" * 100_000 + "]" * 100_000),
])
def test_hostile_bodies_are_400s_naming_the_problem(server, route, body):
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    request = urllib.request.Request(server.base_url + route, data=data, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400 and b"invalid request body" in err.value.read()
    assert all(e["event"] != "llm_call" for e in server.call_log())
