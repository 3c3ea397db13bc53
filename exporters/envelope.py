"""Session -> Contract A envelope (`incident.wtin.json`).

Only the three part types v1 carries go into `messages`; the rest are listed
in the additive `omitted_parts`. Undecodable arguments stay visible (wrapped
as `{"_raw_arguments": text}` and flagged), never silently `{}`.
"""

from __future__ import annotations

from typing import Any

from wt_otel._util.clock import iso_from_ns
from wt_otel.model.parts import CONTRACT_A_PART_TYPES
from wt_otel.model.session import Session, ToolExecution

OTEL_GENAI_MAPPING = "semantic-conventions-genai@development-2026-06"
UNKNOWN_MODEL = "unknown"


def object_args(args: Any) -> dict[str, Any]:
    """Arguments as Contract A wants them: an object, with undecodable text kept in view."""
    return args if isinstance(args, dict) else {"_raw_arguments": args}


def source_ref(session: Session) -> str | None:
    """The incident ref, else the first trace id; None when there is neither (an envelope without
    source.ref): no origin is invented."""
    return session.flag_ref or (session.trace_ids[0] if session.trace_ids else None)


def envelope(session: Session) -> dict[str, Any]:
    messages = []
    for msg in session.messages:
        parts = []
        for part in msg["parts"]:
            if part.get("type") not in CONTRACT_A_PART_TYPES:
                continue
            if part["type"] == "tool_call" and not isinstance(part.get("arguments"), dict):
                part = {**part, "arguments": object_args(part.get("arguments")), "arguments_undecodable": True}
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
        "witnessed_calls": [witnessed(c) for c in session.witnessed_calls],
        "system_instructions": session.system_instructions,
        "omitted_parts": session.omitted_parts,
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


def witnessed(call: ToolExecution) -> dict[str, Any]:
    out = {
        "tool_name": call.tool_name,
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
        "llm_span_ids": [c.span_id for c in session.llm_calls],
        "content_captured": session.content_captured,
        "complete": session.complete,
    }
