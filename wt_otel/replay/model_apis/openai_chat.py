"""OpenAI Chat Completions: the canonical shape itself, so translation is validation only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wt_otel.contracts.cassette import CassetteCall
from wt_otel.replay.cassette import chunks, completion

NAME = "openai_chat"


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    messages, tools = body.get("messages"), body.get("tools")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages must be an array of message objects")
    if tools is not None and not isinstance(tools, list):
        raise ValueError("tools must be an array")
    return body


def render(call: CassetteCall, ids: str, created: int) -> dict[str, Any]:
    return completion(call, f"chatcmpl-{ids}", created)


def stream(call: CassetteCall, ids: str, created: int, body: dict[str, Any],
           error: dict[str, Any] | None) -> Iterator[tuple[float, str | None, dict[str, Any] | str]]:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    for delay, chunk in chunks(call, f"chatcmpl-{ids}", created, include_usage):
        yield delay, None, chunk
    yield (0.0, None, {"error": error}) if error else (0.0, None, "[DONE]")


def error_body(status: int, error: dict[str, Any]) -> dict[str, Any]:
    return {"error": error}
