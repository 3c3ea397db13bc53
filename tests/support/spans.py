"""Semconv GenAI spans and messages for tests that build traces with the real OTel SDK."""

from __future__ import annotations

import json


def chat_span(tracer, model: str = "gpt-x", inputs=None, outputs=None, **attrs):
    """A semconv >= 1.37 chat span with JSON-string message attributes."""
    span_attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                  "gen_ai.provider.name": "openai", **attrs}
    if inputs is not None:
        span_attrs["gen_ai.input.messages"] = json.dumps(inputs)
    if outputs is not None:
        span_attrs["gen_ai.output.messages"] = json.dumps(outputs)
    with tracer.start_as_current_span(f"chat {model}", attributes=span_attrs) as span:
        return span


def user(text: str) -> dict:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def assistant(text: str | None = None, calls: list[tuple[str, str, dict]] = ()) -> dict:
    parts = [{"type": "text", "content": text}] if text else []
    parts += [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in calls]
    return {"role": "assistant", "parts": parts}


def tool(call_id: str, response) -> dict:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]}
