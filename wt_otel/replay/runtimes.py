"""Contract C runtimes: the `http_inject` driver and the `python` runtime (wire models in contracts.inject)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from http.client import HTTPException
from typing import Any

from wt_otel.components import PluginError, Runtime, UnknownComponent, check_plugin, load_plugin, names
from wt_otel.contracts.inject import (
    BODY_LIMIT,
    DEFAULT_TIMEOUT_S,
    DEFAULT_URL,
    ENV_TIMEOUT,
    ENV_URL,
    GRACE_S,
    INJECT,
    PROTOCOL_VERSION,
    RESET,
    SURFACE,
    ContractViolation,
    ResetFailed,
    RuntimeSpecError,
    Surface,
    SurfaceProbe,
    ToolCall,
    TurnResult,
    _validate,
    validate_inject_response,
    validate_reset_response,
    validate_surface_response,
)
from wt_otel.contracts.problems import Problem


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
        # where the run serves the recorded tools and model, sent with every reset (`ResetRequest`); the
        # runner sets it while a scenario's servers are up, so an endpoint can follow free ports
        self.replay_urls: dict[str, str] = {}
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())

    @property
    def transport_timeout_s(self) -> float:
        return self.timeout_s + self.grace_s

    def unreachable(self, timeout_s: float = 3.0) -> str | None:
        """Why nothing listens at the URL (one TCP connect), or None: checked once before a sweep, so a dead
        endpoint is one clear line instead of one long error per scenario."""
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(self.base)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return None
        except OSError as exc:
            return exc.strerror or str(exc) or type(exc).__name__

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
                where, f"cannot connect to {self.base}: {exc.reason}. Is the agent endpoint running there? "
                       f"Point the driver elsewhere with --url or {ENV_URL} (not retried)",
                rule="unreachable") from exc
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
            status, body = self.post(RESET, {"wt_inject": self.version, **self.replay_urls})
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
        return TurnResult(response.reply, list(response.tool_calls), response.error, latency_ms,
                          model=response.model, quant=response.quant)

    def close(self) -> None:
        """Nothing to release: every call opens and closes its own connection."""


# ---------------------------------------------------------------- python


class PythonRuntime:
    """An in-process agent: a callable `agent(text, session_id)` or `agent(text)`, plain or async, returning
    the turn (a bare string is a reply with no tool calls reported).

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
            out = call_agent(self.agent, text, session_id)
        except Exception as exc:
            raise ContractViolation(
                self.name, f"the agent raised {describe_exception(exc)} (return {{\"reply\": \"\", \"tool_calls\": "
                           "[...], \"error\": \"...\"} for an agent-level failure the bench should score)",
                rule="agent_raised") from exc
        latency_ms = round((time.perf_counter() - started) * 1000, 1)
        data = _as_response(out)
        response, problems = validate_inject_response(data, None)
        if response is None:
            raise ContractViolation(self.name, f"the agent's return value broke Contract C: {_summary(problems)} "
                                               "(return {\"reply\": str, \"tool_calls\": [{\"name\": str, "
                                               "\"arguments\": {...}}]} or (reply, tool_calls))",
                                    rule="shape", problems=problems)
        return TurnResult(response.reply, list(response.tool_calls), response.error, latency_ms,
                          model=response.model, quant=response.quant)

    def close(self) -> None:
        """Nothing to release: the agent object belongs to its module."""


def _takes_session(agent: Callable[..., Any]) -> bool:
    """Whether `agent` takes (text, session_id), or only (text)."""
    try:
        params = list(inspect.signature(agent).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable without a signature: the documented form
        return True
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2


def call_agent(agent: Callable[..., Any], text: str, session_id: str) -> Any:
    """One turn of a python agent: `agent(text, session_id)` or plain `agent(text)`, sync or async (an
    awaitable result is run to completion on a fresh event loop)."""
    out = agent(text, session_id) if _takes_session(agent) else agent(text)
    if inspect.isawaitable(out):
        async def wait() -> Any:
            return await out
        out = asyncio.run(wait())
    return out


def describe_exception(exc: BaseException, limit: int = 5) -> str:
    """`Type: message`; for an (anyio/asyncio) exception group, its leaf exceptions, which say what went wrong
    ("ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)" alone says nothing)."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []

        def walk(group: BaseExceptionGroup) -> None:
            for inner in group.exceptions:
                if isinstance(inner, BaseExceptionGroup):
                    walk(inner)
                else:
                    leaves.append(inner)

        walk(exc)
        shown = "; ".join(f"{type(e).__name__}: {e}" for e in leaves[:limit])
        more = f"; and {len(leaves) - limit} more" if len(leaves) > limit else ""
        return f"{type(exc).__name__} with {len(leaves)} error(s): {shown}{more}"
    return f"{type(exc).__name__}: {exc}"


def _as_response(out: Any) -> Any:
    """The python agent's return value in wire shape (without a version: there is no wire). A bare string is
    the reply of an agent that reports no tool calls (the universe still witnesses the ones it serves)."""
    if isinstance(out, str):
        out = {"reply": out, "tool_calls": []}
    if isinstance(out, TurnResult):
        out = {"reply": out.reply, "tool_calls": out.tool_calls, "error": out.error,
               **{k: v for k, v in (("model", out.model), ("quant", out.quant)) if v}}
    elif isinstance(out, tuple) and len(out) == 2:
        out = {"reply": out[0], "tool_calls": out[1]}
    if not isinstance(out, dict):
        return out
    data = {"wt_inject": PROTOCOL_VERSION, **out}
    calls = data.get("tool_calls")
    if isinstance(calls, list):
        data["tool_calls"] = [c.to_dict() if isinstance(c, ToolCall) else c for c in calls]
    return data


def import_object(module_name: str, attr: str, label: str, hint: str = "") -> Any:
    """`module_name`'s `attr` (dotted), the current directory searched first; RuntimeSpecError naming `label`."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise RuntimeSpecError(f"cannot import {module_name!r} for runtime {label}: {exc} ({hint}the current "
                               "directory is searched)") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RuntimeSpecError(f"{label}: {module_name} has no attribute {attr!r}") from None
    return obj


def load_target(target: str) -> Callable[..., Any]:
    """Import `module:attr` and check it is a callable agent (not a class to instantiate)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise RuntimeSpecError(f"a python runtime target is MODULE:ATTR (e.g. my_agent:agent), got {target!r}")
    obj = import_object(module_name, attr, repr(target), "is it on PYTHONPATH? ")
    if isinstance(obj, type) or not callable(obj):
        what = "a class" if isinstance(obj, type) else type(obj).__name__
        raise RuntimeSpecError(f"{target!r} is {what}, not a callable agent: point at a function or instance "
                               "called as agent(text, session_id)")
    return obj


BUILTIN_RUNTIMES = ("http_inject", "python")


def runtime_names() -> list[str]:
    """What `--runtime` accepts by name: the built-ins, then the `wt_otel.runtimes` entry points."""
    return list(dict.fromkeys([*BUILTIN_RUNTIMES, *names("runtimes")]))


def resolve_runtime(spec: str | None = None, *, url: str | None = None, timeout_s: float | None = None) -> Runtime:
    """Build a runtime from `--runtime`: `http_inject` (default), `python:MODULE:ATTR`, a registered
    `NAME[:ARG]` (entry-point group `wt_otel.runtimes`) or `MODULE:ATTR`, in that order (0002's
    built-ins -> entry points -> dotted path).

    `url` and `timeout_s` go to http_inject and to registered factories. Raises `RuntimeSpecError`.
    """
    spec = (spec or "http_inject").strip()
    if spec == "http_inject":
        return HttpInjectRuntime(url, timeout_s)
    if spec == "python":
        raise RuntimeSpecError("the python runtime needs a target: --runtime python:MODULE:ATTR, a callable "
                               "agent(text, session_id) -> {\"reply\", \"tool_calls\"} or (reply, tool_calls)")
    if spec.startswith("python:"):
        return PythonRuntime.from_spec(spec.removeprefix("python:"))
    name, _, arg = spec.partition(":")
    registered = _registered(name, spec, arg or None, url, timeout_s)
    if registered is not None:
        return registered
    if ":" in spec:
        return PythonRuntime.from_spec(spec)
    raise RuntimeSpecError(f"unknown runtime {spec!r}: use {', '.join(runtime_names())} (python:MODULE:ATTR), "
                           "or MODULE:ATTR")


def _registered(name: str, spec: str, arg: str | None, url: str | None, timeout_s: float | None) -> Runtime | None:
    """A runtime from the `wt_otel.runtimes` group, checked; None when no plug-in has that name."""
    try:
        factory = load_plugin("runtimes", name)
    except UnknownComponent:
        return None
    except PluginError as exc:
        raise RuntimeSpecError(str(exc)) from None
    try:
        runtime = factory(arg, url=url, timeout_s=timeout_s)
    except RuntimeSpecError:
        raise
    except Exception as exc:  # a factory that rejects its argument: a usage error naming the plug-in
        raise RuntimeSpecError(f"runtime {spec!r}: {type(exc).__name__}: {exc}") from None
    try:
        return check_plugin(runtime, "runtime", name, f" (what runtime factory {name!r} returned)")
    except PluginError as exc:
        raise RuntimeSpecError(str(exc)) from None


def http_inject_factory(arg: str | None, *, url: str | None = None, timeout_s: float | None = None) -> Runtime:
    """`http_inject` as a registered factory (`http_inject:URL` names the URL), for listing and symmetry."""
    return HttpInjectRuntime(arg or url, timeout_s)
