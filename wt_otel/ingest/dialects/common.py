"""Attribute reading every dialect shares: model, provider, sampler, usage, errors."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from wt_otel.ingest.keys import CONVERSATION_KEYS
from wt_otel.model.session import LLMCall
from wt_otel.model.spans import STATUS_ERROR, SpanRecord

INFERENCE_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion", "responses"})

_SAMPLER_KEYS = {
    "temperature": ("gen_ai.request.temperature", "llm.request.temperature"),
    "top_p": ("gen_ai.request.top_p", "llm.request.top_p", "llm.top_p"),
    "top_k": ("gen_ai.request.top_k",),
    "max_tokens": ("gen_ai.request.max_tokens", "llm.request.max_tokens"),
    "seed": ("gen_ai.request.seed",),
    "frequency_penalty": ("gen_ai.request.frequency_penalty", "llm.frequency_penalty"),
    "presence_penalty": ("gen_ai.request.presence_penalty", "llm.presence_penalty"),
    "stop_sequences": ("gen_ai.request.stop_sequences",),
}
_USAGE_KEYS = {
    "input_tokens": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt",
                     "llm.usage.prompt_tokens"),
    "output_tokens": ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                      "llm.token_count.completion", "llm.usage.completion_tokens"),
    "total_tokens": ("llm.usage.total_tokens", "llm.token_count.total", "gen_ai.usage.total_tokens"),
}


_ANY_SAMPLER_KEY = frozenset(k for keys in _SAMPLER_KEYS.values() for k in keys)
_ANY_USAGE_KEY = frozenset(k for keys in _USAGE_KEYS.values() for k in keys)


def first(attrs: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = attrs.get(k)
        if v is not None and v != "":
            return v
    return None


def as_list(value: Any) -> list[Any] | None:
    """A message/definition list given as structured AnyValue or as a JSON string."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    if isinstance(value, dict):
        return [value]
    return value if isinstance(value, list) else None


def operation(span: SpanRecord) -> str | None:
    op = span.attributes.get("gen_ai.operation.name")
    if isinstance(op, str):
        return op
    head = span.name.split(" ", 1)[0]
    return head if head in INFERENCE_OPERATIONS or head in ("execute_tool", "invoke_agent") else None


_ANY_CONVERSATION_KEY = frozenset(CONVERSATION_KEYS)


def conversation_id(attrs: dict[str, Any]) -> str | None:
    if attrs.keys().isdisjoint(_ANY_CONVERSATION_KEY):  # most spans: not one lookup per known key
        return None
    v = first(attrs, CONVERSATION_KEYS)
    return str(v) if v is not None else None


def base_call(span: SpanRecord, dialect: str) -> LLMCall:
    """An LLMCall with everything but the messages filled from common attributes."""
    a = span.attributes
    call = LLMCall(span_id=span.span_id, trace_id=span.trace_id, dialect=dialect,
                   start_ns=span.start_ns, end_ns=span.end_ns)
    model = first(a, ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name", "llm.request.model"))
    call.model = str(model) if model is not None else None
    provider = first(a, ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"))
    call.provider = str(provider).lower() if provider is not None else None
    if not a.keys().isdisjoint(_ANY_SAMPLER_KEY):  # most spans set none of them: no lookup per key
        for name, keys in _SAMPLER_KEYS.items():
            v = first(a, keys)
            if v is not None:
                call.sampler[name] = v
    params = a.get("llm.invocation_parameters")
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except ValueError:
            params = None
    if isinstance(params, dict):
        for k in ("temperature", "top_p", "max_tokens", "seed"):
            if k in params and k not in call.sampler:
                call.sampler[k] = params[k]
        call.stream = _flag(params.get("stream"))
    if not a.keys().isdisjoint(_ANY_USAGE_KEY):  # (a tool or agent span counts no tokens)
        for name, keys in _USAGE_KEYS.items():
            v = first(a, keys)
            if isinstance(v, int | float) or (isinstance(v, str) and v.isdigit()):
                call.usage[name] = int(v)
    if "total_tokens" not in call.usage and {"input_tokens", "output_tokens"} <= call.usage.keys():
        call.usage["total_tokens"] = call.usage["input_tokens"] + call.usage["output_tokens"]
    reasons = a.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list):
        call.finish_reasons = [str(r) for r in reasons]
    stream = None if a.keys().isdisjoint(_STREAM_FLAGS) else _flag(first(a, _STREAM_FLAGS))  # (most spans: none)
    if stream is not None:
        call.stream = stream
    call.error_type, call.error_message = span_error(span)
    call.ttfb_ms = first_token_ms(span) if span.events or not a.keys().isdisjoint(_TTFT_KEYS) else None
    if call.stream is None and (call.ttfb_ms is not None or span.name.endswith(_STREAM_SPAN_SUFFIXES)):
        call.stream = True  # a first chunk is streaming evidence: only a stream has one before the end
    elif call.stream is None and span.name.endswith(_UNARY_SPAN_SUFFIXES):
        call.stream = False
    call.conversation_id = conversation_id(a)
    definitions = a.get("gen_ai.tool.definitions")
    if definitions is not None:
        call.tool_definitions = [d for d in map(tool_definition, as_list(definitions) or []) if d]
    return call


# Whether the call streamed (OpenLLMetry writes gen_ai.is_streaming / llm.is_streaming, LiteLLM as a string).
_STREAM_FLAGS = ("gen_ai.request.stream", "gen_ai.is_streaming", "llm.is_streaming")
# Model-call spans that stream, or not, by name (the Vercel AI SDK before v7: ai.streamText.doStream,
# ai.generateText.doGenerate).
_STREAM_SPAN_SUFFIXES = (".doStream",)
_UNARY_SPAN_SUFFIXES = (".doGenerate",)
# Seconds from request to the first token, as producers name it (GenAI's metric name used as a span attribute,
# GenAI's time_to_first_chunk as the AI SDK 7 writes it, OpenLLMetry's streaming attribute).
_TTFT_SECONDS = ("gen_ai.server.time_to_first_token", "gen_ai.response.time_to_first_chunk",
                 "gen_ai.client.operation.time_to_first_chunk",
                 "gen_ai.response.time_to_first_token", "llm.response.time_to_first_token",
                 "llm.openai.chat_completions.streaming_time_to_first_token")
_TTFT_MS = ("ai.response.msToFirstChunk",)  # the same in milliseconds (the Vercel AI SDK before v7)
_TTFT_KEYS = _TTFT_SECONDS + _TTFT_MS
# Span events marking the first streamed token (OpenInference: "First Token Stream Event"; the AI SDK:
# ai.stream.firstChunk); OpenLLMetry logs every chunk, the first of them is the first token.
_FIRST_TOKEN_EVENTS = ("first token stream event", "gen_ai.first_token", "first_token", "ai.stream.firstchunk",
                       "gen_ai.content.completion.chunk", "llm.content.completion.chunk")


def _flag(value: Any) -> bool | None:
    """A boolean attribute as producers write it: true, "true", "True" (LiteLLM); None when absent or neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def first_token_ms(span: SpanRecord) -> float | None:
    """Time to first token in ms from the span's own evidence, or None (unknown: never the total duration).

    The GenAI metric is in seconds, but producers that copy it onto the span differ (Strands Agents writes
    its `timeToFirstByteMs` there): a value that cannot be seconds (longer than the span, or a minute and
    more when the span has no duration) but fits as milliseconds is read as milliseconds.
    """
    ms = first(span.attributes, _TTFT_MS)
    if isinstance(ms, int | float) and not isinstance(ms, bool) and ms >= 0:
        return float(ms)
    v = first(span.attributes, _TTFT_SECONDS)
    if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0:
        duration_ms = max(span.end_ns - span.start_ns, 0) / 1e6
        as_ms = v * 1000.0 > duration_ms >= v if duration_ms else v >= 60
        return float(v) if as_ms else float(v) * 1000.0
    for ev in span.events:
        if ev.name.lower() in _FIRST_TOKEN_EVENTS and ev.time_ns >= span.start_ns > 0:
            return (ev.time_ns - span.start_ns) / 1e6
    return None


def span_error(span: SpanRecord) -> tuple[str | None, str | None]:
    """(error type, message) from status, `error.type` and the exception event."""
    etype = span.attributes.get("error.type")
    message = span.status_message or None
    for ev in span.events:
        if ev.name == "exception":
            etype = etype or ev.attributes.get("exception.type")
            message = message or ev.attributes.get("exception.message")
    if span.status_code != STATUS_ERROR and etype is None:
        return None, None
    return (str(etype) if etype else "Error"), (str(message) if message else None)


def tool_definition(d: Any) -> dict[str, Any] | None:
    """A tool definition in any of the common shapes -> {name, description, input_schema}."""
    if not isinstance(d, dict):
        return None
    fn = d["function"] if isinstance(d.get("function"), dict) else d
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return None
    schema = fn.get("parameters", fn.get("input_schema", fn.get("inputSchema", fn.get("params_json_schema"))))
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            schema = None
    out: dict[str, Any] = {"name": name, "description": str(fn.get("description") or "")}
    if isinstance(schema, dict):
        out["input_schema"] = schema
    return out


def unflatten(attrs: dict[str, Any], prefix: str) -> list[Any]:
    """`prefix.0.role`, `prefix.0.tool_calls.1.name`... -> [{"role": ..., "tool_calls": [..]}].

    Flattened conventions (OpenLLMetry, OpenInference) spread one message over
    many attributes; numeric path segments become list positions.
    """
    head = prefix + "."
    out = listify(nest((key[len(head):], value) for key, value in attrs.items() if key.startswith(head)))
    return out if isinstance(out, list) else []


def nest(paths: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Dotted paths and their values as one nested dict (`a.b` = 1, `a.c` = 2 -> {a: {b: 1, c: 2}})."""
    root: dict[str, Any] = {}
    for dotted, value in paths:
        node = root
        *path, leaf = dotted.split(".")
        for seg in path:
            child = node.get(seg)
            if not isinstance(child, dict):
                child = node[seg] = {}
            node = child
        node[leaf] = value
    return root


def listify(node: Any) -> Any:
    """Dicts whose keys are all numbers become lists, in number order (flattened `x.0.*`, `x.1.*`)."""
    if not isinstance(node, dict):
        return node
    items = {k: listify(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items):
        return [items[k] for k in sorted(items, key=int)]
    return items
