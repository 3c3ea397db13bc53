"""The shape-first reader: conversation data wherever a producer put it, with no dialect of its own.

Every dialect in this package knows where one producer puts its content. This reader knows none of
them; it reads what any producer emits by its *shape*:

- what the span is (`span_role`): an LLM call, a tool run or an agent/workflow step, from whatever the
  producer says (`gen_ai.operation.name`, `openinference.span.kind`, `traceloop.span.kind`,
  `langfuse.observation.type`, `mlflow.spanType`, Haystack's component type, ...: any attribute named
  like a span kind or type), else from the span name;
- where the content is (`fields`): every attribute and event attribute, flattened lists
  (`x.0.role`, `x.0.content`) put back together, JSON or Python-repr text decoded; a field's name says
  whether it is an input or an output (`input`, `prompt`, `request`, `arguments` / `output`,
  `completion`, `response`, `result`, ...);
- what the content is: a message list in any role vocabulary and any encoding the parts layer knows
  (`wt_otel.ingest.messages`), one message per event (`gen_ai.user.message`, a log body in JSON), a
  tool's name, arguments and result, or the plain text an agent was asked and answered.

It is the last reader `dialects.observe` asks, so a producer nobody wrote a dialect for still gives
sessions; with every dialect switched off (`WT_OTEL_DIALECTS_OFF=all`) it reads the fixtures alone,
which is how the leave-one-producer-out test proves that the import generalises.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from wt_otel.ingest.dialects.common import base_call, listify, nest, tool_definition
from wt_otel.ingest.dialects.tools import tool_execution
from wt_otel.ingest.keys import MODEL_CALL, model_call_bits
from wt_otel.ingest.messages import (
    ROLE_ALIASES,
    decode_value,
    looks_serialized,
    parse_literal,
    read_messages,
    split_system,
)
from wt_otel.model.parts import signature
from wt_otel.model.session import Observation
from wt_otel.model.spans import SpanRecord

NAME = "shape"

LLM, TOOL, AGENT = "llm", "tool", "agent"

_INPUT = frozenset({"input", "inputs", "prompt", "prompts", "request", "messages", "contents", "history",
                    "arguments", "args", "instructions"})
_OUTPUT = frozenset({"output", "outputs", "completion", "completions", "response", "responses", "result",
                     "results", "choices", "choice", "answer", "return", "candidates", "generations", "reply"})
# Fields that describe content rather than hold it.
_METADATA = frozenset({"token", "tokens", "usage", "count", "model", "id", "ids", "mime", "finish", "reason",
                       "reasons", "length", "size", "time", "latency", "cost", "status", "kind", "type", "name",
                       "names", "version", "schema", "hash", "level", "provider", "system", "temperature",
                       "top", "seed", "stream", "streaming", "max", "duration", "ttft", "error", "code", "url",
                       "encoding", "format", "tags", "tag", "timestamp", "headers", "header", "settings",
                       "config", "metadata", "user", "session", "thread", "conversation"})
_TOOL_DEFS = frozenset({"tools", "functions", "definitions"})
_KIND_TAIL = re.compile(r"(?:^|[._])(?:span[._]?kind|span[._]?type|spantype|observation[._]type|operation[._]name|"
                        r"component[._]type|run[._]type|entity[._]kind|span[._]category|request[._]type)$",
                        re.IGNORECASE)
_TOKEN_SPLIT = re.compile(r"[._\-\s/:]+|(?<=[a-z0-9])(?=[A-Z])")
_TOOL_NAME_KEYS = re.compile(r"(?:^|[._])(?:tool[._]?name|function[._]?name|tool)$", re.IGNORECASE)
_CALL_ID_KEYS = re.compile(r"(?:^|[._])(?:tool[._]?call[._]?id|call[._]?id|tool[._]?id|tool[._]?use[._]?id)$",
                           re.IGNORECASE)
_NAME_PREFIX = re.compile(r"^(?:execute_tool|tool|running tool|call tool|function|tool call)[:\s]+", re.IGNORECASE)
_MAX_FIELDS = 64  # a hostile span with thousands of attributes costs a bounded read
_MAX_TEXT = 2_000_000
_ROLE_LABEL = re.compile(r"^(?:assistant|user|system|tool|ai|human):[ \t]*(.*)$", re.DOTALL | re.IGNORECASE)


@lru_cache(maxsize=8192)
def tokens(key: str) -> frozenset[str]:
    """`gen_ai.input.messages` -> {gen, ai, input, messages}; `mlflow.spanInputs` -> {mlflow, span, inputs}."""
    return frozenset(t.lower() for t in _TOKEN_SPLIT.split(key) if t)


@lru_cache(maxsize=4096)
def _role_of_kind(value: str) -> str | None:
    v = value.lower()
    if "tool" in v or v in ("function", "execute_tool", "function_call"):
        return TOOL
    if any(w in v for w in ("llm", "chat", "generat", "complet", "inference", "responses", "model_call")) or (
            v == "model"):
        return LLM
    if any(w in v for w in ("agent", "chain", "flow", "task", "crew", "pipeline", "graph")):
        return AGENT
    return None


@lru_cache(maxsize=8192)
def _is_kind_key(key: str) -> bool:
    return _KIND_TAIL.search(key) is not None


def payloads(attrs: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Attributes that hold a whole record as an object (a native export's `span_data`, a JSONL line):
    their keys are read as the span's own, prefixed with the attribute's name."""
    out = []
    for key, value in attrs.items():
        if isinstance(value, dict) and value and _direction(key) is None:
            out.append((key, value))
    return out[:4]


def span_role(span: SpanRecord) -> str | None:
    """llm / tool / agent from what the producer says of the span, else from its name; None: unknown."""
    a = span.attributes
    op = a.get("gen_ai.operation.name")
    if isinstance(op, str) and (role := _role_of_kind(op)):
        return role
    for key, value in a.items():
        if isinstance(value, str) and _is_kind_key(key) and (role := _role_of_kind(value)):
            return role
    for _, record in payloads(a):
        kind = record.get("type", record.get("kind", record.get("span_type")))
        if isinstance(kind, str) and (role := _role_of_kind(kind)):
            return role
    if _model_call(a) or any(_model_call(ev.attributes) for ev in span.events[:8]):
        return LLM  # an event that names the model and counts tokens: LlamaIndex's LLMChatEndEvent
    words = tokens(span.name)
    if words & _TOOL_WORDS:
        return TOOL
    if words & _LLM_WORDS:
        return LLM
    if words & _AGENT_WORDS:
        return AGENT
    return None


def _model_call(attrs: dict[str, Any]) -> bool:
    """A span that names a model and counts tokens is a model call (or wraps one: see `sessions`); the
    rule serve's filter keeps such spans by (`keys.model_call_bits`)."""
    bits = 0
    for key in attrs:
        bits |= _key_bits(key)
        if bits == MODEL_CALL:
            return True
    return False


# per key, as `_direction` is: a dump repeats few keys on many spans, and the test encodes and lowers each
_key_bits = lru_cache(maxsize=8192)(model_call_bits)


# Span-name words, as `tokens` splits names: `chat gpt-4o`, `openai.chat`, `ChatOpenAI`, `generate_content x`,
# `execute_tool lookup`, `lookup.tool`, `invoke_agent triage`, `x.workflow`.
_LLM_WORDS = frozenset({"chat", "completion", "completions", "generate", "llm", "generation", "inference",
                        "responses", "converse"})
_TOOL_WORDS = frozenset({"tool"})
_AGENT_WORDS = frozenset({"agent", "workflow", "chain", "task", "crew", "pipeline", "graph"})


# ---------------------------------------------------------------- fields

@lru_cache(maxsize=8192)
def _direction(key: str) -> str | None:
    """'in' / 'out' / 'both' (a whole history) / None (not content) from a field's name."""
    toks = tokens(key)
    if toks & _METADATA and not toks & {"messages", "value"} or {"tool", "choice"} <= toks:
        return None
    out, inp = bool(toks & _OUTPUT), bool(toks & _INPUT)
    if out:
        return "out"
    if inp:
        return "in"
    if "message" in toks or "all" in toks or "conversation" in toks or "content" in toks:
        return "both"
    return None


def fields(attrs: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(key, direction, value) of every attribute that may hold content; flattened lists rebuilt."""
    out: list[tuple[str, str, Any]] = []
    flat: dict[str, dict[str, Any]] = {}
    for key, value in attrs.items():
        at = _flat_index(key)
        if at >= 0:  # `llm.input_messages.0.message.role`: one field `llm.input_messages`
            flat.setdefault(key[:at], {})[key[at + 1:]] = value
            continue
        if value is None or value == "" or isinstance(value, bool | int | float):
            continue
        d = _direction(key)
        if d is not None:
            out.append((key, d, value))
    for prefix, rest in flat.items():
        d = _direction(prefix)
        if d is not None:
            out.append((prefix, d, _unflatten(rest)))
    out = _dotted_messages(out)
    for key, record in payloads(attrs):
        for sub, value in record.items():
            d = _direction(sub)
            if d is not None and value is not None and value != "" and not isinstance(value, bool | int | float):
                out.append((f"{key}.{sub}", d, value))
    return out[:_MAX_FIELDS]


_FLAT_INDEX = re.compile(r"\.\d+(?=\.|$)")


@lru_cache(maxsize=8192)
def _flat_index(key: str) -> int:
    """Where a flattened list index (`.0`) starts in `key`, or -1: per key, as `_direction` (keys repeat)."""
    m = _FLAT_INDEX.search(key)
    return -1 if m is None else m.start()


def _dotted_messages(found: list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    """A message flattened into dotted keys (`response.message.role`, `response.message.blocks`: a
    `model_dump()` spread over attributes) is one field again; the keys that hold no message stay apart."""
    groups: dict[str, list[int]] = {}
    for i, (key, _, _) in enumerate(found):
        head, dot, _rest = key.partition(".")
        if dot and not isinstance(found[i][2], list):
            groups.setdefault(head, []).append(i)
    taken: set[int] = set()
    rebuilt: list[tuple[str, str, Any]] = []
    for head, members in groups.items():
        if len(members) < 2 or (d := _direction(head)) is None:
            continue
        tree = nest((found[i][0].partition(".")[2], decode_value(found[i][2])) for i in members)
        if message_list(tree) is not None:
            rebuilt.append((head, d, tree))
            taken.update(members)
    if not rebuilt:
        return found
    return [f for i, f in enumerate(found) if i not in taken] + rebuilt


def _unflatten(rest: dict[str, Any]) -> list[Any]:
    listed = listify(nest(rest.items()))
    return listed if isinstance(listed, list) else [listed]


# ---------------------------------------------------------------- shapes

_MESSAGE_CLASS = re.compile(r"Message(?:Chunk)?$")
_CONTAINERS = ("messages", "all_messages", "input", "inputs", "prompt", "contents", "history", "chat_history",
               "choices", "output", "outputs", "generations", "candidates", "conversation", "message", "replies")


def _message_like(d: Any) -> bool:
    if not isinstance(d, dict):
        return False
    role = d.get("role")
    if isinstance(role, str) and role.lower() in ROLE_ALIASES:
        return True
    if d.get("lc") == 1 and isinstance(d.get("id"), list) and d["id"] and _MESSAGE_CLASS.search(str(d["id"][-1])):
        return True
    t = d.get("type")
    if isinstance(t, str) and t in ROLE_ALIASES and isinstance(d.get("data"), dict):
        return True  # LangChain's message_to_dict
    if t in ("message", "function_call", "function_call_output") and ("content" in d or "arguments" in d
                                                                      or "output" in d):
        return True  # OpenAI Responses items
    klass = d.get("__class__")
    return isinstance(klass, str) and bool(_MESSAGE_CLASS.search(klass))


def message_list(value: Any, _depth: int = 0) -> list[Any] | None:
    """The raw messages in `value` when it is (or wraps) a conversation, else None."""
    if _depth > 3:
        return None
    data = decode_value(value)
    if isinstance(data, dict):
        if _message_like(data):
            return [data]
        for key in _CONTAINERS:
            inner = data.get(key)
            if isinstance(inner, list | dict):
                found = message_list(inner, _depth + 1)
                if found:
                    return found
        if len(data) == 1:  # a pipeline's output keyed by its component: `{"agent": {"messages": [...]}}`
            (inner,) = data.values()
            if isinstance(inner, dict):
                return message_list(inner, _depth + 1)
        return None
    if not isinstance(data, list) or not data:
        return None
    items: list[Any] = []
    for item in data[:10_000]:
        if isinstance(item, list):
            items.extend(item)  # LangChain's [[messages]] per prompt
        elif isinstance(item, dict) and "message" in item and isinstance(item["message"], dict) and (
                "role" not in item):
            items.append(item["message"])  # choices, OpenInference `{message: {...}}` entries
        else:
            items.append(item)
    like = sum(1 for i in items if _message_like(i))
    return items if like and like * 2 >= len(items) else None


def plain_text(value: Any) -> str | None:
    """The one text a value carries: a string, or a dict/list holding a single string leaf (a run's
    `{"question": ...}`, a decorator's `{"args": ["..."], "kwargs": {}}`)."""
    data = decode_value(value)
    if isinstance(data, str):
        if looks_serialized(data) or len(data) > _MAX_TEXT:
            return None  # an SDK object's repr (often cut short with "..."), not words for a person
        if _type_name(data):
            return None
        label = _ROLE_LABEL.match(data)  # `str(ChatMessage)`: "assistant: <text>"
        if label:
            data = label.group(1)
        return data if data.strip() else None
    leaves: list[str] = []

    def walk(node: Any, depth: int) -> None:
        if len(leaves) > 1 or depth > 4:
            return
        if isinstance(node, str):
            if node.strip():
                leaves.append(node)
        elif isinstance(node, dict):
            for k, v in node.items():
                if k not in _NOT_TEXT_KEYS and not isinstance(v, bool):
                    walk(v, depth + 1)
        elif isinstance(node, list):
            for v in node:
                walk(v, depth + 1)

    walk(data, 0)
    if len(leaves) == 1:
        return leaves[0]
    # a run's output record with several fields (`{trajectory, reasoning, answer}`): the one named the answer
    while isinstance(data, dict):
        named = next((data[k] for k in _ANSWER_KEYS if isinstance(data.get(k), str) and data[k].strip()), None)
        if named is not None:
            return plain_text(named)
        data = next(iter(data.values())) if len(data) == 1 else None
    return None


_HISTORY_KEYS = ("history", "chat_history", "conversation_history", "past_messages", "previous_messages")
_MODEL_STR = re.compile(r"^\w+=")


def run_history(value: Any) -> list[dict[str, Any]]:
    """The conversation so far that a run's input carries beside its ask (`{question, history}`): a message
    list, or records of one ask and one answer each (DSPy's `History`, whose `str()` is `messages=[...]`)."""
    data = decode_value(value)
    for _ in range(3):  # through one-key wrappers: `{"input_args": {...}}`
        if not isinstance(data, dict):
            return []
        history = next((data[k] for k in _HISTORY_KEYS if data.get(k)), None)
        if history is not None:
            break
        data = next(iter(data.values())) if len(data) == 1 else None
    else:
        return []
    if isinstance(history, str) and _MODEL_STR.match(history):  # a pydantic model's str(): `field=<repr>`
        parsed, ok = parse_literal(f"_({history})")
        history = parsed if ok else history
    history = decode_value(history)
    if isinstance(history, dict):
        history = next((v for k, v in history.items() if isinstance(v, list)), None)
    raw = message_list(history)
    if raw is not None:
        return read_messages(raw)
    out: list[dict[str, Any]] = []
    for record in history[:10_000] if isinstance(history, list) else []:  # as `message_list` bounds it
        if not isinstance(record, dict):
            return []
        answer = next((record[k] for k in _ANSWER_KEYS if isinstance(record.get(k), str)), None)
        ask = plain_text({k: v for k, v in record.items() if k not in _ANSWER_KEYS})
        if answer is None or ask is None:
            return []
        out += [{"role": "user", "parts": [{"type": "text", "content": ask}]},
                {"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
    return out


# Keys that never hold the words of a turn: labels, and what came before it (a run's input beside its history)
_NOT_TEXT_KEYS = frozenset({"type", "role", "name", "id", "__class__", "trajectory", "memory", *_HISTORY_KEYS})
_ANSWER_KEYS = ("answer", "final_answer", "final_output", "output", "response", "result")


# ---------------------------------------------------------------- reading

def extract(span: SpanRecord) -> list[Observation]:
    found = fields(span.attributes)
    event_messages = _event_messages(span)
    for ev in span.events:  # a details event carries the same fields as the span would
        if len(found) >= _MAX_FIELDS:  # a span of a thousand stream-chunk events is read within bounds
            break
        if ev.attributes:
            found += fields(ev.attributes)
    if not found and not any(event_messages):  # nothing a reader below could take, whatever the span is
        return []
    role = span_role(span)
    if role == TOOL:
        tool = _tool(span, found)
        if tool:
            return tool
    return _conversation(span, role, found, event_messages)


def _conversation(span: SpanRecord, role: str | None, found: list[tuple[str, str, Any]],
                  event_messages: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> list[Observation]:
    inputs: list[dict[str, Any]] | None = None
    outputs: list[dict[str, Any]] | None = None
    definitions: list[dict[str, Any]] = []
    texts: dict[str, str] = {}
    for key, direction, value in found:
        value = decode_value(value)  # once: each reader below would decode the same JSON text again
        if tokens(key) & _TOOL_DEFS:
            definitions += _definitions(value)
            continue
        raw = message_list(value)
        if raw is None and direction == "out":
            raw = _tool_call_list(value)
        if raw is not None:
            # a field that holds messages with nothing in them (LiteLLM's empty output parts beside
            # its legacy `completion.N.function_call`) leaves the place to the next field
            if direction == "out":
                if not outputs:
                    outputs = read_messages(raw, "assistant")
            elif not inputs:
                inputs = read_messages(raw)
            continue
        if direction in ("in", "out") and direction not in texts:
            text = plain_text(value)
            if text is not None:
                texts[direction] = text
    if outputs is not None and "out" in texts and not any(
            p.get("type") == "text" for m in outputs for p in m["parts"]):
        # the answer's text and its tool calls in two fields (`ai.response.text`, `ai.response.toolCalls`)
        outputs = [{"role": "assistant", "parts": [{"type": "text", "content": texts["out"]}]}, *outputs]
    ev_in, ev_out = event_messages
    if inputs is None and ev_in:
        inputs = ev_in
    if outputs is None and ev_out:
        outputs = ev_out
    if inputs is None and outputs is None and not (texts and role in (LLM, AGENT)):
        return []  # plain texts count only where the producer said what the span is
    call = base_call(span, NAME)
    system, msgs = split_system(inputs or [])
    call.system_instructions = system
    call.input_messages = msgs
    call.output_messages = [m for m in outputs or [] if m["role"] != "system"]
    if not call.output_messages and "out" in texts and (inputs is not None or role in (LLM, AGENT)):
        call.output_messages = [{"role": "assistant", "parts": [{"type": "text", "content": texts["out"]}]}]
    if call.output_messages and msgs and role != LLM and _same_tail(msgs, call.output_messages):
        call.output_messages = []  # a run's whole history, then its final answer again
    if inputs is None and "in" in texts and role == AGENT:
        # what the agent was asked: the user's own words, before any framework wrapped them in a prompt,
        # after the conversation so far where the run's input carries it beside the ask
        before = next((h for _, d, v in found if d == "in" and (h := run_history(v))), [])
        call.input_messages = [*before, {"role": "user", "parts": [{"type": "text", "content": texts["in"]}]}]
        call.agent_input = texts["in"]
    if not call.input_messages and not call.output_messages:
        return []
    call.tool_definitions = definitions
    # only an LLM span is a model call; anything else that logs messages repeats them
    call.is_transcript = role != LLM
    return [call]


def _same_tail(history: list[dict[str, Any]], tail: list[dict[str, Any]]) -> bool:
    n = len(tail)
    return len(history) >= n and [signature(m) for m in history[-n:]] == [signature(m) for m in tail]


def is_schema(value: Any) -> bool:
    """A JSON Schema of an object (a tool's parameters), not values."""
    data = decode_value(value)
    return isinstance(data, dict) and data.get("type") == "object" and isinstance(data.get("properties"), dict)


_CALL_NAME = ("name", "toolName", "tool_name", "function")
_CALL_ARGS = ("arguments", "args", "input", "parameters")


def _tool_call_list(value: Any) -> list[Any] | None:
    """A list of tool calls given on their own (`[{toolCallId, toolName, input}]`) as one assistant message."""
    data = decode_value(value)
    if not isinstance(data, list) or not data:
        return None
    blocks = []
    for item in data[:1000]:
        item = decode_value(item)
        if not isinstance(item, dict):
            return None
        fn = next((item[k] for k in ("function", "function_call") if isinstance(item.get(k), dict)), item)
        name = next((fn[k] for k in _CALL_NAME if isinstance(fn.get(k), str) and fn[k]), None)
        if name is None or not any(k in fn for k in _CALL_ARGS):
            return None
        args = next(fn[k] for k in _CALL_ARGS if k in fn)
        blocks.append({"type": "tool-call", "toolCallId": item.get("toolCallId") or item.get("id")
                       or item.get("call_id") or "", "toolName": name, "input": args})
    return [{"role": "assistant", "content": blocks}]


def _definitions(value: Any) -> list[dict[str, Any]]:
    data = decode_value(value)
    items = data if isinstance(data, list) else [data]
    out = []
    for item in items:
        item = decode_value(item)
        if isinstance(item, dict) and isinstance(item.get("tool"), dict):
            item = item["tool"]  # OpenInference `llm.tools.N.tool.json_schema`
        if isinstance(item, dict) and "json_schema" in item:
            item = decode_value(item["json_schema"])
        d = tool_definition(item)
        if d:
            out.append(d)
    return out


def _tool(span: SpanRecord, found: list[tuple[str, str, Any]]) -> list[Observation]:
    a = span.attributes
    if any(message_list(v) for _, _, v in found):
        return []  # a step that runs several tools logs messages: read as a conversation view
    named = [(k, v) for k, v in a.items()] + [(f"{p}.{k}", v) for p, r in payloads(a) for k, v in r.items()]
    name = next((str(v) for k, v in named if isinstance(v, str) and v and _TOOL_NAME_KEYS.search(k)), None)
    if name is None:  # a payload's own `name` on a span the producer calls a tool
        name = next((str(r["name"]) for _, r in payloads(a) if isinstance(r.get("name"), str) and r["name"]), None)
    if name is None:
        name = _NAME_PREFIX.sub("", span.name).removesuffix(".tool").strip() or span.name
    call_id = next((v for k, v in a.items() if isinstance(v, str) and v and _CALL_ID_KEYS.search(k)), None)
    args = next((v for _, d, v in found if d == "in" and not is_schema(v) and not _type_name(v)
                 and not (isinstance(v, str) and _OBJECT_REPR.match(v))), None)  # arguments are no SDK object
    result = next((v for _, d, v in found if d == "out" and not _type_name(v)), None)
    if args is None and isinstance(result, str) and _OBJECT_REPR.match(result):
        return []  # a framework step's repr of its own event object, often cut short: no call to take
    if args is None and result is None:  # the call and its answer as message events (Strands)
        asked, answered = _event_messages(span, raw=True)
        args = next((m.get("content") for m in asked if isinstance(m, dict)), None)
        result = next((m.get("content") for m in answered if isinstance(m, dict)), None)
    if args is None and result is None:
        return []
    return [tool_execution(span, name, args, result, call_id, NAME)]


_TYPE_NAME = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+")
_OBJECT_REPR = re.compile(r"\s*\[?[A-Z]\w*\(")


def _type_name(value: Any) -> bool:
    """A class name where content would be (`input_event: "AgentSetup"`): what a step got, not what it said."""
    return isinstance(value, str) and _TYPE_NAME.fullmatch(value) is not None


def _event_messages(span: SpanRecord, raw: bool = False) -> tuple[list[Any], list[Any]]:
    """(input, output) messages from one-message-per-event telemetry, whatever the event names: an event
    named for a role (`gen_ai.user.message`, `...assistant...`) or a choice, its body or attributes the
    message (a dict, or JSON text as some SDKs log it)."""
    if not span.events:
        return [], []
    chat: list[Any] = []
    outputs: list[Any] = []
    for ev in sorted(span.events, key=lambda e: e.time_ns):
        name = ev.name if ev.name not in ("", "event") else str(ev.attributes.get("event.name") or "")
        if name == "gen_ai.client.inference.operation.details":
            continue
        toks = tokens(name) | (tokens(str(ev.attributes.get("event.name"))) if "event.name" in ev.attributes
                               else frozenset())
        role = next((ROLE_ALIASES[t] for t in ("user", "system", "assistant", "tool") if t in toks), None)
        choice = "choice" in toks or "completion" in toks
        if role is None and not choice:
            continue
        body = decode_value(ev.body) if ev.body is not None else None
        if not isinstance(body, dict | str | list):
            body = {k: v for k, v in ev.attributes.items() if k not in ("event.name", "gen_ai.system",
                                                                      "gen_ai.provider.name")}
        msg = _event_message(body, "assistant" if choice else role or "user")
        if msg is None:
            continue
        (outputs if choice else chat).append(msg)
    if raw:
        return chat, outputs
    return read_messages(chat), read_messages(outputs, "assistant")


def _event_message(body: Any, role: str) -> dict[str, Any] | None:
    if isinstance(body, str | list):
        return {"role": role, "content": body}
    if not isinstance(body, dict):
        return None
    inner = decode_value(body.get("message")) if "message" in body else None
    if isinstance(inner, dict):  # a choice: `{index, message: {...}, finish_reason, tool_calls?}`
        body = {**{k: v for k, v in body.items() if k != "message"}, **{k: v for k, v in inner.items()
                                                                       if v is not None}}
    elif isinstance(inner, list | str) and body.get("content") is None:  # the message's content blocks alone
        body = {**{k: v for k, v in body.items() if k != "message"}, "content": inner}
    msg = {"role": body.get("role") or role, "content": decode_value(body.get("content"))}
    if body.get("tool_calls"):
        msg["tool_calls"] = decode_value(body["tool_calls"])
    if msg["role"] == "tool" or role == "tool":
        msg["tool_call_id"] = str(body.get("id") or body.get("tool_call_id") or "")
    if msg["content"] is None and not msg.get("tool_calls"):
        return None
    return msg


__all__ = ["NAME", "extract", "fields", "is_schema", "message_list", "plain_text", "span_role", "tokens"]
