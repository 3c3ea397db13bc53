"""LLM cassettes (`*.cassette.json`): the VCR fixture format of vcr-fixture-format.md.

The spec's cassette is a ring buffer of up to 5 recording *runs*
(`history_keys`, newest last, `latest_trace_id` the one replay loads), each a
trace entry keyed by a 32-hex id and holding ONE LLM call (`request_context`,
`response_timeline`, `usage`...). An agent session makes many LLM calls, so:

- `history_keys` stays capped at 5, as the spec says; each key names a run.
- A trace entry may carry the additive `calls`: the session's LLM calls in
  call order, each shaped like a spec entry's call fields. When `calls` is
  present it is authoritative; the spec's trace-level call fields are then
  optional (wt-otel writes the first call there too, for spec readers).
- Without `calls`, the trace-level fields are the run's only call: the
  spec's own shape stays valid, read as a one-call session.

`wt_cassette: 1` is an additive version key our files carry; files without
it are accepted when recognised by name or shape. Unlike Contract A, tool-call
arguments here are the OpenAI wire shape: a string holding a JSON object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from wt_otel.contracts.problems import (
    ContractModel,
    Loc,
    Problem,
    Rule,
    describe,
    fail,
    is_nonempty_str,
    is_one_of,
    is_version,
    json_path,
    load_whole,
    raise_at,
)

HISTORY_CAP = 5
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")


def _trace_id(value: Any) -> Any:
    if isinstance(value, str) and _HEX32.match(value):
        return value
    fail("trace_id", f"must be a 32-character lowercase hex trace id, {describe(value)}")


def _json_object_string(value: Any) -> Any:
    """The wire shape: arguments travel as a JSON-encoded object."""
    if isinstance(value, dict):
        fail(
            "json_string",
            "must be a JSON-encoded string, not an object (cassettes keep the OpenAI wire "
            "shape: emit json.dumps(arguments))",
        )
    try:
        decoded = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        fail("json_string", f"must be a string holding a JSON object, {describe(value)}")
    return value


TraceId = Annotated[str, Rule(_trace_id)]


class ChatMessage(ContractModel):
    """A request message (OpenAI chat shape; tool_calls / tool_call_id allowed)."""

    role: Annotated[str, is_nonempty_str("system, user, assistant or tool")]
    content: str | list[Any] | None = None


class Parameters(ContractModel):
    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = False


class RequestContext(ContractModel):
    model: Annotated[str, is_nonempty_str("the model id without a provider prefix")]
    provider: str | None = None
    messages: list[ChatMessage] = []
    parameters: Parameters = Field(default_factory=Parameters)


class NetworkMetrics(ContractModel):
    """`ttfb_ms` null: the telemetry held no first-token evidence for a streamed call (unknown,
    never guessed; the additive `ttfb_source` says where a known value came from)."""

    ttfb_ms: float | None = Field(0.0, ge=0)
    total_duration_ms: float = Field(0.0, ge=0)


class FunctionCall(ContractModel):
    name: Annotated[str, is_nonempty_str()]
    arguments: Annotated[str, Rule(_json_object_string)]


class CassetteToolCall(ContractModel):
    model_config = ConfigDict(title="ToolCall")  # the schema title the format has always had

    id: Annotated[str, is_nonempty_str()]
    type: Annotated[Literal["function"], is_one_of(["function"])] = "function"
    function: FunctionCall


class Frame(ContractModel):
    """One coalesced response frame."""

    delta_ms: float = Field(0.0, ge=0)
    chunk: str = ""
    tool_calls: list[CassetteToolCall] = []
    finish_reason: str | None = None


class ExceptionBoundary(ContractModel):
    occurred: bool = False
    error_type: str | None = None
    message: str | None = None

    @model_validator(mode="after")
    def _quiet_when_not_occurred(self) -> ExceptionBoundary:
        # §2.3: "When occurred: false, error_type and message are omitted."
        if not self.occurred:
            raise_at(
                [
                    ((name,), "must be omitted while occurred is false (§2.3; set occurred: true or drop it)")
                    for name in ("error_type", "message")
                    if name in self.model_fields_set
                ]
            )
        return self


class Usage(ContractModel):
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    total_tokens: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _total_is_the_sum(self) -> Usage:
        if "total_tokens" in self.model_fields_set:
            want = self.prompt_tokens + self.completion_tokens
            if self.total_tokens != want:
                raise_at(
                    [
                        (
                            ("total_tokens",),
                            f"must be the sum of prompt_tokens and completion_tokens ({want}), "
                            f"got {self.total_tokens}",
                        )
                    ]
                )
        return self


class RawPayload(ContractModel):
    sync_response: dict[str, Any] | None = None
    stream_chunks: list[dict[str, Any]] | None = None


class CassetteCall(ContractModel):
    """One recorded LLM call: the spec's per-trace call fields."""

    model_config = ConfigDict(title="LLMCall")  # the schema title the format has always had

    request_context: RequestContext
    network_metrics: NetworkMetrics | None = None
    response_timeline: list[Frame]
    exception_boundary: ExceptionBoundary | None = None
    usage: Usage | None = None
    raw_payload: RawPayload | None = None


class TraceEntry(ContractModel):
    """A recorded run: the spec's single call, or the additive ordered `calls`."""

    trace_id: TraceId
    request_context: RequestContext | None = None
    network_metrics: NetworkMetrics | None = None
    response_timeline: list[Frame] | None = None
    exception_boundary: ExceptionBoundary | None = None
    usage: Usage | None = None
    raw_payload: RawPayload | None = None
    # wt-otel additive: every LLM call of the session, in call order
    calls: list[CassetteCall] | None = None

    def llm_calls(self) -> list[CassetteCall]:
        """The run's LLM calls in order, whichever shape the file used."""
        if self.calls is not None:
            return self.calls
        fields = {name: getattr(self, name) for name in CassetteCall.model_fields}
        return [CassetteCall.model_validate(fields)]


class Cassette(ContractModel):
    """An LLM cassette: named scenario, up to 5 recorded runs."""

    wt_cassette: Annotated[Literal[1] | None, is_version("wt_cassette", optional=True)] = None
    scenario: str = "auto"
    latest_trace_id: TraceId
    history_keys: list[TraceId] = Field(
        default_factory=list, description=f"recorded runs, oldest first, at most {HISTORY_CAP}"
    )
    traces: dict[TraceId, TraceEntry]

    def latest(self) -> TraceEntry:
        return self.traces[self.latest_trace_id]


# Provider prefixes a model id may carry (LiteLLM / OpenRouter style `openai/gpt-4o`); the spec's
# request_context.model is "without provider prefix", the provider goes in `provider`.
KNOWN_PROVIDERS = frozenset({
    "openai", "anthropic", "ollama", "azure", "azure_ai", "bedrock", "aws.bedrock", "google", "gemini",
    "vertex_ai", "gcp.vertex_ai", "gcp.gemini", "mistral", "mistral_ai", "groq", "cohere", "together_ai",
    "openrouter", "deepseek", "xai", "fireworks_ai", "perplexity", "huggingface",
})


def split_model(model: str | None, provider: str | None) -> tuple[str, str | None]:
    """(model without a provider prefix, provider): `openai/gpt-4o` -> (`gpt-4o`, `openai`).
    Only a known provider (or the call's own) is a prefix: `meta-llama/Llama-3` keeps its slash.
    The one normaliser: import, record mode and replay's request matching all use it."""
    if not model:
        return "unknown", provider
    head, sep, tail = model.partition("/")
    if sep and tail and (head.lower() in KNOWN_PROVIDERS or (provider and head.lower() == provider.lower())):
        return tail, provider or head.lower()
    return model, provider


def load_cassette(data: Any) -> Cassette:
    """Validate a parsed `*.cassette.json`; raises `ContractError` listing every problem at once: the
    fields' types and the spec's cross-field rules (`cassette_rules`) in one pass."""
    return load_whole(Cassette, data, cassette_rules)


# ---------------------------------------------------------------- the spec's cross-field rules

TIMING_TOLERANCE_MS = 1.0  # recorders round to the microsecond, importers clamp: a smaller gap is no error


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def cassette_rules(data: Any) -> Iterator[tuple[Loc, str]]:
    """Every cross-field rule of vcr-fixture-format.md over the raw document, whatever else is wrong with it:
    the ring buffer's pointers (§2.1), each call's frames, stream flag and timing (§2.2), raw payload (§2.4)."""
    if not isinstance(data, dict):
        return
    traces = _dict(data.get("traces"))
    keys = data.get("history_keys")
    history: list[Any] = keys if isinstance(keys, list) else []
    if len(history) > HISTORY_CAP:
        yield (("history_keys",), f"holds at most {HISTORY_CAP} trace ids (the ring buffer cap), got "
                                  f"{len(history)} (evict the oldest runs from history_keys and traces)")
    latest = data.get("latest_trace_id")
    if isinstance(latest, str) and latest not in history:
        yield (("latest_trace_id",), f"{latest!r} must be among history_keys (append it there)")
    for i, key in enumerate(history):
        if isinstance(key, str) and key not in traces:
            yield (("history_keys", i), f"{key!r} names no entry in traces")
        if isinstance(key, str) and key in history[:i]:
            yield (("history_keys", i), f"{key!r} is listed twice (each recorded run once, oldest first)")
    for key in traces:
        if history and key not in history:
            yield (("traces", key), "is not in history_keys: a run the ring buffer evicted leaves traces too "
                                    "(§2.1; list it in history_keys or remove it)")
    for key, entry in traces.items():
        if not isinstance(entry, dict):
            continue
        loc: Loc = ("traces", key)
        if "trace_id" in entry and entry["trace_id"] != key:
            yield ((*loc, "trace_id"), f"must equal its key in traces, got {entry['trace_id']!r}")
        calls = entry.get("calls")
        if calls is None:
            for name in ("request_context", "response_timeline"):
                if entry.get(name) is None:
                    yield ((*loc, name), "is required (or record the session's LLM calls in calls)")
        elif isinstance(calls, list):
            for i, call in enumerate(calls):
                if isinstance(call, dict):
                    yield from call_rules(call, (*loc, "calls", i))
        yield from call_rules(entry, loc)  # the spec's trace-level call (wt-otel writes calls[0] there too)


def lint_cassette(cassette: Cassette) -> list[Problem]:
    """What replay tolerates but the spec words otherwise: a model stored with its provider prefix (older
    record mode did; replay compares models without it)."""
    warnings = []
    for key, entry in cassette.traces.items():
        for i, call in enumerate(entry.llm_calls()):
            model = call.request_context.model
            bare = split_model(model, call.request_context.provider)[0]
            if bare != model:
                where: Loc = ("traces", key, "calls", i) if entry.calls is not None else ("traces", key)
                path = json_path((*where, "request_context", "model"))
                warnings.append(Problem(path, f"{path} {model!r} carries a provider prefix: the spec stores the "
                                              f"model without it ({bare!r}; the provider goes in provider)"))
    return warnings


def call_rules(call: dict[str, Any], loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """§2.2 and §2.4 for one call: tool calls and finish_reason on the final frame only; the stream flag
    against the frames, the timing and the raw payload; ttfb_ms against the frames and the total."""
    timeline = call.get("response_timeline")
    frames = [f if isinstance(f, dict) else {} for f in timeline] if isinstance(timeline, list) else []
    params = _dict(_dict(call.get("request_context")).get("parameters"))
    stream = params.get("stream") if isinstance(params.get("stream"), bool) else None  # None: not said
    metrics = _dict(call.get("network_metrics"))
    ttfb, total = _number(metrics.get("ttfb_ms")), _number(metrics.get("total_duration_ms"))
    last = len(frames) - 1
    for i, frame in enumerate(frames[:-1]):
        if frame.get("finish_reason") is not None:
            yield ((*loc, "response_timeline", i, "finish_reason"),
                   f"may appear on the final frame only (frame {i} of {last + 1}; §2.2)")
        if frame.get("tool_calls"):
            yield ((*loc, "response_timeline", i, "tool_calls"),
                   f"may appear on the final frame only (frame {i} of {last + 1}; §2.2: the terminal frame "
                   "carries the tool calls, with finish_reason \"tool_calls\"; move them there)")
    if frames and frames[-1].get("tool_calls") and frames[-1].get("finish_reason") not in (None, "tool_calls"):
        yield ((*loc, "response_timeline", last, "finish_reason"),
               f'must be "tool_calls" on a frame that calls tools, got {frames[-1].get("finish_reason")!r}')
    if stream is False:
        if len(frames) > 1:
            yield ((*loc, "response_timeline"),
                   f"must hold exactly 1 frame for a unary call (parameters.stream is false), got {len(frames)} "
                   "(§2.2; set stream: true for a streamed call)")
        elif frames and _number(frames[0].get("delta_ms")) not in (None, 0.0):
            yield ((*loc, "response_timeline", 0, "delta_ms"),
                   f"must be 0 for a unary call (parameters.stream is false), got {frames[0].get('delta_ms')}")
        if ttfb is not None and total is not None and abs(ttfb - total) > TIMING_TOLERANCE_MS:
            yield ((*loc, "network_metrics", "ttfb_ms"),
                   f"must equal total_duration_ms ({total:g}) for a unary call (parameters.stream is false; "
                   f"§2.2), got {ttfb:g} (set stream: true if the call was streamed)")
    if ttfb is not None and total is not None and ttfb > total + TIMING_TOLERANCE_MS:
        yield ((*loc, "network_metrics", "ttfb_ms"),
               f"must not exceed total_duration_ms ({total:g}): the first byte came before the end, got {ttfb:g}")
    first = _number(frames[0].get("delta_ms")) if frames else None
    if stream is True and ttfb is not None and first is not None and abs(first - ttfb) > TIMING_TOLERANCE_MS:
        yield ((*loc, "response_timeline", 0, "delta_ms"),
               f"must equal network_metrics.ttfb_ms ({ttfb:g}) for a streamed call (§2.2: the first frame "
               f"arrives at the time to first byte), got {first:g}")
    deltas = [d for d in (_number(f.get("delta_ms")) for f in frames) if d is not None]
    if stream is True and total is not None and sum(deltas) > total + TIMING_TOLERANCE_MS:
        yield ((*loc, "response_timeline"),
               f"ends after the call did: its frames' delta_ms add up to {sum(deltas):g} ms, more than "
               f"network_metrics.total_duration_ms ({total:g})")
    raw = _dict(call.get("raw_payload"))
    if stream is False and raw.get("stream_chunks"):
        yield ((*loc, "raw_payload", "stream_chunks"),
               "is for a streamed call, but parameters.stream is false (§2.4: a unary call keeps sync_response)")
    if stream is True and raw.get("sync_response") is not None:
        yield ((*loc, "raw_payload", "sync_response"),
               "is for a unary call, but parameters.stream is true (§2.4: a streamed call keeps stream_chunks)")


def add_run(cassette: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """Record one more run (a trace entry with its `trace_id`) into a cassette, as the spec's ring buffer:
    its key is appended to `history_keys` and becomes `latest_trace_id`; beyond HISTORY_CAP runs the
    oldest are evicted from `history_keys` and `traces` alike. Returns the cassette (changed in place)."""
    key = entry["trace_id"]
    traces = cassette.setdefault("traces", {})
    history = [k for k in cassette.setdefault("history_keys", []) if k != key] + [key]
    traces[key] = entry
    for old in history[:-HISTORY_CAP]:
        traces.pop(old, None)
    cassette["history_keys"] = history[-HISTORY_CAP:]
    cassette["latest_trace_id"] = key
    return cassette
