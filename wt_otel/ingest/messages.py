"""One message-shape layer: any encoding of a conversation -> the GenAI parts model.

Dialects only *locate* conversation data (which attribute, event or log holds
it); this module decodes whatever encoding they find into
`{"role": ..., "parts": [...]}` messages with canonical parts (`text`,
`tool_call` with object `arguments`, `tool_call_response` with the decoded
`response`, `reasoning`, and other types kept as they are):

- OpenAI chat messages (`content`, `tool_calls`, `tool_call_id`) and Responses
  API items (`message`, `function_call`, `function_call_output`, `reasoning`);
- Anthropic content blocks (`text`, `tool_use`, `tool_result`, `thinking`);
- Bedrock Converse / Strands blocks (`{"text"}`, `{"toolUse"}`, `{"toolResult"}`);
- Gemini parts (`{"text"}`, `functionCall`, `functionResponse`; role `model`);
- LangChain serialized messages (`{"lc": 1, "id": [..., "AIMessage"], "kwargs"}`,
  `{"type": "tool", "data": {...}}`);
- Vercel AI SDK parts (`tool-call` with `input`/`args`, `tool-result` with
  `output`/`result`);
- the GenAI parts model itself, with the known variants (`result`, `thinking`);
- Python reprs of SDK objects (`str(obj)`), parsed by `parse_literal` from the
  syntax tree: literals and keyword-only constructor calls, never evaluated.

Tool results that arrive wrapped (block lists, a serialized ToolMessage, the
AI SDK's `{"type": "json", "value"}`, MCP `content`) are unwrapped to the
result they carry (`tool_result`); tool arguments likewise (`tool_arguments`).

Every span of a chat session repeats the history: `read_messages` memoizes the
last views of a history text, so a span whose history extends one seen before
decodes and normalizes only the messages it adds (results are copied out,
callers may mutate them).
"""

from __future__ import annotations

import ast
import re
from collections import OrderedDict
from typing import Any

import orjson

from wt_otel.model.parts import MAX_LITERAL, as_text, decode_json, unwrap_mcp

ROLE_ALIASES = {
    "human": "user", "user": "user",
    "ai": "assistant", "assistant": "assistant", "model": "assistant", "bot": "assistant",
    "system": "system", "developer": "system",
    "tool": "tool", "function": "tool", "ipython": "tool",
}
_LC_CLASS_ROLES = {
    "HumanMessage": "user", "HumanMessageChunk": "user",
    "AIMessage": "assistant", "AIMessageChunk": "assistant",
    "SystemMessage": "system", "SystemMessageChunk": "system",
    "ToolMessage": "tool", "ToolMessageChunk": "tool", "FunctionMessage": "tool",
}
_TEXT_TYPES = frozenset({"text", "input_text", "output_text", "refusal"})
_CALL_TYPES = frozenset({"tool_use", "function_call", "tool-call", "tool_call", "server_tool_use"})
_RESULT_TYPES = frozenset({"tool_result", "function_call_output", "tool-result", "tool_call_response",
                           "tool_return", "tool-call-response"})
_REASONING_TYPES = frozenset({"thinking", "reasoning", "redacted_thinking"})
_RESPONSES_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
# a dict result without any of these keys is no wrapper (`_result_wrapper`, `_langchain`) nor MCP result
# (`unwrap_mcp`): it is the result as it is
_WRAPPER_KEYS = frozenset({"lc", "type", "__class__", "output", "raw_output", "toolResult", "structuredContent",
                           "content"})
_MAX_DEPTH = 8
_CACHE_SIZE = 4096
_REPR_HEAD = re.compile(r"^\s*(?:[A-Z]\w*\(|\{'|\[\{'|\[[A-Z]\w*\()")


# ---------------------------------------------------------------- Python reprs

_ENUM_REPR = re.compile(r"<[A-Za-z_][\w.]*: ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+)>")


class _NotLiteral(ValueError):
    pass


def parse_literal(text: str) -> tuple[Any, bool]:
    """Data from a Python repr: literals, and `Class(key=value, ...)` as `{"__class__": "Class", ...}`.

    Built from the syntax tree (never evaluated), so a hostile string can only fail to parse.
    """
    if not isinstance(text, str) or len(text) > MAX_LITERAL:
        return text, False
    source = text.strip()
    for attempt in range(2):
        try:
            return _literal(ast.parse(source, mode="eval").body), True
        except (_NotLiteral, SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            if attempt or "<" not in source:
                return text, False
            # enum members print as `<MessageRole.USER: 'user'>` (LlamaIndex): their value is the data
            source = _ENUM_REPR.sub(lambda m: m.group(1), source)
    return text, False


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _NotLiteral("dict unpacking")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.Name) and node.id in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int | float | complex):
        return -node.operand.value
    if isinstance(node, ast.Call) and not node.args and all(k.arg for k in node.keywords):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name is None:
            raise _NotLiteral("call of an expression")
        return {"__class__": name, **{str(k.arg): _literal(k.value) for k in node.keywords}}
    raise _NotLiteral(type(node).__name__)


def looks_serialized(text: Any) -> bool:
    """True for text that is a Python repr or JSON of an object rather than words for a person."""
    if not isinstance(text, str):
        return False
    s = text.strip()
    if _REPR_HEAD.match(s):
        return True
    if s[:1] in "{[" and s[-1:] in "}]":
        value, ok = decode_json(s)
        return ok and isinstance(value, dict | list) and bool(value)
    return False


def decode_value(value: Any) -> Any:
    """JSON text -> data; a Python repr of a container or SDK object -> data (never evaluated); else unchanged."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return value
    s = value.strip()
    if s[:1] in "{[\"" or s in ("null", "true", "false") or s[:1].isdigit() or s[:1] == "-":
        decoded, ok = decode_json(s)  # the stdlib: orjson turns integers beyond 64 bits into floats
        if ok:
            return decoded
    if s[:1] in "{[(" or _REPR_HEAD.match(s):
        decoded, ok = parse_literal(s)
        if ok:
            return decoded
    return value


def _string_literal(value: Any) -> str | None:
    """The text of a Python string literal (`'...'`, a repr of a string), else None."""
    if not isinstance(value, str) or len(value) < 2 or value[0] != value[-1] or value[0] not in "'\"":
        return None
    text, ok = parse_literal(value)
    return text if ok and isinstance(text, str) else None


# ---------------------------------------------------------------- tool results and arguments

def tool_result(value: Any, _depth: int = 0) -> Any:
    """The result a tool returned, unwrapped from the encodings producers wrap it in."""
    if _depth > _MAX_DEPTH:
        return value
    if isinstance(value, str | bytes):
        decoded = decode_value(value)
        if isinstance(decoded, str) and decoded is not value and decoded.lstrip()[:1] in ("{", "["):
            return tool_result(decoded, _depth + 1)  # a container's repr, JSON-quoted (CrewAI's tool spans)
        return value if decoded is value else tool_result(decoded, _depth + 1) if isinstance(
            decoded, dict | list) else decoded
    if isinstance(value, dict):
        if value.keys().isdisjoint(_WRAPPER_KEYS):  # (most results): no wrapper, no MCP result
            return value
        inner = _result_wrapper(value)
        if inner is not _NONE:
            return tool_result(inner, _depth + 1)
        unwrapped = unwrap_mcp(value)
        return value if unwrapped is value else tool_result(unwrapped, _depth + 1)
    if isinstance(value, list) and value:
        texts = [_block_text(b) for b in value]
        if all(t is not None for t in texts):
            return tool_result("".join(t for t in texts if t is not None), _depth + 1)
        if len(value) == 1 and isinstance(value[0], dict) and set(value[0]) == {"json"}:
            return value[0]["json"]
    return value


class _Missing:
    pass


_NONE: Any = _Missing()


def _result_wrapper(d: dict[str, Any]) -> Any:
    """The value inside a known result wrapper, or `_NONE` when `d` is the result itself."""
    lc = _langchain(d)
    if lc is not None:
        return lc[1].get("content")
    if "output" in d and set(d) <= {"output", "kwargs", "tags", "metadata", "run_id", "parent_run_id"} and (
            len(d) > 1 or (isinstance(d["output"], dict) and _langchain(d["output"]) is not None)):
        return d["output"]  # traceloop's LangChain callback: {"output": <ToolMessage>, "kwargs": {...}}
    if "raw_output" in d and ({"tool_name", "blocks", "content", "raw_input"} & d.keys()):
        return d["raw_output"]  # LlamaIndex ToolOutput: the tool's own return value
    if set(d) == {"toolResult"} and isinstance(d["toolResult"], dict):
        return d["toolResult"].get("content")
    t = d.get("type")
    if t in ("json", "text", "error-text", "error-json", "content") and "value" in d and set(d) <= {
            "type", "value", "providerOptions", "providerMetadata"}:
        return d["value"]
    if t in _RESULT_TYPES:
        for k in ("output", "result", "response", "content"):
            if k in d:
                return d[k]
    if d.get("__class__") == "ToolMessage":
        return d.get("content")
    return _NONE


def _wrapped(d: dict[str, Any]) -> bool:
    """Whether `tool_result` would unwrap this dict (a known wrapper, an MCP result)."""
    return not d.keys().isdisjoint(_WRAPPER_KEYS) and (_result_wrapper(d) is not _NONE or unwrap_mcp(d) is not d)


def _block_text(b: Any) -> str | None:
    """Text of a single text block (`{"type": "text", "text"}` or Converse `{"text"}`), else None."""
    if isinstance(b, dict):
        if b.get("type") in _TEXT_TYPES and isinstance(b.get("text"), str) and set(b) <= {
                "type", "text", "annotations", "meta", "_meta", "cache_control", "citations", "logprobs", "id"}:
            return b["text"]
        if set(b) == {"text"} and isinstance(b["text"], str):
            return b["text"]
        if b.get("block_type") == "text" and isinstance(b.get("text"), str):  # LlamaIndex TextBlock
            return b["text"]
        if b.get("type") == "text" and isinstance(b.get("content"), str) and set(b) == {"type", "content"}:
            return b["content"]  # a parts-model text part
    return None


def function_response(response: Any) -> Any:
    """What a tool returned, from a Gemini `FunctionResponse.response`: the API takes an object, so the SDKs
    wrap a tool's return value as `{"result": ...}` (errors aside: `{"output": ...}` in some)."""
    if isinstance(response, dict) and len(response) == 1 and next(iter(response)) in ("result", "output"):
        return next(iter(response.values()))
    return response


_RAW_ARGS, _KWARGS, _ARGS_KWARGS = frozenset({"_raw_arguments"}), frozenset({"kwargs"}), frozenset({"args", "kwargs"})
_LANGCHAIN_INPUT = frozenset({"input_str", "inputs", "tags", "metadata", "kwargs", "run_id", "parent_run_id", "name",
                              "tool_call_id"})


def tool_arguments(value: Any) -> tuple[Any, bool]:
    """Tool-call arguments as an object; (the raw value, False) when there is no object to be had.

    Unwraps the importer's own `{"_raw_arguments": ...}`, traceloop's LangChain input wrapper
    (`input_str`, `inputs`, `tags`, `metadata`) and Python-repr dicts.
    """
    if value is None or value == "":
        return {}, True
    for _ in range(_MAX_DEPTH):
        inner = _string_literal(value)  # the JSON text, repr'd once more (CrewAI's history): `'{"city": "Oslo"}'`
        decoded = decode_value(value if inner is None else inner)
        if not isinstance(decoded, dict):
            return value, False
        keys = decoded.keys()
        if keys == _RAW_ARGS:
            value = decoded["_raw_arguments"]
            continue
        if keys in (_KWARGS, _ARGS_KWARGS) and isinstance(decoded["kwargs"], dict) and not (
                decoded.get("args")):  # keyword-call wrappers (LlamaIndex, traceloop decorators)
            return decoded["kwargs"], True
        if "input_str" in decoded and keys <= _LANGCHAIN_INPUT:
            inputs = decoded.get("inputs")
            value = inputs if isinstance(inputs, dict) and inputs else decoded["input_str"]
            continue
        return decoded, True
    return value, False


# ---------------------------------------------------------------- parts

def _part_from_block(b: Any) -> list[dict[str, Any]]:
    """One content block (of any producer) -> zero or more canonical parts."""
    if isinstance(b, str):
        return _text_parts(b)
    if not isinstance(b, dict):
        return [] if b is None else [{"type": "text", "content": as_text(b)}]
    t = b.get("type")
    if isinstance(t, str):
        if t in _TEXT_TYPES:
            text = b.get("text", b.get("content"))
            if text is not None and not isinstance(text, str):  # a list/number where text belongs: kept, as JSON
                return [{"type": "text", "content": as_text(text)}]
            return _text_parts(text)
        if t in _CALL_TYPES:
            return [_call_part(b.get("call_id") or b.get("id") or b.get("toolCallId") or b.get("tool_call_id"),
                               b.get("name") or b.get("toolName"),
                               b.get("arguments", b.get("input", b.get("args"))))]
        if t in _RESULT_TYPES:
            raw = next((b[k] for k in ("response", "result", "output", "content") if k in b), None)
            part: dict[str, Any] = {"type": "tool_call_response",
                                    "id": str(b.get("call_id") or b.get("tool_use_id") or b.get("id")
                                              or b.get("toolCallId") or b.get("tool_call_id") or ""),
                                    "response": tool_result(raw)}
            if b.get("is_error") or b.get("isError"):
                part["is_error"] = True
            name = b.get("name") or b.get("toolName")
            if name:
                part["name"] = name
            return [part]
        if t in _REASONING_TYPES:
            text = b.get("content", b.get("thinking", b.get("text")))
            if text is None and isinstance(b.get("summary"), list):
                text = "".join(str(s.get("text") or "") for s in b["summary"] if isinstance(s, dict))
            if isinstance(text, list):
                text = "".join(str(_block_text(x) or "") for x in text)
            return [{"type": "reasoning", "content": text or ""}] if text else []
        if t == "message" and "content" in b:  # a Responses output message used as a block
            return [p for x in _as_blocks(b["content"]) for p in _part_from_block(x)]
        return [{k: v for k, v in b.items() if k != "__class__"}]
    # untyped blocks: Converse / Strands, Gemini
    if isinstance(b.get("text"), str) and not ({"toolUse", "toolResult"} & b.keys()):
        return _text_parts(b["text"])
    if isinstance(b.get("toolUse"), dict):
        u = b["toolUse"]
        return [_call_part(u.get("toolUseId"), u.get("name"), u.get("input"))]
    if isinstance(b.get("toolResult"), dict):
        r = b["toolResult"]
        part = {"type": "tool_call_response", "id": str(r.get("toolUseId") or ""),
                "response": tool_result(r.get("content"))}
        if r.get("status") == "error":
            part["is_error"] = True
        return [part]
    if isinstance(b.get("tool_call"), dict) and len(b) == 1:  # Haystack ChatMessage parts
        tc = b["tool_call"]
        return [_call_part(tc.get("id"), tc.get("tool_name") or tc.get("name"), tc.get("arguments"))]
    if isinstance(b.get("tool_call_result"), dict) and len(b) == 1:
        r = b["tool_call_result"]
        origin = r["origin"] if isinstance(r.get("origin"), dict) else {}
        part = {"type": "tool_call_response", "id": str(origin.get("id") or ""),
                "response": tool_result(r.get("result"))}
        if origin.get("tool_name"):
            part["name"] = origin["tool_name"]
        if r.get("error"):
            part["is_error"] = True
        return [part]
    fc = b.get("functionCall", b.get("function_call"))
    if isinstance(fc, dict):
        return [_call_part(fc.get("id"), fc.get("name"), fc.get("args", fc.get("arguments")))]
    fr = b.get("functionResponse", b.get("function_response"))
    if isinstance(fr, dict):
        return [{"type": "tool_call_response", "id": str(fr.get("id") or ""), "name": fr.get("name"),
                 "response": tool_result(function_response(fr.get("response")))}]
    rc = b.get("reasoningContent")
    if isinstance(rc, dict):
        text = (rc.get("reasoningText") or {}).get("text") if isinstance(rc.get("reasoningText"), dict) else None
        return [{"type": "reasoning", "content": text or ""}]
    if "thought" in b and isinstance(b.get("text"), str):
        return [{"type": "reasoning", "content": b["text"]}]
    return [dict(b)]


def _text_parts(text: Any) -> list[dict[str, Any]]:
    """A text part; a text that is the repr/JSON of an SDK item or message becomes its parts."""
    if not isinstance(text, str) or text == "":
        return []
    s = text.lstrip()
    if s[:1] in "{[" or _REPR_HEAD.match(s):
        data = decode_value(s)
        items = data if isinstance(data, list) else [data]
        if items and all(isinstance(i, dict) and (_is_item(i) or _is_message(i)) for i in items):
            parts = [p for i in items for p in (_item_parts(i) if _is_item(i) else
                                                [q for m in _messages_from(i, "assistant") for q in m["parts"]])]
            if parts:
                return parts
    return [{"type": "text", "content": text}]


def _is_item(d: dict[str, Any]) -> bool:
    t = d.get("type")
    return (t in _RESPONSES_ITEMS or t in _TEXT_TYPES or t in _CALL_TYPES) and (
        "content" in d or "text" in d or "arguments" in d or "input" in d or "summary" in d)


def _is_message(d: dict[str, Any]) -> bool:
    """A chat message dump (`ChatCompletionMessage.model_dump()`, its repr): role plus content or calls."""
    return d.get("role") in ROLE_ALIASES and ("content" in d or "tool_calls" in d or "blocks" in d)


def _item_parts(d: dict[str, Any]) -> list[dict[str, Any]]:
    if d.get("type") == "message":
        return [p for x in _as_blocks(d.get("content")) for p in _part_from_block(x)]
    return _part_from_block(d)


def _call_part(call_id: Any, name: Any, raw_args: Any) -> dict[str, Any]:
    args, ok = tool_arguments(raw_args)
    name = str(name or "")
    unquoted = _string_literal(name)  # a framework that logs repr(name): "'get_weather'"
    if unquoted is not None and unquoted.isidentifier():
        name = unquoted
    part: dict[str, Any] = {"type": "tool_call", "id": str(call_id or ""), "name": name, "arguments": args}
    if not ok:
        part["arguments_undecodable"] = True
    return part


def _as_blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, list):
        return content
    if isinstance(content, dict):
        return [content]
    return [content]


# ---------------------------------------------------------------- messages

def _langchain(d: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(role, fields) of a LangChain serialized message, or None."""
    if d.get("lc") == 1 and isinstance(d.get("kwargs"), dict) and isinstance(d.get("id"), list) and d["id"]:
        cls = str(d["id"][-1])
        kwargs = d["kwargs"]
        role = _LC_CLASS_ROLES.get(cls) or ROLE_ALIASES.get(str(kwargs.get("role") or kwargs.get("type") or ""))
        if role:
            return role, kwargs
    t = d.get("type")
    if isinstance(t, str) and isinstance(d.get("data"), dict) and t in ROLE_ALIASES and "content" in d["data"]:
        return ROLE_ALIASES[t], d["data"]
    klass = d.get("__class__")
    if isinstance(klass, str) and klass in _LC_CLASS_ROLES and "content" in d:
        return _LC_CLASS_ROLES[klass], d
    return None


def _messages_from(d: Any, default_role: str) -> list[dict[str, Any]]:
    """One raw message or item -> canonical messages (an Anthropic user turn mixing results and text
    becomes a tool message followed by a user message)."""
    if isinstance(d, str):
        if _REPR_HEAD.match(d) or d[:1] == "{":  # a message logged as str(obj): its own role, when it has one
            decoded = decode_value(d)
            if isinstance(decoded, dict) and _is_message(decoded):
                return _messages_from(decoded, default_role)
        texts = _text_parts(d)
        return [{"role": default_role, "parts": texts}] if texts else []
    if not isinstance(d, dict):
        return []
    fast = _fast_parts(d)
    if fast is not None:
        return _finish(d["role"], fast)
    if "contents" in d and "content" not in d and isinstance(d["contents"], list):
        # flattened conventions (OpenInference) wrap each block as `{message_content: {...}}`
        d = {**d, "content": [_only_child(c) for c in d["contents"]]}
    if "blocks" in d and "content" not in d and "parts" not in d:  # LlamaIndex ChatMessage
        raw_extra = d.get("additional_kwargs")
        extra = raw_extra if isinstance(raw_extra, dict) else {}
        d = {**d, "content": d["blocks"], "tool_calls": d.get("tool_calls") or extra.get("tool_calls"),
             "tool_call_id": d.get("tool_call_id") or extra.get("tool_call_id")}
    lc = _langchain(d)
    if lc is not None:
        role, fields = lc
        if role == "assistant" and not fields.get("tool_calls"):
            raw_extra = fields.get("additional_kwargs")
            if isinstance(raw_extra, dict) and raw_extra.get("tool_calls"):
                fields = {**fields, "tool_calls": raw_extra["tool_calls"]}
        d = {**fields, "role": role}
    t = d.get("type")
    role_raw = d.get("role")
    if role_raw is None and isinstance(t, str) and t not in _RESPONSES_ITEMS:
        if t in _CALL_TYPES or t in _REASONING_TYPES:
            return _finish("assistant", _part_from_block(d))
        if t in _RESULT_TYPES:
            return _finish("tool", _part_from_block(d))
        if t in _TEXT_TYPES:
            return _finish(default_role, _part_from_block(d))
    if t == "function_call":
        return _finish("assistant", _part_from_block(d))
    if t == "function_call_output":
        return _finish("tool", _part_from_block(d))
    if t == "reasoning":
        return _finish("assistant", _part_from_block(d))
    if t == "item_reference":
        return []
    role = ROLE_ALIASES.get(str(role_raw or "").lower(), default_role if role_raw is None else str(role_raw))
    parts: list[dict[str, Any]] = []
    if isinstance(d.get("parts"), list):
        parts = [p for b in d["parts"] for p in _part_from_block(b)]
        if role == "tool" and d.get("tool_call_id") and not any(p["type"] == "tool_call_response" for p in parts):
            # LiteLLM: {role: tool, parts: [text <result>], tool_call_id}
            parts = [{"type": "tool_call_response", "id": str(d["tool_call_id"]),
                      "response": tool_result(d["parts"])}]
    elif role == "tool" and (d.get("tool_call_id") or not _typed_blocks(_content(d.get("content")))):
        part: dict[str, Any] = {"type": "tool_call_response", "id": str(d.get("tool_call_id") or d.get("id") or ""),
                                "response": tool_result(d.get("content"))}
        if d.get("name"):
            part["name"] = d["name"]
        if d.get("status") == "error":
            part["is_error"] = True
        parts = [part]
    else:
        parts = [p for b in _as_blocks(_content(d.get("content"))) for p in _part_from_block(b)]
    for tc in _content(d.get("tool_calls")) or []:
        tc = _only_child(tc)  # `{tool_call: {id, function}}` (OpenInference, flattened)
        if isinstance(tc, dict):
            raw_fn = tc.get("function")
            fn = raw_fn if isinstance(raw_fn, dict) else tc
            parts.append(_call_part(tc.get("id") or tc.get("call_id"), fn.get("name"),
                                    fn.get("arguments", fn.get("args", fn.get("input")))))
    if isinstance(d.get("function_call"), dict):  # legacy OpenAI functions
        fc = d["function_call"]
        parts.append(_call_part("", fc.get("name"), fc.get("arguments")))
    if role == "tool" and isinstance(d.get("tool_call_id"), str):
        for p in parts:
            if p["type"] == "tool_call_response" and not p.get("id"):
                p["id"] = d["tool_call_id"]
    out = _finish(role, _one_of_each_call(parts))
    if d.get("name") and out and role not in ("tool",):
        out[-1]["name"] = d["name"]
    return out


def _one_of_each_call(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A message that lists its tool calls twice (content blocks and `tool_calls`, as OpenInference logs
    Anthropic's `tool_use`) holds each call once: a repeated id, or a copy without a name and arguments
    beside named calls, is the same call."""
    calls = [p for p in parts if p.get("type") == "tool_call"]
    if len(calls) < 2:
        return parts
    named = any(p.get("name") for p in calls)
    seen: set[str] = set()
    out = []
    for p in parts:
        if p.get("type") == "tool_call":
            if named and not p.get("name") and not p.get("arguments"):
                continue
            if p.get("id"):
                if p["id"] in seen:
                    continue
                seen.add(p["id"])
        out.append(p)
    return out


def _only_child(value: Any) -> Any:
    """The dict inside a one-key dict that names its item (`{"tool_call": {...}}`, `{"message_content": {...}}`);
    anything else unchanged."""
    if isinstance(value, dict) and len(value) == 1:
        (key, inner), = value.items()
        if isinstance(inner, dict) and key in ("tool_call", "message_content", "content", "block", "item", "part"):
            return inner
    return value


def _content(value: Any) -> Any:
    """A `content` given as JSON text of a block list (Strands events, some loggers) -> the blocks."""
    if isinstance(value, str) and value[:2] in ('[{', '[]'):
        decoded, ok = decode_json(value)
        if ok and isinstance(decoded, list) and all(isinstance(b, dict) and (
                "type" in b or {"text", "toolUse", "toolResult", "json", "reasoningContent", "image",
                                "document"} & b.keys()) for b in decoded):
            return decoded
    return value


_CANONICAL_ROLES = frozenset({"user", "assistant", "system", "tool"})
_FAST_KEYS = frozenset({"role", "parts", "finish_reason", "name"})


def _fast_parts(d: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Parts of a message already in the canonical parts model (the common case: semconv producers),
    without the general decoding; None when anything needs it."""
    parts = d.get("parts")
    if d.get("role") not in _CANONICAL_ROLES or type(parts) is not list or not d.keys() <= _FAST_KEYS:
        return None
    out: list[dict[str, Any]] = []
    for p in parts:
        if type(p) is not dict:
            return None
        t = p.get("type")
        if t == "text":
            c = p.get("content")
            if type(c) is not str or c[:1] in ("{", "[") or (c[:1].isupper() and "(" in c[:60]):
                return None
            out.append({"type": "text", "content": c})
        elif t == "tool_call":
            args = p.get("arguments")
            if type(args) is not dict:
                return None
            out.append({"type": "tool_call", "id": str(p.get("id") or ""), "name": str(p.get("name") or ""),
                        "arguments": args})
        elif t == "tool_call_response":
            r = p.get("response")
            if "response" not in p or isinstance(r, str | list) or (isinstance(r, dict) and _wrapped(r)):
                return None
            out.append({"type": "tool_call_response", "id": str(p.get("id") or ""), "response": r})
        else:
            return None
    return out


def _typed_blocks(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(b, dict) and (b.get("type") in _RESULT_TYPES or "toolResult" in b) for b in content)


def _finish(role: str, parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    parts = [p for p in parts if not (p.get("type") == "text" and not p.get("content"))]
    if not parts:
        return []
    results = [p for p in parts if p.get("type") == "tool_call_response"]
    if results and len(results) < len(parts):  # a text beside a result that only repeats it (openai-agents-v2)
        answers = [_canon(r.get("response")) for r in results]
        parts = [p for p in parts if not (p.get("type") == "text" and _canon(tool_result(p["content"])) in answers)]
    if role in ("user", "tool", "assistant") and results:
        rest = [p for p in parts if p.get("type") != "tool_call_response"]
        if role == "assistant" and rest:  # server-side results inside an assistant turn: keep as sent
            return [{"role": role, "parts": parts}]
        out = [{"role": "tool", "parts": results}]
        if rest:
            out.append({"role": "user" if role == "tool" else role, "parts": rest})
        return out
    return [{"role": role, "parts": parts}]


def _canon(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return repr(value).encode()


_RECENT_SIZE = 64
_MIN_MEMO = 256  # shorter texts are cheaper to decode than to look up
_PREFIX = 128  # views are found by their role and first characters (a memoized view is >= _MIN_MEMO long)


class _Views:
    """The last `_RECENT_SIZE` views of message lists (JSON text -> normalized messages), least recently
    used first, found by their exact text (`get`) or as the most recently used view that a text continues
    (`extended`). Views are bucketed by (role, first `_PREFIX` characters), which every view a text
    continues shares with it, so a lookup reads the few views of one bucket instead of walking all 64
    (py-spy: the walk was ~6% of building a session; every session's first chat span went through all)."""

    def __init__(self) -> None:
        # (role, text) -> (use stamp, text without its closing "]", messages)
        self._views: OrderedDict[tuple[str, str], tuple[int, str, list[dict[str, Any]]]] = OrderedDict()
        self._buckets: dict[tuple[str, str], list[tuple[str, str]]] = {}
        self._stamp = 0

    def __len__(self) -> int:
        return len(self._views)

    def clear(self) -> None:
        self._views.clear()
        self._buckets.clear()

    def get(self, key: tuple[str, str]) -> list[dict[str, Any]] | None:
        hit = self._views.get(key)
        if hit is None:
            return None
        self._stamp += 1
        self._views[key] = (self._stamp, hit[1], hit[2])
        self._views.move_to_end(key)
        return hit[2]

    def extended(self, text: str, role: str) -> tuple[list[dict[str, Any]], int] | None:
        """(messages, length) of the most recently used view that `text` continues (same head, then `,`)."""
        best: tuple[int, list[dict[str, Any]], int] | None = None
        size = len(text)
        for key in self._buckets.get((role, text[:_PREFIX]), ()):
            stamp, seen_head, messages = self._views[key]
            n = len(seen_head) + 1
            if n < size and text[n - 1] == "," and text.startswith(seen_head) and (best is None or stamp > best[0]):
                best = (stamp, messages, n)
        return None if best is None else (best[1], best[2])

    def add(self, key: tuple[str, str], messages: list[dict[str, Any]]) -> None:
        self._stamp += 1
        role, text = key
        self._views[key] = (self._stamp, text[:-1], messages)
        self._buckets.setdefault((role, text[:_PREFIX]), []).append(key)
        if len(self._views) > _RECENT_SIZE:
            (old_role, old_text), _ = self._views.popitem(last=False)
            bucket = self._buckets[(old_role, old_text[:_PREFIX])]
            bucket.remove((old_role, old_text))
            if not bucket:
                del self._buckets[(old_role, old_text[:_PREFIX])]


_recent = _Views()


def _copy(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**m, "parts": [p.copy() for p in m["parts"]]} for m in messages]


def _read_history_text(text: str, default_role: str) -> list[dict[str, Any]] | None:
    """A JSON message list, decoding only what an earlier view did not already hold.

    Every chat span repeats the history, so its JSON text usually *starts with* a text seen on the
    span before: `[m1, m2]` then `[m1, m2, m3]`. The memo (`_Views`) keeps the last views' normalized
    messages; a text that extends one (same head, then `,`) decodes only its tail. None: not a JSON list."""
    key = (default_role, text)
    hit = _recent.get(key)
    if hit is not None:
        return _copy(hit)
    head: list[dict[str, Any]] = []
    tail = text
    found = _recent.extended(text, default_role)
    if found is not None:
        head, n = found
        tail = "[" + text[n:]
    data, ok = decode_json(tail)
    if not ok:
        return None
    if not isinstance(data, list):
        return None
    out = head + [m for item in _flatten(data) for m in _messages_from(item, default_role)]
    _recent.add(key, out)
    return _copy(out)


def read_messages(value: Any, default_role: str = "user") -> list[dict[str, Any]]:
    """Canonical messages from a message list in any encoding (JSON text, repr text or data).

    Accepts a list of messages or items, a single message, or a request/response wrapper
    (`{"messages": [...]}`, `{"input": [...]}`, `{"choices": [...]}`, Responses `{"output": [...]}`,
    LangChain's `{"messages": [[...]]}`, `{"generations": [[...]]}`). Plain text is one message in
    `default_role`. System messages are kept (`role: system`); callers move them aside.
    """
    if isinstance(value, str) and len(value) >= _MIN_MEMO and value[:1] == "[" and value[-1:] == "]":
        found = _read_history_text(value, default_role)
        if found is not None:
            return found
    data = decode_value(value)
    if isinstance(data, dict):
        data = _unwrap_container(data)
    if isinstance(data, str):
        parts = _text_parts(data)
        return [{"role": default_role, "parts": parts}] if parts else []
    if not isinstance(data, list):
        return []
    return [m for item in _flatten(data) for m in _messages_from(item, default_role)]


def _flatten(items: list[Any]) -> list[Any]:
    flat: list[Any] = []
    for i in items:
        if isinstance(i, list):
            flat.extend(_flatten(i) if len(flat) < 100_000 else [])
        elif isinstance(i, dict) and "message" in i and isinstance(i["message"], dict) and "role" not in i:
            flat.append(i["message"])  # choices / generations / OpenInference entries
        else:
            flat.append(i)
    return flat


def _unwrap_container(d: dict[str, Any]) -> Any:
    for key in ("messages", "input", "prompt", "choices", "output", "generations", "contents", "prompts"):
        v = d.get(key)
        if isinstance(v, list | str) and not ("role" in d or "lc" in d or d.get("type") in _RESPONSES_ITEMS
                                                 or d.get("type") in _RESULT_TYPES):
            if key in ("input", "prompt", "output", "prompts") and isinstance(v, str) and len(d) > 1 and (
                    "role" in d):
                break
            return v
    return [d]


def split_system(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system instruction parts, the other messages)."""
    system = [p for m in messages if m["role"] == "system" for p in m["parts"]]
    return system, [m for m in messages if m["role"] != "system"]
