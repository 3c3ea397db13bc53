"""What a cassette answers to a chat-completions request, and the log of what was asked.

No HTTP here: `cassette_server` puts this behind an OpenAI-compatible endpoint,
and anything that wants replay in-process (a runner, a test) can use
`CassetteReplay` directly. Keeping matching apart from transport lets each be
read, and changed, on its own.

Which recording answers (`match`)
    exact     the request's canonical form — model, messages, tools — equals a
              recorded call's (an index built once; identical requests made again
              get the next identical recording, then the last one again, so a retry
              after a recorded error gets what followed it).
    sequence  the Nth request of a run gets the Nth recorded call, whatever it asks;
              the log still says whether the request also matched exactly.
Only model, messages and tools form the key. Every other field is ignored:
transport (`stream`, `stream_options`), bookkeeping (`user`, `metadata`,
`store`...) and the sampler too (`temperature`, `seed`, `n`...; see
`IGNORED_FIELDS`): a recorded answer is fixed whatever the sampler, and
cassettes often carry no sampler at all. In messages, content `null`/`""`/absent
are one, text parts are joined, tool-call arguments and tool results compare as
data (JSON, or the Python literal the OpenAI Agents SDK sends, as the importer
decodes them), and message keys other than role, content, tool_calls and
tool_call_id are ignored. Tools count only when the recording has them
(`request_context.tools`, additive; wt-otel's importer does not record them yet).

Outcomes (as `Reply.status`, which the server uses as the HTTP status)
    200  a recorded answer
    422  `llm_divergence`: no recording for this request (exact) or past the end of
         the recording (sequence); the error says what was expected vs received.
         422, not 409: OpenAI SDKs retry 408/409/429/5xx, a retried divergence
         would only repeat itself.
    4xx/5xx  a recorded `exception_boundary`, mapped by `http_status` (429 rate
         limit, 504 timeout, 403 permission/guardrail, 401, 404, 400 bad request,
         503 unavailable, 500 otherwise). A streamed request to a recorded call that
         produced frames before failing gets 200: the frames, then the error.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from wt_otel.contracts.cassette import Cassette, CassetteCall, load_cassette, split_model
from wt_otel.model.parts import canonical_json, decode_json, decode_result
from wt_otel.replay.request_diff import request_diff

CASSETTE_FILE = "llm.cassette.json"  # the name in a scenario directory
MatchMode = Literal["exact", "sequence"]
MATCH_MODES: tuple[MatchMode, ...] = ("exact", "sequence")
KEY_FIELDS = ("model", "messages", "tools")
IGNORED_FIELDS = frozenset({
    "stream", "stream_options", "user", "metadata", "store", "service_tier", "prompt_cache_key",
    "safety_identifier", "temperature", "top_p", "n", "seed", "max_tokens", "max_completion_tokens", "stop",
    "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "reasoning_effort",
    "parallel_tool_calls", "tool_choice", "response_format", "modalities", "audio", "prediction", "verbosity",
    "web_search_options", "functions", "function_call",
})  # documentation and a test check: the key is built from KEY_FIELDS only
DIVERGENCE_STATUS = 422
DIVERGENCE_CODE = "llm_divergence"

# (name fragments, status, OpenAI error type); first match wins, on the lower-cased
# class name without `_`. A bare status code as error_type ("429") is used as is.
ERROR_STATUS: tuple[tuple[tuple[str, ...], int, str], ...] = (
    (("ratelimit", "quota", "toomanyrequests"), 429, "rate_limit_error"),
    (("timeout", "timedout", "deadline"), 504, "timeout_error"),
    (("permission", "forbidden", "guardrail", "tripwire", "contentfilter", "dlp"), 403, "permission_error"),
    (("authentication", "unauthorized", "apikey"), 401, "authentication_error"),
    (("notfound",), 404, "not_found_error"),
    (("badrequest", "invalidrequest", "contextlength"), 400, "invalid_request_error"),
    (("unavailable", "overloaded"), 503, "service_unavailable_error"),
)


def http_status(error_type: str | None) -> tuple[int, str]:
    """The HTTP status and OpenAI error `type` that replay a recorded exception class."""
    name = (error_type or "").rsplit(".", 1)[-1]
    if name.isdigit() and 400 <= int(name) <= 599:
        return int(name), "api_error"
    folded = name.lower().replace("_", "")
    for fragments, status, kind in ERROR_STATUS:
        if any(f in folded for f in fragments):
            return status, kind
    return 500, "server_error"


# ------------------------------------------------------------------ canonical requests


def _text(content: Any) -> Any:
    """Text parts joined (producers and clients differ in string vs parts); other content as sent."""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") in ("text", "input_text")
                                         for p in content):
        return "".join(str(p.get("text") or "") for p in content)
    return content


def _result(text: Any) -> Any:
    """Tool results compare as data, decoded as the importer decodes them (JSON, or the Python
    literal the OpenAI Agents SDK sends as `str(result)`), then re-encoded canonically."""
    if not isinstance(text, str):
        return text
    decoded = decode_result(text)
    return text if isinstance(decoded, str) else canonical_json(decoded)


def _arguments(raw: Any) -> Any:
    decoded, _ = decode_json(raw)
    if isinstance(decoded, dict) and set(decoded) == {"_raw_arguments"}:  # the importer's wrapper
        return decoded["_raw_arguments"]
    return canonical_json(decoded) if isinstance(decoded, dict) else raw


def message_key(message: dict[str, Any]) -> dict[str, Any]:
    """One chat message reduced to what decides the answer (see the module docstring)."""
    role = message.get("role")
    out: dict[str, Any] = {"role": role}
    content = _text(message.get("content"))
    if role == "tool":
        content = _result(content)
    if content not in (None, ""):
        out["content"] = content
    calls = [{"id": c.get("id") or "", "name": (c.get("function") or {}).get("name"),
              "arguments": _arguments((c.get("function") or {}).get("arguments"))}
             for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if calls:
        out["tool_calls"] = calls
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    return out


def tool_definition(tool: Any) -> Any:
    """A tool definition reduced to name, description and parameters in the chat shape, whichever API
    declared it (chat `function`, Responses' flat `name`/`parameters`, Anthropic's `input_schema`), so a
    recording answers every API; flags such as `strict` do not change the answer."""
    if not isinstance(tool, dict):
        return tool
    spec: dict[str, Any] = tool["function"] if isinstance(tool.get("function"), dict) else tool
    if not isinstance(spec.get("name"), str):
        return tool  # a provider's built-in tool (web search...): compared as sent
    function: dict[str, Any] = {"name": spec["name"]}
    if spec.get("description"):
        function["description"] = spec["description"]
    parameters = spec.get("parameters", spec.get("input_schema"))
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def _tools_key(tools: Any) -> list[str] | None:
    return None if tools is None else sorted(canonical_json(tool_definition(t)) for t in tools)


def request_key(model: Any, messages: list[dict[str, Any]], tools: Any = None) -> dict[str, Any]:
    """The canonical request; `tools` None means 'not recorded' and leaves tools out. The model is compared
    without a provider prefix (`openai/gpt-4o` is `gpt-4o`), as cassettes store it."""
    if isinstance(model, str) and model:
        model = split_model(model, None)[0]
    key: dict[str, Any] = {"model": model, "messages": [message_key(m) for m in messages]}
    if tools is not None:
        key["tools"] = _tools_key(tools)
    return key


def _recorded_key(call: CassetteCall) -> dict[str, Any]:
    ctx = call.request_context
    return request_key(ctx.model, [m.model_dump() for m in ctx.messages], (ctx.model_extra or {}).get("tools"))


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else canonical_json(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _summary(message: dict[str, Any] | None) -> str:
    if message is None:
        return "(no message)"
    calls = ", ".join(f"{c['name']}({_short(c['arguments'], 40)})" for c in message.get("tool_calls", []))
    body = _short(message.get("content", "")) + (f" tool_calls {calls}" if calls else "")
    return f"{message['role']}: {body}".rstrip()


def _difference(expected: dict[str, Any], received: dict[str, Any]) -> dict[str, str]:
    """Where two canonical requests first differ, in short form, for the divergence evidence."""
    if expected["model"] != received["model"]:
        return {"at": "model", "expected": str(expected["model"]), "received": str(received["model"])}
    exp, got = expected["messages"], received["messages"]
    for i in range(max(len(exp), len(got))):
        e, g = (exp[i] if i < len(exp) else None), (got[i] if i < len(got) else None)
        if e != g:
            return {"at": f"messages[{i}]", "expected": _summary(e), "received": _summary(g)}
    names = [json.loads(t).get("function", {}).get("name") for t in expected.get("tools") or []]
    got_names = [json.loads(t).get("function", {}).get("name") for t in received.get("tools") or []]
    return {"at": "tools", "expected": ", ".join(map(str, names)), "received": ", ".join(map(str, got_names))}


# ------------------------------------------------------------------ responses


@dataclass(frozen=True)
class Reply:
    """What to answer: a recorded call (maybe ending in its exception), or an error body."""

    status: int
    call: CassetteCall | None = None
    recorded_index: int | None = None
    error: dict[str, Any] | None = None  # OpenAI-style `error` object: the HTTP error, or the stream's last event
    entry: dict[str, Any] | None = None  # this call's call-log entry


def _tool_calls(call: CassetteCall) -> list[dict[str, Any]]:
    """Every frame's tool calls, in order (the contract keeps each one whole: arguments are a JSON object)."""
    return [tc.model_dump(include={"id", "type", "function"}) for f in call.response_timeline for tc in f.tool_calls]


def _finish_reason(call: CassetteCall) -> str:
    for frame in reversed(call.response_timeline):
        if frame.finish_reason:
            return frame.finish_reason
    return "tool_calls" if _tool_calls(call) else "stop"


def _usage(call: CassetteCall) -> dict[str, int] | None:
    return call.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"}) if call.usage else None


def completion(call: CassetteCall, completion_id: str, created: int) -> dict[str, Any]:
    """A `chat.completion` object from a recorded call's frames."""
    text = "".join(f.chunk for f in call.response_timeline)
    calls = _tool_calls(call)
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else ""), "refusal": None}
    if calls:
        message["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": completion_id, "object": "chat.completion", "created": created, "model": call.request_context.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(call)}],
    }
    if call.usage:
        body["usage"] = _usage(call)
    return body


def chunks(call: CassetteCall, completion_id: str, created: int, include_usage: bool) -> Iterator[tuple[float, dict]]:
    """(delay ms, `chat.completion.chunk`) pairs: one per recorded frame, then the finish chunk and
    the usage chunk; the finish chunk is left out when the call ended in an exception."""
    head = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
            "model": call.request_context.model, "system_fingerprint": None}
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    index = 0  # OpenAI numbers a message's tool calls across the whole stream
    for n, frame in enumerate(call.response_timeline):
        delta: dict[str, Any] = {"role": "assistant"} if n == 0 else {}
        # a tool-call-only frame carries content null, as OpenAI's do: clients treat "" as a text part
        delta["content"] = frame.chunk or (None if frame.tool_calls else "")
        if frame.tool_calls:
            delta["tool_calls"] = [{"index": index + i, "id": tc.id, "type": "function",
                                    "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
                                   for i, tc in enumerate(frame.tool_calls)]
            index += len(frame.tool_calls)
        yield frame.delta_ms, chunk(delta)
    if call.exception_boundary and call.exception_boundary.occurred:
        return
    if not call.response_timeline:
        yield 0.0, chunk({"role": "assistant", "content": ""})
    yield 0.0, chunk({}, _finish_reason(call))
    if include_usage and call.usage:
        yield 0.0, {**head, "choices": [], "usage": _usage(call)}


def recorded_error(call: CassetteCall) -> tuple[int, dict[str, Any]]:
    """The status and OpenAI-style `error` object replaying a call's `exception_boundary`."""
    boundary = call.exception_boundary
    error_type = boundary.error_type if boundary else None
    status, kind = http_status(error_type)
    return status, {"message": (boundary.message if boundary else None) or error_type or "recorded exception",
                    "type": kind, "param": None, "code": "recorded_exception", "recorded_error_type": error_type}


def _failed(call: CassetteCall) -> bool:
    return bool(call.exception_boundary and call.exception_boundary.occurred)


# ------------------------------------------------------------------ matching


class CassetteReplay:
    """Matching and the call log, without HTTP (the server wraps one; a runner may use it in-process).

    Thread-safe: a lock serializes matching, so sequence order is arrival order.
    """

    def __init__(self, cassette: Cassette, match: MatchMode = "exact", run: str | None = None) -> None:
        if match not in MATCH_MODES:
            raise ValueError(f"match must be one of {', '.join(MATCH_MODES)}, got {match!r}")
        self.run = run or cassette.latest_trace_id
        if self.run not in cassette.traces:
            keys = ", ".join(cassette.history_keys)
            raise ValueError(f"run {self.run!r} is not in this cassette (its history_keys: {keys})")
        self.cassette, self.match = cassette, match
        self.calls = cassette.traces[self.run].llm_calls()
        self._keys = [_recorded_key(c) for c in self.calls]
        # two O(1) indexes: recordings with tools match on tools too, those without ignore them
        self._with_tools: dict[str, list[int]] = {}
        self._without_tools: dict[str, list[int]] = {}
        for i, key in enumerate(self._keys):
            index = self._with_tools if "tools" in key else self._without_tools
            index.setdefault(canonical_json(key), []).append(i)
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Start a new run: sequence cursor, repeat counters and call log cleared."""
        with self._lock:
            self._cursor = 0
            self._repeats: dict[tuple[int, ...], int] = {}
            self._log: list[dict[str, Any]] = []

    def call_log(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(e) for e in self._log]

    def models(self) -> list[tuple[str, str | None]]:
        """(model, provider) of the replayed run, in first-use order."""
        seen: dict[str, str | None] = {}
        for c in self.calls:
            seen.setdefault(c.request_context.model, c.request_context.provider)
        return list(seen.items())

    def _exact_hits(self, received: dict[str, Any]) -> list[int]:
        """Recorded indexes whose canonical request equals `received` (tools only where recorded)."""
        bare = {k: v for k, v in received.items() if k != "tools"}
        return sorted(self._with_tools.get(canonical_json(received), [])
                      + self._without_tools.get(canonical_json(bare), []))

    def _nearest(self, received: dict[str, Any]) -> int | None:
        """The recording sharing the longest message prefix with the request (scanned on misses only)."""
        def shared(i: int) -> tuple[bool, int, int, int]:
            """Same model, then the longest shared prefix, then (a changed system prompt shares none) the
            most messages equal in place, then the closest length: the recording the request was meant to be."""
            exp, got = self._keys[i]["messages"], received["messages"]
            pairs = list(zip(exp, got, strict=False))
            n = next((k for k, (a, b) in enumerate(pairs) if a != b), len(pairs))
            return (self._keys[i]["model"] == received["model"], n, sum(a == b for a, b in pairs),
                    -abs(len(exp) - len(got)))
        return max(range(len(self.calls)), key=shared, default=None)

    def answer(self, body: dict[str, Any]) -> Reply:
        """Match one request, log it, and say what to answer."""
        received = request_key(body.get("model"), body.get("messages") or [], body.get("tools") or [])
        with self._lock:
            entry: dict[str, Any] = {"seq": len(self._log), "event": "llm_call", "model": body.get("model"),
                                     "stream": bool(body.get("stream")),
                                     "request_hash": hashlib.sha256(
                                         canonical_json(received).encode()).hexdigest()[:16]}
            self._log.append(entry)
            hits = self._exact_hits(received)
            if self.match == "sequence":
                index = self._cursor if self._cursor < len(self.calls) else None
                self._cursor += 1
                if index is not None:
                    entry["request_matched"] = index in hits
            elif hits:
                served = self._repeats.get(tuple(hits), 0)
                self._repeats[tuple(hits)] = served + 1
                index = hits[min(served, len(hits) - 1)]
            else:
                index = None
            if index is None:
                return self._divergence(received, entry)
            call, error = self.calls[index], None
            status = 200
            if _failed(call):
                status, error = recorded_error(call)
                entry["error"] = error["recorded_error_type"]
                if body.get("stream") and call.response_timeline:
                    status = 200  # the frames stream first, the error follows as an event
            entry.update(match=self.match, recorded_index=index, status=status)
            return Reply(status, call, index, error, dict(entry))

    def _miss_kind(self, received: dict[str, Any], nearest: int | None) -> dict[str, Any]:
        """Why the request missed (`replay.misses`): the very request an older run of the cassette recorded
        (`reintroduced`: the old behaviour is back), a changed prompt, tool list or model against the
        nearest recording (`prompt_changed`: re-record), else a new path through the conversation."""
        wanted = canonical_json(received)
        bare = canonical_json({k: v for k, v in received.items() if k != "tools"})
        for run in self.cassette.history_keys:
            if run == self.run or run not in self.cassette.traces:
                continue
            for call in self.cassette.traces[run].llm_calls():
                key = _recorded_key(call)
                if canonical_json(key) == (wanted if "tools" in key else bare):
                    return {"kind": "reintroduced", "matches_run": run}
        if nearest is None:
            return {"kind": "new_path"}
        exp = self._keys[nearest]
        changed = [what for what, differs in (
            ("model", exp["model"] != received["model"]),
            ("system prompt", [m for m in exp["messages"] if m.get("role") in ("system", "developer")]
             != [m for m in received["messages"] if m.get("role") in ("system", "developer")]),
            ("tool list", "tools" in exp and exp.get("tools") != received.get("tools"))) if differs]
        return {"kind": "prompt_changed", "changed": changed} if changed else {"kind": "new_path"}

    def _divergence(self, received: dict[str, Any], entry: dict[str, Any]) -> Reply:
        if self.match == "sequence":
            evidence: dict[str, Any] = {"at": "sequence", "expected": f"end of recording ({len(self.calls)} call(s))",
                        "received": _summary(received["messages"][-1] if received["messages"] else None)}
            nearest = None
            what = f"request #{entry['seq'] + 1} of this run, the recording has {len(self.calls)} call(s)"
        else:
            nearest = self._nearest(received)
            evidence = dict(_difference(self._keys[nearest], received) if nearest is not None
                            else {"at": "cassette", "expected": "(no recorded calls)", "received": ""})
            if nearest is not None:  # the readable form: what the fix changed, against the nearest recording
                evidence["diff"] = request_diff(self._keys[nearest], received)
            what = "no recorded call has this model, messages and tools"
        evidence.update(self._miss_kind(received, nearest))
        evidence["nearest_recorded_index"] = nearest
        entry.update(event="llm_divergence", match="miss", recorded_index=None, status=DIVERGENCE_STATUS,
                     divergence=evidence)
        message = (f"wt-otel cassette ({self.match} match): {what}; at {evidence['at']} expected "
                   f"{evidence['expected']!r}, received {evidence['received']!r}")
        return Reply(DIVERGENCE_STATUS, error={"message": message, "type": "invalid_request_error",
                                               "param": evidence["at"], "code": DIVERGENCE_CODE,
                                               "divergence": evidence}, entry=dict(entry))


def read_cassette(path: str | Path) -> Cassette:
    """A cassette file, or a scenario directory holding `llm.cassette.json`; raises `ContractError`."""
    path = Path(path)
    if path.is_dir():
        path = path / CASSETTE_FILE
    return load_cassette(json.loads(path.read_text(encoding="utf-8")))


__all__ = [
    "CASSETTE_FILE", "DIVERGENCE_CODE", "DIVERGENCE_STATUS", "ERROR_STATUS", "IGNORED_FIELDS", "KEY_FIELDS",
    "MATCH_MODES", "CassetteReplay", "MatchMode", "Reply", "chunks", "completion", "http_status", "message_key",
    "read_cassette", "recorded_error", "request_key", "tool_definition",
]
