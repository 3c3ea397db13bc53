"""The OpenAI Responses API (`POST /v1/responses`), the OpenAI Agents SDK's default model API.

Request -> canonical chat: `instructions` is the system message; `input` is a
string (one user message) or a list of items: messages (string or
`input_text`/`output_text` parts), `function_call` items (joined to the
assistant message just before them, as the Agents SDK's own chat converter
does), `function_call_output` items (tool messages); reasoning items carry no
conversation and are skipped. Tools `{type: function, name, parameters}` become
chat tools. Only `call_id` links a call to its output, as in the chat shape's
`tool_call_id`.

Answer: a `response` object whose `output` holds a `message` item (the text)
and one `function_call` item per recorded tool call; streamed as the API's
typed events (`response.created` ... `response.completed`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wt_otel.contracts.cassette import CassetteCall
from wt_otel.replay.model_apis._frames import Said, chat_tool, said, text_of

NAME = "openai_responses"
_TEXT = ("input_text", "output_text", "text")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise ValueError("instructions must be a string")
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValueError("input must be a string or an array of input items")
    for item in items:
        kind = item.get("type") or "message"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise ValueError(f"message role must be user, assistant, system or developer, got {role!r}")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": text_of(item.get("content"), _TEXT)})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments", ""), str):
                raise ValueError("a function_call item needs a string name and string arguments")
            call = {"id": item.get("call_id") or "", "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"}}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": None}
                messages.append(last)
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id") or "",
                             "content": text_of(output, _TEXT) if isinstance(output, list) else output})
        elif kind in ("reasoning", "item_reference"):
            continue
        else:
            raise ValueError(f"input item type {kind!r} cannot be replayed from a cassette")
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError("tools must be an array")
    chat_tools = [chat_tool(t.get("name"), t.get("description"), t.get("parameters"))
                  for t in tools or [] if isinstance(t, dict) and t.get("type", "function") == "function"]
    return {"model": body.get("model"), "messages": messages, "tools": chat_tools if tools is not None else None,
            "stream": bool(body.get("stream"))}


def _usage(s: Said) -> dict[str, Any]:
    return {"input_tokens": s.prompt_tokens, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": s.completion_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": s.prompt_tokens + s.completion_tokens}


def _message(ids: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{ids}", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _function_call(ids: str, n: int, tc: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{ids}_{n}", "call_id": tc["id"], "name": tc["name"],
            "arguments": tc["arguments"], "status": status}


def _response(call: CassetteCall, ids: str, created: int, status: str, output: list[dict[str, Any]],
              usage: dict[str, Any] | None) -> dict[str, Any]:
    s = said(call)
    incomplete = {"reason": "max_output_tokens"} if s.finish_reason == "length" and status == "incomplete" else None
    return {"id": f"resp_{ids}", "object": "response", "created_at": created, "status": status,
            "model": call.request_context.model, "output": output, "usage": usage, "error": None,
            "incomplete_details": incomplete, "instructions": None, "metadata": {}, "parallel_tool_calls": True,
            "temperature": None, "top_p": None, "tool_choice": "auto", "tools": [],
            "text": {"format": {"type": "text"}}, "truncation": "disabled", "background": False,
            "previous_response_id": None, "reasoning": None}


def render(call: CassetteCall, ids: str, created: int) -> dict[str, Any]:
    s = said(call)
    output = ([_message(ids, s.text)] if s.text else []) + [
        _function_call(ids, n, tc) for n, tc in enumerate(s.tool_calls)]
    status = "incomplete" if s.finish_reason == "length" else "completed"
    return _response(call, ids, created, status, output, _usage(s))


def stream(call: CassetteCall, ids: str, created: int, body: dict[str, Any],
           error: dict[str, Any] | None) -> Iterator[tuple[float, str | None, dict[str, Any] | str]]:
    seq = 0

    def event(kind: str, delay: float = 0.0, **fields: Any) -> tuple[float, str, dict[str, Any]]:
        nonlocal seq
        seq += 1
        return delay, kind, {"type": kind, "sequence_number": seq - 1, **fields}

    yield event("response.created", response=_response(call, ids, created, "in_progress", [], None))
    yield event("response.in_progress", response=_response(call, ids, created, "in_progress", [], None))
    output: list[dict[str, Any]] = []
    text: str | None = None  # the open message item's text so far
    n_calls = 0

    def close_message() -> Iterator[tuple[float, str, dict[str, Any]]]:
        nonlocal text
        if text is None:
            return
        index, item_id = len(output), f"msg_{ids}"
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        yield event("response.output_text.done", item_id=item_id, output_index=index, content_index=0, text=text,
                    logprobs=[])
        yield event("response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=part)
        item = _message(ids, text)
        yield event("response.output_item.done", output_index=index, item=item)
        output.append(item)
        text = None

    for frame in call.response_timeline:
        delay = frame.delta_ms
        if frame.chunk:
            if text is None:
                text = ""
                yield event("response.output_item.added", delay, output_index=len(output),
                            item={**_message(ids, "", "in_progress"), "content": []})
                delay = 0.0
                yield event("response.content_part.added", item_id=f"msg_{ids}", output_index=len(output),
                            content_index=0, part={"type": "output_text", "text": "", "annotations": [],
                                                   "logprobs": []})
            text += frame.chunk
            yield event("response.output_text.delta", delay, item_id=f"msg_{ids}", output_index=len(output),
                        content_index=0, delta=frame.chunk, logprobs=[])
            delay = 0.0
        for tc in frame.tool_calls:
            yield from close_message()
            call_dict = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
            item = _function_call(ids, n_calls, call_dict)
            n_calls += 1
            yield event("response.output_item.added", delay, output_index=len(output),
                        item={**item, "arguments": "", "status": "in_progress"})
            delay = 0.0
            yield event("response.function_call_arguments.delta", item_id=item["id"], output_index=len(output),
                        delta=item["arguments"])
            yield event("response.function_call_arguments.done", item_id=item["id"], output_index=len(output),
                        name=item["name"], arguments=item["arguments"])
            yield event("response.output_item.done", output_index=len(output), item=item)
            output.append(item)
    if error:
        yield 0.0, "error", {"type": "error", "sequence_number": seq, "code": error.get("code"),
                             "message": error.get("message"), "param": error.get("param"), "error": error}
        return
    yield from close_message()
    s = said(call)
    status = "incomplete" if s.finish_reason == "length" else "completed"
    yield event(f"response.{status}", response=_response(call, ids, created, status, output, _usage(s)))


def error_body(status: int, error: dict[str, Any]) -> dict[str, Any]:
    return {"error": error}


# ------------------------------------------------------------------ recording (the live answer -> frames)

PROVIDER = "openai"


def _record_response(rec: Any, response: dict[str, Any]) -> None:
    usage = response.get("usage")
    if isinstance(usage, dict):
        rec.usage = {"prompt_tokens": usage.get("input_tokens") or 0,
                     "completion_tokens": usage.get("output_tokens") or 0}
    if response.get("status") == "incomplete":
        rec.finish_reason = "length"


def record_json(rec: Any, body: dict[str, Any], t_ms: float) -> None:
    for item in body.get("output") or []:
        if item.get("type") == "message":
            rec.text(t_ms, text_of(item.get("content"), _TEXT) or "")
        elif item.get("type") == "function_call":
            rec.tool_call(t_ms, item.get("call_id") or "", item.get("name") or "", item.get("arguments"))
    _record_response(rec, body)


def record_event(rec: Any, state: dict[str, Any], name: str | None, data: dict[str, Any], t_ms: float) -> None:
    kind = data.get("type") or name
    if kind == "response.output_text.delta":
        rec.text(t_ms, data.get("delta") or "")
    elif kind == "response.output_item.done" and (data.get("item") or {}).get("type") == "function_call":
        item = data["item"]
        rec.tool_call(t_ms, item.get("call_id") or "", item.get("name") or "", item.get("arguments"))
    elif kind in ("response.completed", "response.incomplete"):
        _record_response(rec, data.get("response") or {})
    elif kind in ("error", "response.failed"):
        error = data.get("error") or (data.get("response") or {}).get("error") or data
        rec.failed(500, {"error": error})


def record_end(rec: Any, state: dict[str, Any], t_ms: float) -> None:
    """Every item arrived whole in its `output_item.done` event."""
