"""One small agent conversation as recorded LLM calls (the chat shape), shared by the model-API,
record-mode and runtime tests: ask for an e-mail, the model calls `client_lookup`, then answers."""

from __future__ import annotations

from typing import Any

RUN = "c" * 32
SYSTEM = "You are a CRM assistant."
ASK = "Email of Bluewing?"
LOOKUP = {"id": "call_1", "type": "function",
          "function": {"name": "client_lookup", "arguments": '{"query": "Bluewing"}'}}
RESULT = '{"email": "ops@bluewing.example"}'
ANSWER = "The email is ops@bluewing.example."


def llm_call(messages: list[dict], frames: list[dict], error: tuple[str, str] | None = None) -> dict[str, Any]:
    return {"request_context": {"model": "gpt-4o-mini", "provider": "openai", "messages": messages},
            "response_timeline": frames,
            "exception_boundary": ({"occurred": True, "error_type": error[0], "message": error[1]} if error
                                   else {"occurred": False}),
            "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}}


CALLS = [
    llm_call([{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}],
          [{"delta_ms": 0, "chunk": "", "tool_calls": [LOOKUP], "finish_reason": "tool_calls"}]),
    llm_call([{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK},
           {"role": "assistant", "content": "", "tool_calls": [LOOKUP]},
           {"role": "tool", "tool_call_id": "call_1", "content": RESULT}],
          [{"delta_ms": 0, "chunk": "The email is "}, {"delta_ms": 0, "chunk": "ops@bluewing.example."},
           {"delta_ms": 0, "chunk": "", "finish_reason": "stop"}]),
]


def cassette(calls: list[dict]) -> dict[str, Any]:
    return {"wt_cassette": 1, "scenario": "apis", "latest_trace_id": RUN, "history_keys": [RUN],
            "traces": {RUN: {"trace_id": RUN, "calls": calls}}}


TOOLS = [{"name": "client_lookup", "description": "Look up a client.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}]
ANTHROPIC_FOLLOW_UP = [
    {"role": "user", "content": ASK},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "client_lookup",
                                       "input": {"query": "Bluewing"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": RESULT}]},
]


