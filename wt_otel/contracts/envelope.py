"""Contract A: the interchange envelope (`*.wtin.json`, `windtunnel_interchange: 1`).

`messages` is the OTel GenAI parts model with exactly three part types. The
reader is strict where a wrong value silently breaks replay (version, object
arguments, non-empty call ids) and tolerant everywhere else: unknown fields
are kept and written back out.

Fields wt-otel adds beyond Wind Tunnel's v1 (all optional, so any v1 reader
ignores them):

- witnessed calls: `tool_call_id`, `span_id`, `trace_id`, `started_at`,
  `ended_at`, `error`, `correlation` (how the call was paired with its
  transcript tool_call);
- envelope: `system_instructions`, `omitted_parts` (parts v1 cannot carry),
  `provenance`, `redaction`, `warnings`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from wt_otel.contracts.problems import (
    ContractModel,
    Problem,
    Rule,
    fail,
    is_nonempty_str,
    is_object,
    is_one_of,
    is_version,
    json_path,
    load,
    truncated,
)

# the file suffix and version key (formats.ENVELOPE registers them; the dump reader sniffs envelopes by them
# without loading every format)
SUFFIX = ".wtin.json"
VERSION_KEY = "windtunnel_interchange"
PART_TYPES = ("text", "tool_call", "tool_call_response")
CORRELATIONS = ("tool_call_id", "name_order", "none")


def _arguments(value: Any) -> Any:
    """OTel carries arguments as a JSON string; the envelope wants them parsed."""
    if isinstance(value, str):
        fail(
            "object",
            "must be an object, not a JSON-encoded string "
            "(emit the parsed arguments object, e.g. json.loads(arguments))",
        )
    return is_object('the tool arguments, e.g. {"query": "Bluewing"}; use {} for none').check(value)


class Source(ContractModel):
    """Opaque provenance in the producer's vocabulary (an incident id, a ticket)."""

    ref: str | None = None
    system: str | None = None
    captured_at: str | None = None


class EnvelopeSession(ContractModel):
    model_config = ConfigDict(title="Session")  # the schema title the format has always had

    model: Annotated[
        str, is_nonempty_str("set it to the model id the session ran, e.g. gen_ai.request.model")
    ]
    provider: str | None = None
    sampler: dict[str, Any] | None = None
    started_at: str | None = None


class _PartModel(ContractModel):
    def model_post_init(self, context: Any) -> None:
        # `type` has a default for writers' convenience, but it is the union
        # tag: it must be dumped even when the writer did not set it.
        self.model_fields_set.add("type")


class TextPart(_PartModel):
    type: Literal["text"] = "text"
    content: str


class ToolCallPart(_PartModel):
    type: Literal["tool_call"] = "tool_call"
    id: Annotated[str, is_nonempty_str("copy the provider's tool call id; responses pair with calls by it")]
    name: Annotated[str, is_nonempty_str("the name of the tool the model called")]
    arguments: Annotated[dict[str, Any], Rule(_arguments)]


class ToolCallResponsePart(_PartModel):
    type: Literal["tool_call_response"] = "tool_call_response"
    id: Annotated[str, is_nonempty_str("use the id of the tool_call this answers")]
    response: Any


Part = Annotated[TextPart | ToolCallPart | ToolCallResponsePart, Field(discriminator="type")]


class Message(ContractModel):
    role: str
    parts: list[Part]


class ToolDefinition(ContractModel):
    name: Annotated[str, is_nonempty_str()]
    description: str | None = None
    input_schema: Annotated[
        dict[str, Any], is_object('a JSON Schema object; {"type": "object"} when unknown')
    ]
    result_schema: Annotated[
        dict[str, Any] | None, is_object("a JSON Schema object, or leave it out", True)
    ] = None


class WitnessedCall(ContractModel):
    """A server-side (execute_tool span) record of one tool call."""

    tool_name: Annotated[str, is_nonempty_str()]
    args: Annotated[
        dict[str, Any], is_object('the arguments the tool received, flat, e.g. {"query": "Bluewing"}')
    ]
    result: Any = None
    # wt-otel additive fields
    tool_call_id: str | None = None
    span_id: str | None = None
    trace_id: str | None = None
    started_at: str | None = Field(None, description="ISO 8601")
    ended_at: str | None = Field(None, description="ISO 8601")
    error: str | None = Field(None, description="the span's error description, null when it succeeded")
    correlation: Annotated[
        Literal["tool_call_id", "name_order", "none"] | None,
        is_one_of(CORRELATIONS, optional=True),
        Field(description="how this call was paired with a transcript tool_call"),
    ] = None


class OmittedPart(ContractModel):
    """A part v1 cannot carry (reasoning, blob, uri, file, server tool call...)."""

    message_index: int
    part: dict[str, Any]


class Envelope(ContractModel):
    """A Contract A interchange envelope: one agent session."""

    windtunnel_interchange: Annotated[Literal[1], is_version("windtunnel_interchange")]
    otel_genai_mapping: str | None = None
    source: Source | None = None
    session: EnvelopeSession
    messages: list[Message]
    tool_definitions: list[ToolDefinition] = []
    witnessed_calls: list[WitnessedCall] = []
    # wt-otel additive fields
    system_instructions: list[dict[str, Any]] | None = Field(
        None, description="gen_ai.system_instructions as parts-model dicts"
    )
    omitted_parts: list[OmittedPart] = []
    provenance: dict[str, Any] | None = Field(
        None, description="trace_ids, span ids, service_name, dialects, evidence source"
    )
    redaction: dict[str, Any] | None = None
    warnings: list[str] = []
    diagnostics: list[dict[str, Any]] = Field(
        [], description="what the importer did not understand: {kind, message, span_id?, attribute?, setting?}")


def load_envelope(data: Any) -> Envelope:
    """Validate a parsed `*.wtin.json`; raises `ContractError` listing every problem."""
    return load(Envelope, data, union_tags=PART_TYPES)


def lint_envelope(env: Envelope) -> list[Problem]:
    """Things that parse but will hurt a replay: cut values, unpaired calls."""
    warnings: list[Problem] = []
    calls: dict[str, tuple[str | int, ...]] = {}
    answered: set[str] = set()
    for i, message in enumerate(env.messages):
        for j, part in enumerate(message.parts):
            at: tuple[str | int, ...] = ("messages", i, "parts", j)
            if isinstance(part, ToolCallPart):
                calls.setdefault(part.id, at)
                warnings += truncated(part.arguments, (*at, "arguments"))
            elif isinstance(part, ToolCallResponsePart):
                if part.id in calls:
                    answered.add(part.id)
                else:
                    path = json_path((*at, "id"))
                    warnings.append(
                        Problem(
                            path,
                            f"{path} {part.id!r} has no matching tool_call in the message stream "
                            "(a response must follow the tool_call with the same id)",
                        )
                    )
                warnings += truncated(part.response, (*at, "response"))
    for call_id, at in calls.items():
        if call_id not in answered:
            path = json_path((*at, "id"))
            warnings.append(
                Problem(
                    path,
                    f"{path} {call_id!r} has no tool_call_response in the message stream "
                    "(the call was never answered; replay has no result to check it against)",
                )
            )
    for k, call in enumerate(env.witnessed_calls):
        warnings += truncated(call.args, ("witnessed_calls", k, "args"))
        warnings += truncated(call.result, ("witnessed_calls", k, "result"))
    return warnings
