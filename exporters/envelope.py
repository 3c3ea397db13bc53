"""Session -> Contract A envelope (`incident.wtin.json`).

Only the three part types v1 carries go into `messages`; the rest are listed
in the additive `omitted_parts`. Undecodable arguments stay visible (wrapped
as `{"_raw_arguments": text}` and flagged), never silently `{}`; a tool call whose name the producer did
not give takes its witnessed call's name, else `unknown_tool`; a response without an id answers the first call
not yet answered (all flagged), so the envelope stays valid.
"""

from __future__ import annotations

from typing import Any

from wt_otel._util.clock import iso_from_ns
from wt_otel.model.parts import CONTRACT_A_PART_TYPES
from wt_otel.model.session import Session, ToolExecution

OTEL_GENAI_MAPPING = "semantic-conventions-genai@development-2026-06"
UNKNOWN_MODEL = "unknown"
UNKNOWN_TOOL = "unknown_tool"


def object_args(args: Any) -> dict[str, Any]:
    """Arguments as Contract A wants them: an object, with undecodable text kept in view."""
    return args if isinstance(args, dict) else {"_raw_arguments": args}


def _contract_call(part: dict[str, Any], named: dict[str, str], where: str) -> dict[str, Any]:
    """A tool call as Contract A requires it: object arguments, a name, an id; what was made up is flagged."""
    if not isinstance(part.get("arguments"), dict):
        part = {**part, "arguments": object_args(part.get("arguments")), "arguments_undecodable": True}
    if not part.get("id"):
        part = {**part, "id": f"call_unknown_{where}", "id_guessed": True}
    if not part.get("name"):
        name = named.get(part["id"])
        part = {**part, "name": name} if name else {**part, "name": UNKNOWN_TOOL, "name_unknown": True}
    return part


def source_ref(session: Session) -> str | None:
    """The incident ref, else the first trace id; None when there is neither (an envelope without
    source.ref): no origin is invented."""
    return session.flag_ref or (session.trace_ids[0] if session.trace_ids else None)


def envelope(session: Session) -> dict[str, Any]:
    messages = []
    omitted = list(session.omitted_parts)
    named = {c.tool_call_id: c.tool_name for c in session.witnessed_calls if c.tool_call_id and c.tool_name}
    pending: list[str] = []  # ids of calls not answered yet, in order: a response without an id answers the first
    called: dict[str, str] = {}  # tool call id -> the name the transcript gives it
    for index, msg in enumerate(session.messages):
        parts: list[dict[str, Any]] = []
        for part in msg["parts"]:
            if part.get("type") not in CONTRACT_A_PART_TYPES:
                continue
            if part["type"] == "tool_call":
                part = _contract_call(part, named, f"{index}_{len(parts)}")
                pending.append(part["id"])
                called.setdefault(part["id"], part["name"])
            elif part["type"] == "tool_call_response":
                if not part.get("id"):
                    if not pending:  # answers no call: kept in view, out of the transcript
                        omitted.append({"message_index": index, "role": msg["role"], "part": part})
                        continue
                    part = {**part, "id": pending[0], "id_guessed": True}
                if part["id"] in pending:
                    pending.remove(part["id"])
            parts.append(part)
        if parts:
            messages.append({**msg, "parts": parts})
    env: dict[str, Any] = {
        "windtunnel_interchange": 1,
        "otel_genai_mapping": OTEL_GENAI_MAPPING,
        "source": {
            **({"ref": source_ref(session)} if source_ref(session) else {}),
            "system": session.service_name or "otlp",
            "captured_at": iso_from_ns(session.ended_ns),
        },
        "session": {
            "model": session.model or UNKNOWN_MODEL,
            "provider": session.provider,
            "sampler": session.sampler,
            "started_at": iso_from_ns(session.started_ns),
        },
        "messages": messages,
        "tool_definitions": [tool_definition(d) for d in session.tool_definitions],
        "witnessed_calls": [witnessed(c, called) for c in session.witnessed_calls],
        "system_instructions": session.system_instructions,
        "omitted_parts": omitted,
        "provenance": provenance(session),
        "warnings": session.warnings,
        "diagnostics": session.diagnostics,
    }
    if session.flagged:
        env["source"]["flag"] = session.flag_reason
    if session.redaction:
        env["redaction"] = session.redaction
    if session.custom_spans:  # guardrails, handoffs, custom and new SDK span types: kept, never dropped
        env["custom_spans"] = session.custom_spans
    return env


def tool_definition(d: dict[str, Any]) -> dict[str, Any]:
    """Contract A needs an input schema; a name-only definition gets a flagged stub."""
    if isinstance(d.get("input_schema"), dict):
        return d
    return {**d, "input_schema": {"type": "object"}, "input_schema_stubbed": True}


def witnessed(call: ToolExecution, called: dict[str, str] | None = None) -> dict[str, Any]:
    """A witnessed call; without a tool name, the name its transcript call gives, else `unknown_tool` (flagged)."""
    name = call.tool_name or (called or {}).get(call.tool_call_id or "") or UNKNOWN_TOOL
    out = {
        "tool_name": name,
        "args": object_args(call.args),
        "result": call.result,
        "tool_call_id": call.tool_call_id,
        "span_id": call.span_id,
        "trace_id": call.trace_id,
        "started_at": iso_from_ns(call.start_ns),
        "ended_at": iso_from_ns(call.end_ns),
        "error": call.error,
        "correlation": call.correlation,
    }
    if not call.args_decoded:
        out["args_undecodable"] = True
    if name == UNKNOWN_TOOL and call.tool_name != UNKNOWN_TOOL:
        out["tool_name_unknown"] = True
    return out


def provenance(session: Session) -> dict[str, Any]:
    return {
        "session_key": session.key,
        "trace_ids": session.trace_ids,
        "root_span_id": session.root_span_id,
        "conversation_id": session.conversation_id,
        "service_name": session.service_name,
        "dialects": session.dialects,
        "evidence": session.evidence,
        "joined_by": session.joined_by,  # how the session's traces were joined (wt_otel.ingest.joins)
        "llm_span_ids": [c.span_id for c in session.llm_calls],
        "content_captured": session.content_captured,
        "complete": session.complete,
    }
