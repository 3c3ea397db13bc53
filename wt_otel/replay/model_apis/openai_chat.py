"""OpenAI Chat Completions: the canonical shape itself, so translation is validation only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wt_otel.contracts.cassette import CassetteCall
from wt_otel.replay.cassette import chunks, completion

NAME = "openai_chat"


def shape_problem(body: Any) -> str | None:
    """What makes `body` not a chat-completions request the replay can match, or None."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    messages, tools = body.get("messages"), body.get("tools")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "messages must be an array of message objects"
    if tools is not None and not isinstance(tools, list):
        return "tools must be an array"
    for i, m in enumerate(messages):
        if "role" in m and not isinstance(m["role"], str):
            return f"messages[{i}].role must be a string"
        calls = m.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list):
            return f"messages[{i}].tool_calls must be an array"
        for j, c in enumerate(calls):
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(c, dict) or ("function" in c and not isinstance(fn, dict)):
                return f"messages[{i}].tool_calls[{j}] must be an object whose function is an object"
            if isinstance(fn, dict) and not isinstance(fn.get("name", ""), str):
                return f"messages[{i}].tool_calls[{j}].function.name must be a string"
    return None


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    problem = shape_problem(body)
    if problem:
        raise ValueError(problem)
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


# ------------------------------------------------------------------ recording (the live answer -> frames)

PROVIDER = "openai"


def record_json(rec: Any, body: dict[str, Any], t_ms: float) -> None:
    choice = (body.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    rec.text(t_ms, message.get("content") or "")
    for tc in message.get("tool_calls") or []:
        fn = tc.get("function") or {}
        rec.tool_call(t_ms, tc.get("id") or "", fn.get("name") or "", fn.get("arguments"))
    rec.finish_reason = choice.get("finish_reason")
    _usage(rec, body.get("usage"))


def _usage(rec: Any, usage: Any) -> None:
    if isinstance(usage, dict):
        rec.usage = {"prompt_tokens": usage.get("prompt_tokens") or 0,
                     "completion_tokens": usage.get("completion_tokens") or 0}


def record_event(rec: Any, state: dict[str, Any], name: str | None, data: dict[str, Any], t_ms: float) -> None:
    if data.get("error"):
        rec.failed(500, data)
        return
    _usage(rec, data.get("usage"))
    for choice in data.get("choices") or []:
        delta = choice.get("delta") or {}
        rec.text(t_ms, delta.get("content") or "")
        for tc in delta.get("tool_calls") or []:
            slot = state.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": "", "t": t_ms})
            fn = tc.get("function") or {}
            slot["id"] = tc.get("id") or slot["id"]
            slot["name"] += fn.get("name") or ""
            slot["arguments"] += fn.get("arguments") or ""
            slot["t"] = t_ms
        if choice.get("finish_reason"):
            rec.finish_reason = choice["finish_reason"]


def record_end(rec: Any, state: dict[str, Any], t_ms: float) -> None:
    for _, slot in sorted(state.items()):
        rec.tool_call(slot["t"], slot["id"], slot["name"], slot["arguments"])
