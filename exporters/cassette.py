"""Session -> LLM cassette (`llm.cassette.json`), canonical replay layer only.

One recorded run per import (the ring buffer starts with one key); its
additive `calls` holds every LLM call of the session in order, each a
one-frame `response_timeline` (text, OpenAI-shaped tool calls, finish
reason), `usage`, and an `exception_boundary` from the span's status or
`error.type`. When the dump had no inference spans (an envelope, an agent
that only logged its history), calls are reconstructed from the transcript:
each assistant message answers the messages before it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from wt_otel.contracts.cassette import add_run, split_model
from wt_otel.model.parts import canonical_json
from wt_otel.model.session import LLMCall, Session

_HEX32 = re.compile(r"[0-9a-f]{32}\Z")


def chat_messages(system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parts-model messages -> OpenAI chat messages (the wire a replayed client sends)."""
    return _system_message(system) + [x for m in messages for x in _chat_message(m)]


def _system_message(system: list[dict[str, Any]]) -> list[dict[str, Any]]:
    system_text = "".join(p.get("content") or "" for p in system if p.get("type") == "text")
    return [{"role": "system", "content": system_text}] if system_text else []


def _chat_message(m: dict[str, Any]) -> list[dict[str, Any]]:
    """One parts-model message as the chat messages it becomes (tool results are messages of their own)."""
    out: list[dict[str, Any]] = []
    parts = m.get("parts", [])
    responses = [p for p in parts if p.get("type") == "tool_call_response"]
    for r in responses:
        resp = r.get("response")
        out.append({"role": "tool", "tool_call_id": r.get("id") or "",
                    "content": resp if isinstance(resp, str) else canonical_json(resp)})
    if responses and len(responses) == len(parts):
        return out
    text = "".join(p.get("content") or "" for p in parts if p.get("type") == "text")
    msg: dict[str, Any] = {"role": m.get("role") or "user", "content": text}
    calls = [_tool_call(p) for p in parts if p.get("type") == "tool_call"]
    if calls:
        msg["tool_calls"] = calls
    out.append(msg)
    return out


class ChatHistory:
    """`chat_messages` of one LLM call after another, reusing what the previous call's history converted.

    An agent resends the whole conversation on every turn, so call n's input usually opens with call n-1's:
    those messages are recognised by their JSON (orjson, type-strict: `1`, `1.0` and `true` differ, as they
    do in the output), not converted again, and their chat messages are reused, so a session's cassette
    costs Python work linear in its history instead of quadratic. The reused dicts are shared by the
    calls' `messages` lists: they are serialised, never changed."""

    def __init__(self) -> None:
        self._keys: list[bytes | None] = []
        self._converted: list[list[dict[str, Any]]] = []

    def chat_messages(self, system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keys = [_key(m) for m in messages]
        same = 0
        for a, b in zip(keys, self._keys, strict=False):
            if a is None or a != b:
                break
            same += 1
        converted = self._converted[:same] + [_chat_message(m) for m in messages[same:]]
        self._keys, self._converted = keys, converted
        return _system_message(system) + [x for c in converted for x in c]


def _key(message: dict[str, Any]) -> bytes | None:
    """The message's JSON, to recognise it in the next call's history; None (never reused) when orjson refuses it."""
    try:
        return orjson.dumps(message)
    except (TypeError, orjson.JSONEncodeError):
        return None


def _tool_call(part: dict[str, Any]) -> dict[str, Any]:
    args = part.get("arguments")
    return {"id": part.get("id") or "", "type": "function",
            "function": {"name": part.get("name") or "",
                         "arguments": canonical_json(args if isinstance(args, dict) else {"_raw_arguments": args})}}


def _finish_reason(call: LLMCall, has_tools: bool) -> str:
    """The spec fixes `tool_calls` on a frame that calls tools, whatever the producer logged
    (`tool_call`, or `stop` from the Responses API's `completed`)."""
    if has_tools:
        return "tool_calls"
    return call.finish_reasons[-1] if call.finish_reasons else "stop"


def streamed(call: LLMCall) -> bool:
    """The call's `parameters.stream`: what the producer said, else whether it left first-token evidence
    (only a stream has a first token before the end)."""
    return call.stream if call.stream is not None else call.ttfb_ms is not None


def network_metrics(call: LLMCall) -> dict[str, Any]:
    """§2.2: ttfb equals the total for a unary call; for a streamed (or not-known-unary) call only
    first-token evidence gives it, else it is unknown (null), never the total duration. Whatever is
    written passes the cassette's timing rules (a ttfb within the total; none without a duration)."""
    duration = max(call.end_ns - call.start_ns, 0) / 1e6
    if call.stream is False:
        return {"ttfb_ms": duration, "total_duration_ms": duration, "ttfb_source": "unary"}
    if call.ttfb_ms is not None and duration:
        return {"ttfb_ms": min(call.ttfb_ms, duration), "total_duration_ms": duration, "ttfb_source": "first_token"}
    return {"ttfb_ms": None, "total_duration_ms": duration, "ttfb_source": "unknown"}


def recorded_call(call: LLMCall, system: list[dict[str, Any]], reconstructed: bool = False,
                  history: ChatHistory | None = None) -> dict[str, Any]:
    """One LLM call as the cassette records it; `history`: the session's calls so far (their conversion reused)."""
    parts = [p for m in call.output_messages for p in m.get("parts", [])]
    text = "".join(p.get("content") or "" for p in parts if p.get("type") == "text")
    tool_calls = [_tool_call(p) for p in parts if p.get("type") == "tool_call"]
    metrics = network_metrics(call)
    stream = streamed(call)
    first_delta = metrics["ttfb_ms"] if stream and metrics["ttfb_ms"] is not None else 0.0
    frame: dict[str, Any] = {"delta_ms": first_delta, "chunk": text, "tool_calls": tool_calls,
                             "finish_reason": _finish_reason(call, bool(tool_calls))}
    boundary: dict[str, Any] = {"occurred": bool(call.error_type)}
    if call.error_type:
        boundary.update(error_type=call.error_type, message=call.error_message or "")
    usage = call.usage
    prompt, completion = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    model, provider = split_model(call.model, call.provider)
    usage_out = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if usage.get("total_tokens", prompt + completion) != prompt + completion:
        # the producer's total counts more than the two halves (or one half is missing): keep it, additive
        usage_out["reported_total_tokens"] = usage["total_tokens"]
    out: dict[str, Any] = {
        "request_context": {
            "model": model,
            "provider": provider,
            "messages": (history or ChatHistory()).chat_messages(call.system_instructions or system,
                                                                 call.input_messages),
            "parameters": {"temperature": call.sampler.get("temperature"),
                           "max_tokens": call.sampler.get("max_tokens"), "stream": stream},
        },
        "network_metrics": metrics,
        "response_timeline": [frame] if (parts or not call.error_type) else [],
        "exception_boundary": boundary,
        "usage": usage_out,
        "span_id": call.span_id,
        "content_captured": call.content_captured,
    }
    if reconstructed:
        out["reconstructed_from_transcript"] = True
    return out


def reconstructed_calls(session: Session) -> list[LLMCall]:
    calls = []
    for i, m in enumerate(session.messages):
        if m.get("role") == "assistant":
            calls.append(LLMCall(span_id="", trace_id="", dialect="transcript", input_messages=session.messages[:i],
                                 output_messages=[m], model=session.model, provider=session.provider,
                                 sampler=session.sampler))
    return calls


def run_key(session: Session) -> str:
    first = session.trace_ids[0] if session.trace_ids else session.key
    return first if _HEX32.match(first) else hashlib.sha256(session.key.encode()).hexdigest()[:32]


def cassette(session: Session, scenario_id: str) -> dict[str, Any]:
    system = session.system_instructions
    history = ChatHistory()
    if session.llm_calls:
        calls = [recorded_call(c, system, history=history) for c in sorted(session.llm_calls, key=lambda c: c.start_ns)]
    else:
        calls = [recorded_call(c, system, reconstructed=True, history=history) for c in reconstructed_calls(session)]
    key = run_key(session)
    entry: dict[str, Any] = {"trace_id": key}
    if calls:
        entry.update({k: v for k, v in calls[0].items() if k in (
            "request_context", "network_metrics", "response_timeline", "exception_boundary", "usage")})
    entry["calls"] = calls
    return add_run({"wt_cassette": 1, "scenario": scenario_id}, entry)
