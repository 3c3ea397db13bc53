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
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from wt_otel.contracts.problems import (
    ContractModel,
    Loc,
    Rule,
    describe,
    fail,
    is_nonempty_str,
    is_one_of,
    is_version,
    load,
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


def _timeline_errors(
    timeline: list[Frame] | None, parameters: Parameters | None, loc: Loc = ()
) -> list[tuple[Loc, str]]:
    """§2.2: only the final frame carries finish_reason; a call that says it is unary
    (`stream: false` written out) is at most one frame, with delta_ms 0."""
    if not timeline:
        return []
    errors: list[tuple[Loc, str]] = []
    last = len(timeline) - 1
    for i, frame in enumerate(timeline[:-1]):
        if frame.finish_reason is not None:
            errors.append(((*loc, "response_timeline", i, "finish_reason"),
                           f"may appear on the final frame only (frame {i} of {last + 1}; §2.2)"))
    if timeline[-1].tool_calls and timeline[-1].finish_reason not in (None, "tool_calls"):
        errors.append(((*loc, "response_timeline", last, "finish_reason"),
                       f'must be "tool_calls" on a frame that calls tools, got {timeline[-1].finish_reason!r}'))
    if parameters is not None and "stream" in parameters.model_fields_set and not parameters.stream:
        if len(timeline) > 1:
            errors.append(((*loc, "response_timeline"),
                           f"must hold exactly 1 frame for a unary call (parameters.stream is false), "
                           f"got {len(timeline)} (§2.2; set stream: true for a streamed call)"))
        elif timeline[0].delta_ms != 0:
            errors.append(((*loc, "response_timeline", 0, "delta_ms"),
                           f"must be 0 for a unary call (parameters.stream is false), got {timeline[0].delta_ms}"))
    return errors


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

    @model_validator(mode="after")
    def _timeline_rules(self) -> CassetteCall:
        raise_at(_timeline_errors(self.response_timeline, self.request_context.parameters))
        return self


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

    @model_validator(mode="after")
    def _has_a_call(self) -> TraceEntry:
        if self.calls is None:
            raise_at(
                [
                    ((name,), "is required (or record the session's LLM calls in calls)")
                    for name in ("request_context", "response_timeline")
                    if getattr(self, name) is None
                ]
            )
        context = self.request_context
        raise_at(_timeline_errors(self.response_timeline, context.parameters if context else None))
        return self

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

    @model_validator(mode="after")
    def _pointers_resolve(self) -> Cassette:
        errors: list[tuple[Loc, str]] = []
        if len(self.history_keys) > HISTORY_CAP:
            errors.append(
                (
                    ("history_keys",),
                    f"holds at most {HISTORY_CAP} trace ids (the ring buffer cap), got "
                    f"{len(self.history_keys)} (evict the oldest runs from history_keys and traces)",
                )
            )
        if self.latest_trace_id not in self.history_keys:
            errors.append(
                (
                    ("latest_trace_id",),
                    f"{self.latest_trace_id!r} must be among history_keys (append it there)",
                )
            )
        for i, key in enumerate(self.history_keys):
            if key not in self.traces:
                errors.append((("history_keys", i), f"{key!r} names no entry in traces"))
        for key, entry in self.traces.items():
            if entry.trace_id != key:
                errors.append(
                    (("traces", key, "trace_id"), f"must equal its key in traces, got {entry.trace_id!r}")
                )
        raise_at(errors)
        return self

    def latest(self) -> TraceEntry:
        return self.traces[self.latest_trace_id]


def load_cassette(data: Any) -> Cassette:
    """Validate a parsed `*.cassette.json`; raises `ContractError` listing every problem."""
    return load(Cassette, data)


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
