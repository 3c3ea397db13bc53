"""Contract C (the inject protocol): the wire models, the `http_inject` driver and the `python` runtime.

The spec is ../shared/seeds/0002-inject-protocol.md. The wire is fixed, not
configurable, so the driver's job is to be exact about it:

- one POST per call and never a retry: a retry that happens to succeed hides a
  flaky endpoint from a reliability bench;
- every response is validated (version echo, `reply`, `tool_calls` present even
  when empty, object arguments, `error` rules). An agent-level failure (200 with
  `error`) is a scoreable outcome and comes back verbatim in `TurnResult`; a
  contract-level failure raises `ContractViolation` with the status and body;
- the transport timeout is the endpoint's deadline (`timeout_s`) plus a fixed
  5 s grace, so a conforming endpoint can always turn its own expiry into an
  error envelope first;
- `/wt/reset` must answer 200 with the version echo, else `ResetFailed`, which
  is fatal to the run (a bench that continues past a failed wipe scores
  contamination);
- `/wt/surface` is optional: `SurfaceProbe` is `reported`, `unavailable`
  (404/501) or `invalid` (warned about, never stored as if it validated).

Only the standard library talks HTTP here (urllib.request), as the spec asks,
so a driver costs no runtime dependency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from wt_otel.contracts.problems import (
    MISSING,
    ContractModel,
    Problem,
    Rule,
    describe,
    fail,
    is_nonempty_str,
    is_object,
    problems_from,
    raise_at,
)

PROTOCOL_VERSION = 1
DEFAULT_URL = "http://127.0.0.1:8647"
DEFAULT_TIMEOUT_S = 120.0
GRACE_S = 5.0
ENV_URL = "WT_INJECT_URL"
ENV_TIMEOUT = "WT_INJECT_TIMEOUT_S"
# where a run serves the recorded tools and model: exported for an in-process agent, and sent in the reset body
ENV_UNIVERSE_URL = "WT_UNIVERSE_URL"
ENV_LLM_BASE_URL = "WT_LLM_BASE_URL"
BODY_LIMIT = 500  # characters of a response body quoted in an error

INJECT, RESET, SURFACE = "/wt/inject", "/wt/reset", "/wt/surface"


# ---------------------------------------------------------------- errors


class InjectError(Exception):
    """Base of every error this module raises."""


class RuntimeSpecError(InjectError, ValueError):
    """A runtime cannot be built: bad `--runtime`, URL or timeout setting (a usage error)."""


class ContractViolation(InjectError):
    """A contract-level failure: the run fails with this as its reason (never retried).

    `rule` is a short tag for programs (`unreachable`, `timeout`, `transport`,
    `http_status`, `json`, `shape`, `version_echo`, `agent_raised`); `status`
    and `body` (truncated) are the evidence; `problems` the shape errors, each
    naming its JSON path.
    """

    def __init__(self, where: str, message: str, *, rule: str, status: int | None = None,
                 body: str | None = None, problems: list[Problem] | None = None) -> None:
        self.where, self.message, self.rule, self.status, self.body = where, message, rule, status, body
        self.problems = problems or []
        text = f"{where}: {message}"
        if body is not None:
            text += f" [HTTP {status}, body: {body}]" if status is not None else f" [body: {body}]"
        elif status is not None:
            text += f" [HTTP {status}]"
        super().__init__(text)


class ResetFailed(ContractViolation):
    """`/wt/reset` (or a python reset hook) failed: fatal, the scenario is ERROR, not scored."""


# ---------------------------------------------------------------- wire models


def _version(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail("version", f"must be a positive integer, {describe(value)} "
                        f'(echo the request\'s version as a JSON number, e.g. "wt_inject": {PROTOCOL_VERSION})')
    return value


def _string(fix: str) -> Rule:
    def check(value: Any) -> Any:
        if isinstance(value, str):
            return value
        fail("string", f"must be a string, {describe(value)} ({fix})")

    return Rule(check)


def _required_array(fix: str) -> Rule:
    """The tool_calls rule: `[]` means "nothing of this kind", a missing key is a violation."""

    def check(value: Any) -> Any:
        if isinstance(value, list):
            return value
        fail("array", f"must be an array, {describe(value)} ({fix}; a missing key and [] mean different things)")

    return Rule(check)


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        fail("object", "must be an object, not a JSON-encoded string "
                       "(emit the parsed arguments object, e.g. json.loads(arguments); Contract C pins the object "
                       "form, the driver converts)")
    return is_object('the tool arguments, e.g. {"query": "Bluewing"}; use {} for none').check(value)


def _error(value: Any) -> Any:
    # null is read as "no error": it is how most serializers write an unset optional field.
    if value is None or (isinstance(value, str) and value):
        return value
    fail("error", f"must be a non-empty string when present, {describe(value)} "
                  "(describe the agent-level failure, or leave the key out when the turn succeeded)")


class ToolCall(ContractModel):
    """One entry of `tool_calls`: the bare tool name and its arguments as an object."""

    name: Annotated[str, is_nonempty_str("the bare tool name as the agent invoked it")]
    arguments: Annotated[dict[str, Any], Rule(_arguments)]


class InjectResponse(ContractModel):
    """The body of a 200 from `/wt/inject`. Unknown fields are ignored (kept, never read)."""

    wt_inject: Annotated[int, Rule(_version)]
    reply: Annotated[str, _string("the agent's final user-facing text; \"\" only together with error")]
    tool_calls: Annotated[list[ToolCall], _required_array(
        "every tool call of the turn in invocation order, [] when the agent called none")]
    error: Annotated[str | None, Rule(_error)] = None
    # additive (v1 allows additive fields): what the endpoint's model reported answering, for the ledger
    model: str | None = None
    quant: str | None = None

    @model_validator(mode="after")
    def _reply_or_error(self) -> InjectResponse:
        if not self.reply and not self.error:
            raise_at([(("reply",), "must not be empty unless error is set (return the agent's text, or set "
                                   "error to say why there is none: an empty reply is otherwise unscoreable)")])
        return self


def _http_url(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return value
    fail("url", f"must be an http(s) URL when present, {describe(value)} (leave the key out when nothing is served)")


class ResetRequest(ContractModel):
    """The body of `POST /wt/reset`. The URLs are additive (version 1 allows additive fields): where this run
    serves the recorded tools and model. The driver's servers bind free ports, so an endpoint that points its
    MCP client and model client at these needs no port configured; one that ignores them must be configured
    out of band. Absent: nothing is served (e.g. `--llm live`), keep the configured one."""

    wt_inject: Annotated[int, Rule(_version)]
    universe_url: Annotated[str | None, Rule(_http_url)] = None  # MCP, streamable HTTP: http://127.0.0.1:PORT/mcp
    llm_base_url: Annotated[str | None, Rule(_http_url)] = None  # OpenAI-compatible: http://127.0.0.1:PORT/v1


def _text_type(value: Any) -> Any:
    if value == "text":
        return value
    fail("one_of", f'must be "text", {describe(value)} (system instructions are OTel GenAI text parts)')


class SurfaceText(ContractModel):
    """A system-instruction part: OTel GenAI text part, Contract A vocabulary."""

    type: Annotated[Literal["text"], Rule(_text_type)]
    content: Annotated[str, _string("the instruction text")]


class SurfaceTool(ContractModel):
    """A tool as exposed to the model (Contract A tool definition; all but `name` as available)."""

    name: Annotated[str, is_nonempty_str("the tool name the model sees")]
    description: str | None = None
    input_schema: Annotated[dict[str, Any] | None, is_object("a JSON Schema object, or leave it out", True)] = None
    result_schema: Annotated[dict[str, Any] | None, is_object("a JSON Schema object, or leave it out", True)] = None


class ExtraSegment(ContractModel):
    """Framework-injected steering text that is neither instructions nor a tool definition."""

    name: Annotated[str, is_nonempty_str("an endpoint-chosen stable name, e.g. narration:tool_started")]
    content: Annotated[str, _string("the segment text")]


class Surface(ContractModel):
    """The endpoint's *reported* prompt surface (what a fresh session would be composed from)."""

    system_instructions: Annotated[list[SurfaceText], _required_array(
        'text parts {"type": "text", "content": ...} in source order, [] when there is none')]
    tool_definitions: Annotated[list[SurfaceTool], _required_array(
        "the tool manifest in manifest order, [] when there is none")]
    extra_segments: Annotated[list[ExtraSegment], _required_array(
        "{name, content} pairs of framework-injected text, [] when there is none")]


class SurfaceResponse(ContractModel):
    wt_inject: Annotated[int, Rule(_version)]
    surface: Annotated[Surface, is_object(
        "the prompt surface: {system_instructions, tool_definitions, extra_segments}")]


class SurfaceProbe(ContractModel):
    """The outcome of probing `/wt/surface` once per run, as recorded in the trace.

    `reported` carries the validated surface (a report, not ground truth: the
    driver cannot see what the model rendered); `unavailable` (404/501) and
    `invalid` carry none, only `detail`: a malformed surface is never stored.
    """

    status: Literal["reported", "unavailable", "invalid"]
    surface: Surface | None = None
    detail: str | None = None

    @model_validator(mode="after")
    def _surface_only_when_reported(self) -> SurfaceProbe:
        if self.status == "reported" and self.surface is None:
            raise_at([(("surface",), "is required when status is reported")])
        if self.status != "reported" and self.surface is not None:
            raise_at([(("surface",), f"must be absent when status is {self.status} "
                                     "(an unvalidated surface is never stored as if it were reported)")])
        return self


def _validate(model: type[BaseModel], data: Any) -> tuple[Any, list[Problem]]:
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, problems_from(exc, model=None)


def _echo_problems(data: Any, sent: int | None) -> list[Problem]:
    """The version echo: the response must carry the request's version, which catches a stale server."""
    if sent is None or not isinstance(data, dict):
        return []
    got = data.get("wt_inject", MISSING)
    if isinstance(got, int) and not isinstance(got, bool) and got >= 1 and got != sent:
        return [Problem("wt_inject", f"wt_inject echo is {got} but the request sent {sent}: the endpoint speaks "
                                     f"another protocol version (a stale server or driver); upgrade the older side")]
    return []


def validate_inject_response(data: Any, sent_version: int | None = PROTOCOL_VERSION) -> tuple[
        InjectResponse | None, list[Problem]]:
    """Check an inject response body; `(model, [])` when valid, `(None, problems)` otherwise.

    `sent_version=None` skips the echo (the in-process python runtime has no wire version).
    """
    model, problems = _validate(InjectResponse, data)
    problems = _echo_problems(data, sent_version) + problems
    return (None if problems else model), problems


def validate_reset_response(data: Any, sent_version: int = PROTOCOL_VERSION) -> list[Problem]:
    """A reset answers `{"wt_inject": <the request's version>}`; other fields are ignored."""
    if not isinstance(data, dict):
        return [Problem("", f"the document must be an object, {describe(data)} (answer {{\"wt_inject\": "
                            f"{sent_version}}} once every store is wiped)")]
    try:
        _version(data.get("wt_inject", MISSING))
    except PydanticCustomError as exc:
        return [Problem("wt_inject", f"wt_inject {exc}")]
    return _echo_problems(data, sent_version)


def validate_surface_response(data: Any, sent_version: int = PROTOCOL_VERSION) -> tuple[
        Surface | None, list[Problem]]:
    """Check a `/wt/surface` 200 body; the surface when valid, else the problems."""
    model, problems = _validate(SurfaceResponse, data)
    problems = _echo_problems(data, sent_version) + problems
    return (None if problems else model.surface), problems


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class TurnResult:
    """One injected turn as the agent answered it.

    `error` is the agent-level error verbatim (the turn is still scored);
    `reply` is never made up when the agent gave none.
    """

    reply: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None
    latency_ms: float = 0.0
    model: str | None = None  # the model the endpoint says answered (additive `model` of the response)
    quant: str | None = None  # its quantization, when the endpoint reports one
