"""Messages in the OTel GenAI parts model: the small helpers every stage shares.

A message is `{"role": ..., "parts": [...]}`; a part is a dict with a `type`
(`text`, `tool_call`, `tool_call_response`, `reasoning`, `blob`, `uri`, `file`,
`server_tool_call`, ...). Decoding producers' encodings into this model is the
job of `wt_otel.ingest.messages` (one shape layer); here: JSON and literal
decoding, MCP result unwrapping, placeholders, signatures, canonical JSON.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any, cast

import orjson

from wt_otel._util import safejson

CONTRACT_A_PART_TYPES = frozenset({"text", "tool_call", "tool_call_response"})

# Placeholders producers write when content capture is off or scrubbed.
_PLACEHOLDER = re.compile(
    r"^\W*(re?a?dacted|redacted|__redacted__|hidden|omitted|content[ _]?not[ _]?captured|\*+)\W*$",
    re.IGNORECASE,
)


def is_placeholder(text: Any) -> bool:
    """True for `[redacted]`, `readacted`, `__REDACTED__`, `<hidden>`... not for real text."""
    return isinstance(text, str) and bool(text) and len(text) <= 40 and bool(_PLACEHOLDER.match(text))


# the scanner json.loads uses, with its defaults (typeshed does not declare `scan_once`)
_SCAN: Callable[[str, int], tuple[Any, int]] = cast(Any, json.JSONDecoder()).scan_once
_WHITESPACE = re.compile(r"[ \t\n\r]*").match  # JSON's whitespace, as json.decoder.WHITESPACE
_SPACE = " \t\n\r"


def decode_json(value: Any) -> tuple[Any, bool]:
    """Decode a JSON-encoded string; returns (value, ok). Non-strings pass through as ok.

    A `str` goes straight to the stdlib's scanner, as `json.loads` does after its type dispatch and
    decoder calls (half its cost on short texts, ~23 calls per imported session): the same values, and
    a failure wherever `json.loads` raises (no value, extra data, a BOM, nesting too deep)."""
    if type(value) is str:
        start = 0
        if value[:1] in _SPACE:  # (and ""): most texts start with their value, and end with it too
            head = _WHITESPACE(value, 0)
            start = head.end() if head else 0
        try:
            obj, end = _SCAN(value, start)
        except (StopIteration, ValueError, RecursionError):
            return value, False
        if end != len(value):
            tail = _WHITESPACE(value, end)
            end = tail.end() if tail else end
        return (obj, True) if end == len(value) else (value, False)
    if not isinstance(value, str | bytes):
        return value, True
    try:
        return json.loads(value), True
    except (ValueError, RecursionError):
        return value, False


MAX_LITERAL = 100_000


def unwrap_mcp(value: Any) -> Any:
    """An MCP tool result as the tool meant it: `structuredContent` when present, else the text
    of `{"type": "text", "text": ...}` content blocks (frameworks log the wrapper, not the value).
    `{"result": value}` around a non-object is the MCP SDKs' wrap (structured content must be an object):
    the tool returned the value, and that is what is kept."""
    if isinstance(value, dict):
        structured = value.get("structuredContent")
        if isinstance(structured, dict) and "content" in value:
            if set(structured) == {"result"} and not isinstance(structured["result"], dict):
                return structured["result"]
            return structured
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


def as_text(value: Any) -> str:
    """JSON text of any value (huge ints, deep nesting and surrogates included), never raising."""
    return safejson.dumps(value, indent=False).decode("utf-8")


def signature(message: dict[str, Any]) -> tuple:
    """What makes two renderings of a message 'the same turn' (for history de-duplication)."""
    sig: list[tuple[Any, ...]] = []
    for p in message.get("parts", []):
        t = p.get("type")
        if t == "text":
            content = p.get("content") or ""
            sig.append(("text", content.strip() if isinstance(content, str) else _canon(content)))
        elif t == "tool_call":
            sig.append(("tool_call", p.get("name"), _canon(p.get("arguments"))))
        elif t == "tool_call_response":
            sig.append(("tool_call_response", _canon(p.get("response"))))
        else:
            sig.append((t,))
    return (message.get("role"), tuple(sig))


def _canon(value: Any) -> str:
    try:  # without OPT_NON_STR_KEYS first: faster, the same text when every key is a str (else it raises)
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):  # e.g. integers beyond 64 bits
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
        except (ValueError, RecursionError):  # nested deeper than the stack: still a stable signature
            return safejson.dumps(value, indent=False).decode("utf-8")


def canonical_json(value: Any) -> str:
    """Sorted-keys compact JSON: the equality the universe and cassette matching use."""
    return _canon(value)


def canonical_bytes(value: Any) -> bytes:
    """`canonical_json(value)` as UTF-8 bytes: the universe's lookup key, made once per call.

    Twice as fast as `canonical_json` on the common case: no decode, and no `OPT_NON_STR_KEYS` (which costs
    orjson half its speed and changes nothing when every key is a str; a non-str key raises here and takes
    `canonical_json`'s path, as do the values orjson refuses).
    """
    try:
        key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str)
    except (TypeError, orjson.JSONEncodeError):
        return _canon(value).encode("utf-8")
    # a copy of the key's size: orjson (3.12 on) returns its buffer, >= 4 KiB whatever the length, and a universe
    # keeps two keys per recording for its lifetime (10k recordings: ~80 MiB instead of ~2)
    return b"".join((key, b""))
