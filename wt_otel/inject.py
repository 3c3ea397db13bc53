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

import importlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

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

    @model_validator(mode="after")
    def _reply_or_error(self) -> InjectResponse:
        if not self.reply and not self.error:
            raise_at([(("reply",), "must not be empty unless error is set (return the agent's text, or set "
                                   "error to say why there is none: an empty reply is otherwise unscoreable)")])
        return self


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


@runtime_checkable
class Runtime(Protocol):
    """What `wt-otel run` drives: reset before every run, probe the surface once, inject turn by turn.

    `name` and `url` go into the trace; `warnings` are things the runtime
    cannot do (e.g. a python agent with no reset hook) that a run must report.
    """

    name: str
    url: str | None
    warnings: list[str]

    def reset(self) -> None: ...

    def surface(self) -> SurfaceProbe: ...

    def inject(self, session_id: str, text: str) -> TurnResult: ...

    def close(self) -> None: ...


def new_session_id() -> str:
    """An opaque driver-minted session id; the endpoint treats an unknown one as a fresh session."""
    return f"wt-{uuid.uuid4().hex}"


def _summary(problems: list[Problem]) -> str:
    return "; ".join(str(p) for p in problems)


def clip_body(body: bytes | str) -> str:
    """A body as text for an error message, cut to BODY_LIMIT characters."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return text if len(text) <= BODY_LIMIT else text[:BODY_LIMIT] + f"... ({len(text)} chars)"


# ---------------------------------------------------------------- http_inject


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not 200: report it instead of re-sending (or silently turning POST into GET)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _env_timeout() -> float:
    raw = os.environ.get(ENV_TIMEOUT)
    if raw is None or raw.strip() == "":
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise RuntimeSpecError(f"{ENV_TIMEOUT} must be a positive number of seconds, got {raw!r}")
    return value


class HttpInjectRuntime:
    """The built-in `http_inject` runtime: Contract C over HTTP, nothing configurable but URL and deadline.

    `url` defaults to $WT_INJECT_URL, then http://127.0.0.1:8647; `timeout_s`
    to $WT_INJECT_TIMEOUT_S, then 120. Proxies from the environment are not
    used (the bench talks to a trusted local network, and an `http_proxy`
    meant for the internet must not sit between the driver and the agent).
    """

    name = "http_inject"

    def __init__(self, url: str | None = None, timeout_s: float | None = None, *, grace_s: float = GRACE_S,
                 version: int = PROTOCOL_VERSION) -> None:
        base = (url or os.environ.get(ENV_URL) or DEFAULT_URL).strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise RuntimeSpecError(f"the inject URL must be an http(s) base URL like {DEFAULT_URL}, got {base!r} "
                                   f"(set --url or {ENV_URL})")
        if timeout_s is None:
            timeout_s = _env_timeout()
        if not timeout_s > 0:
            raise RuntimeSpecError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.url: str | None = base
        self.base = base
        self.timeout_s = float(timeout_s)
        self.grace_s = grace_s
        self.version = version
        self.warnings: list[str] = []
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

    @property
    def transport_timeout_s(self) -> float:
        return self.timeout_s + self.grace_s

    def post(self, route: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        """One POST, no retry. Returns (status, body) for any HTTP answer; raises `ContractViolation`
        when there is none (refused, timed out after the grace, connection broken)."""
        where = f"POST {self.base}{route}"
        request = urllib.request.Request(
            self.base + route, data=json.dumps(payload).encode(), method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with self._opener.open(request, timeout=self.transport_timeout_s) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, exc.read()
            except (OSError, HTTPException):
                return exc.code, b""
            finally:
                exc.close()
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise self._timeout(where) from exc
            raise ContractViolation(
                where, f"cannot connect: {exc.reason}. Is the agent endpoint running? Contract C endpoints listen "
                       f"on {DEFAULT_URL} by default; point the driver elsewhere with --url or {ENV_URL} "
                       "(not retried)", rule="unreachable") from exc
        except TimeoutError as exc:
            raise self._timeout(where) from exc
        except (HTTPException, OSError) as exc:
            raise ContractViolation(
                where, f"the connection broke before a complete HTTP response ({type(exc).__name__}: {exc}); "
                       "the endpoint must answer every request with an HTTP/1.1 JSON response (not retried)",
                rule="transport") from exc

    def _timeout(self, where: str) -> ContractViolation:
        return ContractViolation(
            where, f"no response within {self.transport_timeout_s:g} s (timeout_s {self.timeout_s:g} + "
                   f"{self.grace_s:g} s grace). The endpoint should enforce timeout_s itself and answer 200 with "
                   "an error envelope ({\"wt_inject\": 1, \"reply\": \"\", \"tool_calls\": [...], \"error\": "
                   f"\"timeout\"}}); raise {ENV_TIMEOUT} if the agent legitimately needs longer (not retried)",
            rule="timeout")

    def _json(self, where: str, status: int, body: bytes) -> Any:
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ContractViolation(where, f"the body is not UTF-8 JSON ({exc}); Contract C bodies are JSON objects",
                                    rule="json", status=status, body=clip_body(body)) from None

    def reset(self) -> None:
        """POST /wt/reset; returns only on 200 with the version echo, else raises `ResetFailed` (fatal)."""
        where = f"POST {self.base}{RESET}"
        try:
            status, body = self.post(RESET, {"wt_inject": self.version})
        except ContractViolation as exc:
            raise ResetFailed(exc.where, f"reset failed, the run cannot be isolated: {exc.message}", rule=exc.rule,
                              status=exc.status, body=exc.body) from exc
        if status != 200:
            raise ResetFailed(where, "reset failed (a reset must answer 200 only after every store is wiped; "
                                     "a bench that continues past a failed wipe scores contamination)",
                              rule="http_status", status=status, body=clip_body(body))
        try:
            data = self._json(where, status, body)
        except ContractViolation as exc:
            raise ResetFailed(where, "reset answered 200 with a body that is not JSON (answer "
                                     f"{{\"wt_inject\": {self.version}}})", rule="json", status=status,
                              body=clip_body(body)) from exc
        problems = validate_reset_response(data, self.version)
        if problems:
            rule = "version_echo" if any(p.path == "wt_inject" for p in problems) else "shape"
            raise ResetFailed(where, f"reset response broke Contract C: {_summary(problems)}", rule=rule,
                              status=status, body=clip_body(body), problems=problems)

    def surface(self) -> SurfaceProbe:
        """Probe /wt/surface once; never raises for a bad route (evidence about the run must not torch it),
        except when the endpoint cannot be reached at all."""
        try:
            status, body = self.post(SURFACE, {"wt_inject": self.version})
        except ContractViolation as exc:
            if exc.rule == "unreachable":
                raise
            return SurfaceProbe(status="invalid", detail=str(exc))
        if status in (404, 501):
            return SurfaceProbe(status="unavailable", detail=f"/wt/surface answered HTTP {status} (not implemented)")
        if status != 200:
            return SurfaceProbe(status="invalid", detail=f"/wt/surface answered HTTP {status} (expected 200, or "
                                                         f"404/501 when not implemented): {clip_body(body)}")
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            detail = f"/wt/surface body is not UTF-8 JSON ({exc}): {clip_body(body)}"
            return SurfaceProbe(status="invalid", detail=detail)
        surface, problems = validate_surface_response(data, self.version)
        if problems:
            return SurfaceProbe(status="invalid", detail=f"/wt/surface response broke Contract C: {_summary(problems)}")
        return SurfaceProbe(status="reported", surface=surface)

    def inject(self, session_id: str, text: str) -> TurnResult:
        """POST /wt/inject with one user turn; an agent-level error comes back in the result, a contract-level
        failure raises `ContractViolation`."""
        where = f"POST {self.base}{INJECT}"
        payload = {"wt_inject": self.version, "session_id": session_id, "text": text, "timeout_s": self.timeout_s}
        started = time.perf_counter()
        status, body = self.post(INJECT, payload)
        latency_ms = round((time.perf_counter() - started) * 1000, 1)
        if status != 200:
            raise ContractViolation(
                where, "expected HTTP 200 with a response envelope (an agent-level failure is still 200, with "
                       "\"error\" set and tool_calls listing the calls made before it)",
                rule="http_status", status=status, body=clip_body(body))
        data = self._json(where, status, body)
        response, problems = validate_inject_response(data, self.version)
        if response is None:
            rule = "version_echo" if any(p.path == "wt_inject" for p in problems) else "shape"
            raise ContractViolation(where, f"inject response broke Contract C: {_summary(problems)}", rule=rule,
                                    status=status, body=clip_body(body), problems=problems)
        return TurnResult(response.reply, list(response.tool_calls), response.error, latency_ms)

    def close(self) -> None:
        """Nothing to release: every call opens and closes its own connection."""


# ---------------------------------------------------------------- python


class PythonRuntime:
    """An in-process agent: a callable `agent(text, session_id)` returning the turn.

    The return value is a dict `{"reply", "tool_calls", "error"?}` or a tuple
    `(reply, tool_calls)`, checked with the same rules as the wire (tool calls
    as `{"name", "arguments": {...}}`). An agent-level failure is returned as
    `{"reply": "", "tool_calls": [...], "error": "..."}`; an exception is a
    contract-level failure (like an HTTP 500), not a scored outcome.

    Hooks are attributes of the callable itself, so one object carries its
    state and the way to wipe it: `agent.reset()` (called before every run;
    without it the run is warned that state is not wiped) and
    `agent.surface()` (returns the surface dict; without it the surface is
    unavailable). For a plain function, set `agent.reset = clear_memory`.
    """

    url: str | None = None

    def __init__(self, agent: Callable[[str, str], Any], *, name: str = "python") -> None:
        self.agent = agent
        self.name = name
        self._reset = getattr(agent, "reset", None)
        self._surface = getattr(agent, "surface", None)
        self.warnings: list[str] = []
        if not callable(self._reset):
            self._reset = None
            self.warnings.append(f"{name}: the agent has no reset hook (agent.reset()), so state between runs is "
                                 "not wiped; give it one unless the agent is stateless")
        if not callable(self._surface):
            self._surface = None

    @classmethod
    def from_spec(cls, target: str) -> PythonRuntime:
        """`module:attr` (attr may be dotted); the current directory is importable, as for `python -m`."""
        return cls(load_target(target), name=f"python:{target}")

    def reset(self) -> None:
        if self._reset is None:
            return
        try:
            self._reset()
        except Exception as exc:
            raise ResetFailed(self.name, f"the reset hook raised {type(exc).__name__}: {exc}",
                              rule="agent_raised") from exc

    def surface(self) -> SurfaceProbe:
        if self._surface is None:
            return SurfaceProbe(status="unavailable", detail=f"{self.name}: the agent has no surface() hook")
        try:
            data = self._surface()
        except Exception as exc:
            return SurfaceProbe(status="invalid", detail=f"{self.name}: surface() raised {type(exc).__name__}: {exc}")
        surface, problems = _validate(Surface, data)
        if problems:
            return SurfaceProbe(status="invalid", detail=f"{self.name}: surface() broke Contract C: "
                                                         f"{_summary(problems)}")
        return SurfaceProbe(status="reported", surface=surface)

    def inject(self, session_id: str, text: str) -> TurnResult:
        started = time.perf_counter()
        try:
            out = self.agent(text, session_id)
        except Exception as exc:
            raise ContractViolation(
                self.name, f"the agent raised {type(exc).__name__}: {exc} (return {{\"reply\": \"\", \"tool_calls\": "
                           "[...], \"error\": \"...\"}} for an agent-level failure the bench should score)",
                rule="agent_raised") from exc
        latency_ms = round((time.perf_counter() - started) * 1000, 1)
        data = _as_response(out)
        response, problems = validate_inject_response(data, None)
        if response is None:
            raise ContractViolation(self.name, f"the agent's return value broke Contract C: {_summary(problems)} "
                                               "(return {\"reply\": str, \"tool_calls\": [{\"name\": str, "
                                               "\"arguments\": {...}}]} or (reply, tool_calls))",
                                    rule="shape", problems=problems)
        return TurnResult(response.reply, list(response.tool_calls), response.error, latency_ms)

    def close(self) -> None:
        """Nothing to release: the agent object belongs to its module."""


def _as_response(out: Any) -> Any:
    """The python agent's return value in wire shape (without a version: there is no wire)."""
    if isinstance(out, TurnResult):
        out = {"reply": out.reply, "tool_calls": out.tool_calls, "error": out.error}
    elif isinstance(out, tuple) and len(out) == 2:
        out = {"reply": out[0], "tool_calls": out[1]}
    if not isinstance(out, dict):
        return out
    data = {"wt_inject": PROTOCOL_VERSION, **out}
    calls = data.get("tool_calls")
    if isinstance(calls, list):
        data["tool_calls"] = [c.to_dict() if isinstance(c, ToolCall) else c for c in calls]
    return data


def load_target(target: str) -> Callable[..., Any]:
    """Import `module:attr` and check it is a callable agent (not a class to instantiate)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise RuntimeSpecError(f"a python runtime target is MODULE:ATTR (e.g. my_agent:agent), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RuntimeSpecError(f"cannot import {module_name!r} for runtime {target!r}: {exc} (is it on PYTHONPATH? "
                               "the current directory is searched)") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RuntimeSpecError(f"{target!r}: {module_name} has no attribute {attr!r}") from None
    if isinstance(obj, type) or not callable(obj):
        what = "a class" if isinstance(obj, type) else type(obj).__name__
        raise RuntimeSpecError(f"{target!r} is {what}, not a callable agent: point at a function or instance "
                               "called as agent(text, session_id)")
    return obj


def resolve_runtime(spec: str | None = None, *, url: str | None = None, timeout_s: float | None = None) -> Runtime:
    """Build a runtime from `--runtime`: `http_inject` (default), `python:MODULE:ATTR` or `MODULE:ATTR`.

    `url` and `timeout_s` apply to http_inject only. Raises `RuntimeSpecError`.
    """
    spec = (spec or "http_inject").strip()
    if spec == "http_inject":
        return HttpInjectRuntime(url, timeout_s)
    if spec == "python":
        raise RuntimeSpecError("the python runtime needs a target: --runtime python:MODULE:ATTR, a callable "
                               "agent(text, session_id) -> {\"reply\", \"tool_calls\"} or (reply, tool_calls)")
    if spec.startswith("python:"):
        return PythonRuntime.from_spec(spec.removeprefix("python:"))
    if ":" in spec:
        return PythonRuntime.from_spec(spec)
    raise RuntimeSpecError(f"unknown runtime {spec!r}: use http_inject, python:MODULE:ATTR or MODULE:ATTR")
