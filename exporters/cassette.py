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

from wt_otel.contracts.cassette import add_run
from wt_otel.model.parts import canonical_json
from wt_otel.model.session import LLMCall, Session

_HEX32 = re.compile(r"[0-9a-f]{32}\Z")


def chat_messages(system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parts-model messages -> OpenAI chat messages (the wire a replayed client sends)."""
    out: list[dict[str, Any]] = []
    system_text = "".join(p.get("content") or "" for p in system if p.get("type") == "text")
    if system_text:
        out.append({"role": "system", "content": system_text})
    for m in messages:
        parts = m.get("parts", [])
        responses = [p for p in parts if p.get("type") == "tool_call_response"]
        for r in responses:
            resp = r.get("response")
            out.append({"role": "tool", "tool_call_id": r.get("id") or "",
                        "content": resp if isinstance(resp, str) else canonical_json(resp)})
        if responses and len(responses) == len(parts):
            continue
        text = "".join(p.get("content") or "" for p in parts if p.get("type") == "text")
        msg: dict[str, Any] = {"role": m.get("role") or "user", "content": text}
        calls = [_tool_call(p) for p in parts if p.get("type") == "tool_call"]
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


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


def recorded_call(call: LLMCall, system: list[dict[str, Any]], reconstructed: bool = False) -> dict[str, Any]:
    parts = [p for m in call.output_messages for p in m.get("parts", [])]
    text = "".join(p.get("content") or "" for p in parts if p.get("type") == "text")
    tool_calls = [_tool_call(p) for p in parts if p.get("type") == "tool_call"]
    duration = max(call.end_ns - call.start_ns, 0) / 1e6
    frame: dict[str, Any] = {"delta_ms": 0.0, "chunk": text, "tool_calls": tool_calls,
                             "finish_reason": _finish_reason(call, bool(tool_calls))}
    boundary: dict[str, Any] = {"occurred": bool(call.error_type)}
    if call.error_type:
        boundary.update(error_type=call.error_type, message=call.error_message or "")
    usage = call.usage
    prompt, completion = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    out: dict[str, Any] = {
        "request_context": {
            "model": call.model or "unknown",
            "provider": call.provider,
            "messages": chat_messages(call.system_instructions or system, call.input_messages),
            "parameters": {"temperature": call.sampler.get("temperature"),
                           "max_tokens": call.sampler.get("max_tokens"), "stream": bool(call.stream)},
        },
        "network_metrics": {"ttfb_ms": duration, "total_duration_ms": duration},
        "response_timeline": [frame] if (parts or not call.error_type) else [],
        "exception_boundary": boundary,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": usage.get("total_tokens", prompt + completion)},
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
    if session.llm_calls:
        calls = [recorded_call(c, system) for c in sorted(session.llm_calls, key=lambda c: c.start_ns)]
    else:
        calls = [recorded_call(c, system, reconstructed=True) for c in reconstructed_calls(session)]
    key = run_key(session)
    entry: dict[str, Any] = {"trace_id": key}
    if calls:
        entry.update({k: v for k, v in calls[0].items() if k in (
            "request_context", "network_metrics", "response_timeline", "exception_boundary", "usage")})
    entry["calls"] = calls
    return add_run({"wt_cassette": 1, "scenario": scenario_id}, entry)
