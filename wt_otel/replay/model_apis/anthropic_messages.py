"""Anthropic Messages (`POST /v1/messages`; give the `anthropic` client the bare host as base URL).

Request -> canonical chat: `system` (a string or text blocks) is the system
message; a message's `text` blocks are its content; an assistant's `tool_use`
blocks are its tool calls (`input` serialized as the JSON arguments); a user
message's `tool_result` blocks become tool messages (before the user's own text,
which follows them in the chat shape); `thinking` blocks carry no conversation.
Tools `{name, description, input_schema}` become chat tools.

Answer: a `message` with a `text` block and one `tool_use` block per recorded
tool call, `stop_reason` from the recorded finish reason; streamed as
`message_start`, `content_block_*`, `message_delta`, `message_stop`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from wt_otel.contracts.cassette import CassetteCall
from wt_otel.replay.model_apis._frames import arguments_object, chat_tool, said, text_of

NAME = "anthropic_messages"
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "refusal"}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 422: "invalid_request_error",
               429: "rate_limit_error", 503: "overloaded_error", 529: "overloaded_error"}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise ValueError("message content must be a string or an array of content blocks")
    return content


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        messages.append({"role": "system", "content": text_of(system, ("text",))})
    turns = body.get("messages")
    if not isinstance(turns, list) or not all(isinstance(m, dict) for m in turns):
        raise ValueError("messages must be an array of message objects")
    for turn in turns:
        role, blocks = turn.get("role"), _blocks(turn.get("content"))
        if role == "assistant":
            calls = [{"id": b.get("id") or "", "type": "function",
                      "function": {"name": b.get("name"), "arguments": json.dumps(b.get("input") or {})}}
                     for b in blocks if b.get("type") == "tool_use"]
            message: dict[str, Any] = {"role": "assistant", "content": text_of(blocks, ("text",))}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        elif role == "user":
            for b in blocks:
                if b.get("type") == "tool_result":
                    content = b.get("content")
                    messages.append({"role": "tool", "tool_call_id": b.get("tool_use_id") or "",
                                     "content": text_of(content, ("text",)) if isinstance(content, list)
                                     else content})
            text = text_of([b for b in blocks if b.get("type") != "tool_result"], ("text",))
            if text is not None:
                messages.append({"role": "user", "content": text})
        else:
            raise ValueError(f"message role must be user or assistant, got {role!r}")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError("tools must be an array")
    chat_tools = [chat_tool(t.get("name"), t.get("description"), t.get("input_schema"))
                  for t in tools or [] if isinstance(t, dict) and "input_schema" in t]
    return {"model": body.get("model"), "messages": messages, "tools": chat_tools if tools is not None else None,
            "stream": bool(body.get("stream"))}


def _stop_reason(call: CassetteCall) -> str:
    s = said(call)
    return "tool_use" if s.tool_calls else STOP_REASONS.get(s.finish_reason, "end_turn")


def _message(call: CassetteCall, ids: str, content: list[dict[str, Any]], stop: str | None,
             output_tokens: int) -> dict[str, Any]:
    s = said(call)
    return {"id": f"msg_{ids}", "type": "message", "role": "assistant", "model": call.request_context.model,
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": s.prompt_tokens, "output_tokens": output_tokens,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}


def render(call: CassetteCall, ids: str, created: int) -> dict[str, Any]:
    s = said(call)
    content: list[dict[str, Any]] = [{"type": "text", "text": s.text}] if s.text else []
    content += [{"type": "tool_use", "id": tc["id"], "name": tc["name"], "input": arguments_object(tc["arguments"])}
                for tc in s.tool_calls]
    return _message(call, ids, content, _stop_reason(call), s.completion_tokens)


def stream(call: CassetteCall, ids: str, created: int, body: dict[str, Any],
           error: dict[str, Any] | None) -> Iterator[tuple[float, str | None, dict[str, Any] | str]]:
    def event(kind: str, delay: float = 0.0, **fields: Any) -> tuple[float, str, dict[str, Any]]:
        return delay, kind, {"type": kind, **fields}

    yield event("message_start", message=_message(call, ids, [], None, 0))
    index = -1
    text_open = False
    for frame in call.response_timeline:
        delay = frame.delta_ms
        if frame.chunk:
            if not text_open:
                index += 1
                text_open = True
                yield event("content_block_start", delay, index=index, content_block={"type": "text", "text": ""})
                delay = 0.0
            yield event("content_block_delta", delay, index=index, delta={"type": "text_delta", "text": frame.chunk})
            delay = 0.0
        for tc in frame.tool_calls:
            if text_open:
                yield event("content_block_stop", index=index)
                text_open = False
            index += 1
            yield event("content_block_start", delay, index=index,
                        content_block={"type": "tool_use", "id": tc.id, "name": tc.function.name, "input": {}})
            delay = 0.0
            yield event("content_block_delta", index=index,
                        delta={"type": "input_json_delta", "partial_json": tc.function.arguments})
            yield event("content_block_stop", index=index)
    if error:
        yield 0.0, "error", error_body(500, error)
        return
    if text_open:
        yield event("content_block_stop", index=index)
    yield event("message_delta", delta={"stop_reason": _stop_reason(call), "stop_sequence": None},
                usage={"output_tokens": said(call).completion_tokens})
    yield event("message_stop")


def error_body(status: int, error: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's error envelope; the OpenAI-style fields (code, divergence...) ride along."""
    kind = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {**error, "type": kind, "message": error.get("message") or kind}}


# ------------------------------------------------------------------ recording (the live answer -> frames)

PROVIDER = "anthropic"
FINISH_REASONS = {v: k for k, v in STOP_REASONS.items()}


def record_json(rec: Any, body: dict[str, Any], t_ms: float) -> None:
    for block in body.get("content") or []:
        if block.get("type") == "text":
            rec.text(t_ms, block.get("text") or "")
        elif block.get("type") == "tool_use":
            rec.tool_call(t_ms, block.get("id") or "", block.get("name") or "", block.get("input") or {})
    rec.finish_reason = FINISH_REASONS.get(body.get("stop_reason") or "", "stop")
    usage = body.get("usage") or {}
    rec.usage = {"prompt_tokens": usage.get("input_tokens") or 0, "completion_tokens": usage.get("output_tokens") or 0}


def record_event(rec: Any, state: dict[str, Any], name: str | None, data: dict[str, Any], t_ms: float) -> None:
    kind = data.get("type") or name
    if kind == "message_start":
        usage = (data.get("message") or {}).get("usage") or {}
        rec.usage = {"prompt_tokens": usage.get("input_tokens") or 0, "completion_tokens": 0}
    elif kind == "content_block_start" and (data.get("content_block") or {}).get("type") == "tool_use":
        block = data["content_block"]
        state[data.get("index", 0)] = {"id": block.get("id") or "", "name": block.get("name") or "", "json": ""}
    elif kind == "content_block_delta":
        delta = data.get("delta") or {}
        if delta.get("type") == "text_delta":
            rec.text(t_ms, delta.get("text") or "")
        elif delta.get("type") == "input_json_delta" and data.get("index", 0) in state:
            state[data.get("index", 0)]["json"] += delta.get("partial_json") or ""
    elif kind == "content_block_stop" and data.get("index", 0) in state:
        slot = state.pop(data.get("index", 0))
        rec.tool_call(t_ms, slot["id"], slot["name"], slot["json"] or "{}")
    elif kind == "message_delta":
        reason = (data.get("delta") or {}).get("stop_reason")
        rec.finish_reason = FINISH_REASONS.get(reason or "", "stop")
        rec.usage["completion_tokens"] = (data.get("usage") or {}).get("output_tokens") or 0
    elif kind == "error":
        rec.failed(500, data)


def record_end(rec: Any, state: dict[str, Any], t_ms: float) -> None:
    """Tool calls complete at their `content_block_stop`."""
