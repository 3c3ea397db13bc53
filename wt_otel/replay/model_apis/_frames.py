"""What a recorded call said, read off its frames once for every API's renderer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from wt_otel.contracts.cassette import CassetteCall


@dataclass(frozen=True)
class Said:
    text: str
    tool_calls: list[dict[str, Any]]  # {"id", "name", "arguments" (JSON string)}
    finish_reason: str  # the chat vocabulary: stop, tool_calls, length, content_filter
    prompt_tokens: int
    completion_tokens: int
    failed: bool


def said(call: CassetteCall) -> Said:
    calls = [{"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
             for f in call.response_timeline for tc in f.tool_calls]
    finish = next((f.finish_reason for f in reversed(call.response_timeline) if f.finish_reason), None)
    usage = call.usage
    return Said(text="".join(f.chunk for f in call.response_timeline), tool_calls=calls,
                finish_reason=finish or ("tool_calls" if calls else "stop"),
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                failed=bool(call.exception_boundary and call.exception_boundary.occurred))


def arguments_object(arguments: str) -> dict[str, Any]:
    """Tool-call arguments as the object Anthropic sends (the cassette contract keeps them a JSON object)."""
    decoded = json.loads(arguments)
    return decoded if isinstance(decoded, dict) else {}


def text_of(content: Any, kinds: tuple[str, ...]) -> str | None:
    """A string, or the text parts of a content list joined; None when there is no text."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise ValueError("content must be a string or an array of content part objects")
    texts = [str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") in kinds]
    return "".join(texts) if texts else None


def chat_tool(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    """A tool definition in the chat shape, whichever API declared it (so tools compare across APIs)."""
    if not isinstance(name, str) or not name:
        raise ValueError("every tool needs a name")
    function: dict[str, Any] = {"name": name}
    if description:
        function["description"] = description
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}
