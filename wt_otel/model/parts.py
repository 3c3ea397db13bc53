"""Messages in the OTel GenAI parts model, and the conversions every dialect shares.

A message is `{"role": ..., "parts": [...]}`; a part is a dict with a `type`
(`text`, `tool_call`, `tool_call_response`, `reasoning`, `blob`, `uri`, `file`,
`server_tool_call`, ...). Producers disagree on details; `normalize_message`
irons out the known variants so transcripts from different dialects compare
equal: `result` -> `response`, `thinking` -> `reasoning`, tool results sent
as `role: user` -> `role: tool`, string-encoded arguments -> objects.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import orjson

CONTRACT_A_PART_TYPES = frozenset({"text", "tool_call", "tool_call_response"})

# Placeholders producers write when content capture is off or scrubbed.
_PLACEHOLDER = re.compile(
    r"^\W*(re?a?dacted|redacted|__redacted__|hidden|omitted|content[ _]?not[ _]?captured|\*+)\W*$",
    re.IGNORECASE,
)


def is_placeholder(text: Any) -> bool:
    """True for `[redacted]`, `readacted`, `__REDACTED__`, `<hidden>`... not for real text."""
    return isinstance(text, str) and bool(text) and len(text) <= 40 and bool(_PLACEHOLDER.match(text))


def decode_json(value: Any) -> tuple[Any, bool]:
    """Decode a JSON-encoded string; returns (value, ok). Non-strings pass through as ok."""
    if not isinstance(value, str | bytes):
        return value, True
    try:
        return json.loads(value), True
    except (ValueError, RecursionError):
        return value, False


def decode_arguments(value: Any) -> tuple[Any, bool]:
    """Tool-call arguments as an object. Undecodable text stays a string (ok=False), never `{}`."""
    if value is None or value == "":
        return {}, True
    decoded, ok = decode_json(value)
    if ok and isinstance(decoded, dict):
        return decoded, True
    return value, False


MAX_LITERAL = 100_000


def unwrap_mcp(value: Any) -> Any:
    """An MCP tool result as the tool meant it: `structuredContent` when present, else the text
    of `{"type": "text", "text": ...}` content blocks (frameworks log the wrapper, not the value)."""
    if isinstance(value, dict):
        if isinstance(value.get("structuredContent"), dict) and "content" in value:
            return value["structuredContent"]
        if "content" in value and isinstance(value.get("content"), list) and set(value) <= {
                "content", "isError", "is_error", "meta", "_meta", "structuredContent"}:
            return unwrap_mcp(value["content"])
        if value.get("type") == "text" and isinstance(value.get("text"), str) and set(value) <= {
                "type", "text", "annotations", "meta", "_meta"}:
            return decode_result(value["text"])
    if isinstance(value, list) and value and all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in value):
        return decode_result("".join(b["text"] for b in value))
    return value


def decode_result(value: Any) -> Any:
    """Tool results: JSON text becomes data; so does a Python literal (the Agents SDK logs
    `repr(result)`), parsed with `ast.literal_eval`, which evaluates no code; else as sent."""
    decoded, ok = decode_json(value)
    if ok:
        return decoded
    if isinstance(value, str) and len(value) <= MAX_LITERAL and value[:1] in "{[(":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return value


def text_of(content: Any) -> str | None:
    """Plain text of a chat `content` that may be a string or a list of content blocks."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        found = [b.get("text") or b.get("content") for b in content if isinstance(b, dict)]
        texts = [t for t in found if isinstance(t, str)]
        return "".join(texts) if texts else None
    return None


_TYPE_ALIASES = {
    "thinking": "reasoning",
    "tool_use": "tool_call",
    "function_call": "tool_call",
    "tool_result": "tool_call_response",
    "tool-call": "tool_call",
    "tool-call-response": "tool_call_response",
    "tool_return": "tool_call_response",
    "input_text": "text",
    "output_text": "text",
}


def normalize_part(part: Any) -> dict[str, Any]:
    """One part in canonical form; a bare string becomes a text part."""
    if isinstance(part, str):
        return {"type": "text", "content": part}
    if not isinstance(part, dict):
        return {"type": "text", "content": json.dumps(part, default=str)}
    p = dict(part)
    ptype = _TYPE_ALIASES.get(str(p.get("type", "text")), str(p.get("type", "text")))
    p["type"] = ptype
    if ptype == "text" and "content" not in p and isinstance(p.get("text"), str):
        p["content"] = p.pop("text")
    elif ptype == "reasoning" and "content" not in p:
        p["content"] = p.pop("thinking", p.pop("text", ""))
    elif ptype == "tool_call":
        args = p.get("arguments", p.pop("input", None))
        p["arguments"], ok = decode_arguments(args)
        if not ok:
            p["arguments_undecodable"] = True
    elif ptype == "tool_call_response":
        if "response" not in p:
            p["response"] = p.pop("result", p.pop("content", None))
        p["response"] = decode_result(p["response"])
    return p


def normalize_message(message: dict[str, Any]) -> dict[str, Any]:
    """Canonical message: parts normalized, tool results moved to `role: tool`."""
    role = str(message.get("role") or "user")
    parts = [normalize_part(p) for p in message.get("parts") or []]
    if role == "user" and parts and all(p["type"] == "tool_call_response" for p in parts):
        role = "tool"
    out: dict[str, Any] = {"role": role, "parts": parts}
    if message.get("name"):
        out["name"] = message["name"]
    return out


def from_openai_chat(messages: Any) -> list[dict[str, Any]]:
    """OpenAI chat-completions messages (or the same as logged by producers) to parts messages."""
    out: list[dict[str, Any]] = []
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict):
            continue
        if "parts" in m:  # already in the parts model
            out.append(normalize_message(m))
            continue
        role = str(m.get("role") or "user")
        parts: list[dict[str, Any]] = []
        if role == "tool" or m.get("tool_call_id"):
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": m.get("tool_call_id") or m.get("id") or "",
                    "response": decode_result(text_of(m.get("content")) or m.get("content")),
                }
            )
            role = "tool"
        else:
            text = text_of(m.get("content"))
            if text:
                parts.append({"type": "text", "content": text})
        for tc in m.get("tool_calls") or []:
            if not isinstance(tc, dict):
                continue
            fn = tc["function"] if isinstance(tc.get("function"), dict) else tc
            parts.append(
                normalize_part(
                    {
                        "type": "tool_call",
                        "id": tc.get("id") or "",
                        "name": fn.get("name") or "",
                        "arguments": fn.get("arguments"),
                    }
                )
            )
        out.append({"role": role, "parts": parts})
    return out


def signature(message: dict[str, Any]) -> tuple:
    """What makes two renderings of a message 'the same turn' (for history de-duplication)."""
    sig: list[tuple[Any, ...]] = []
    for p in message.get("parts", []):
        t = p.get("type")
        if t == "text":
            sig.append(("text", (p.get("content") or "").strip()))
        elif t == "tool_call":
            sig.append(("tool_call", p.get("name"), _canon(p.get("arguments"))))
        elif t == "tool_call_response":
            sig.append(("tool_call_response", _canon(p.get("response"))))
        else:
            sig.append((t,))
    return (message.get("role"), tuple(sig))


def _canon(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):  # e.g. integers beyond 64 bits
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def canonical_json(value: Any) -> str:
    """Sorted-keys compact JSON: the equality the universe and cassette matching use."""
    return _canon(value)
