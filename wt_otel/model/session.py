"""The Session model every dialect feeds and every writer reads.

Dialects turn single spans into `LLMCall`s and `ToolExecution`s (pure
functions, see `wt_otel.ingest.dialects`); `wt_otel.ingest.sessions` groups them into
`Session`s and builds the transcript. Writers never look at spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ToolExecution:
    """A tool call the tool side witnessed (an execute_tool / TOOL / function span)."""

    tool_name: str
    args: Any  # an object when decodable; the raw string otherwise (never `{}` by accident)
    result: Any = None
    tool_call_id: str | None = None
    span_id: str = ""
    trace_id: str = ""
    start_ns: int = 0
    end_ns: int = 0
    error: str | None = None
    args_decoded: bool = True
    dialect: str = ""
    correlation: str = "none"  # tool_call_id | name_order | none, set by the session builder


@dataclass(slots=True)
class LLMCall:
    """One inference call, or (is_transcript) an agent span that logs the whole history."""

    span_id: str
    trace_id: str
    dialect: str
    start_ns: int = 0
    end_ns: int = 0
    input_messages: list[dict[str, Any]] = field(default_factory=list)
    output_messages: list[dict[str, Any]] = field(default_factory=list)
    system_instructions: list[dict[str, Any]] = field(default_factory=list)
    tool_definitions: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    provider: str | None = None
    sampler: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    stream: bool | None = None
    finish_reasons: list[str] = field(default_factory=list)
    error_type: str | None = None
    error_message: str | None = None
    content_captured: bool = True
    is_transcript: bool = False
    # an agent/task span's own input text: what the user gave the agent, before any prompt template
    agent_input: str | None = None
    conversation_id: str | None = None
    # first-token latency from the telemetry (GenAI / OpenLLMetry attribute, OpenInference event); None: unknown
    ttfb_ms: float | None = None


Observation = LLMCall | ToolExecution


@dataclass(slots=True)
class Session:
    """One agent session: the conversation, its tools, and where each fact came from."""

    key: str
    trace_ids: list[str] = field(default_factory=list)
    conversation_id: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    system_instructions: list[dict[str, Any]] = field(default_factory=list)
    tool_definitions: list[dict[str, Any]] = field(default_factory=list)
    witnessed_calls: list[ToolExecution] = field(default_factory=list)
    llm_calls: list[LLMCall] = field(default_factory=list)
    model: str | None = None
    provider: str | None = None
    sampler: dict[str, Any] = field(default_factory=dict)
    started_ns: int = 0
    ended_ns: int = 0
    service_name: str | None = None
    dialects: list[str] = field(default_factory=list)
    flagged: bool = False
    flag_ref: str | None = None
    flag_reason: str | None = None
    flag_refs: list[str] = field(default_factory=list)  # every explicit incident id flagged in it, in order
    root_span_id: str | None = None
    omitted_parts: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # what the importer did not understand, one dict per finding: kind, message, span_id, attribute, setting
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    content_captured: bool = True
    complete: bool = True
    redaction: dict[str, Any] | None = None  # set by the redactor: {"applied": True, "patterns": [...], ...}
    # spans that are neither LLM calls nor tool calls (Agents SDK guardrail, handoff, custom, types added later),
    # kept as canonical custom spans {type, name, span_id, data, triggered? from_agent? to_agent?} (trace2test)
    custom_spans: list[dict[str, Any]] = field(default_factory=list)
    # how the session was assembled, on evidence (wt_otel.ingest.joins): "trace", "conversation_id:<key>",
    # "continuation:<trace id>" (a trace without an id whose history extends this session's exactly),
    # "link:<trace id>" (a trace whose spans link to one of this session's)
    joined_by: list[str] = field(default_factory=list)
    # the other traces this session's spans link to (span links: a producer's own word that they belong together)
    linked_traces: list[str] = field(default_factory=list)
    # who and where, for content joins (never joined across them): resource `service.instance.id`, the
    # end user's id; `feedback`: a span carries a feedback key (a join on a tie never takes such a session)
    service_instance_id: str | None = None
    user_id: str | None = None
    feedback: bool = False

    @property
    def evidence(self) -> str:
        """Where the tool universe comes from: server-side witness, the agent's own account, or nothing."""
        if self.witnessed_calls:
            return "witnessed"
        if any(p.get("type") == "tool_call" for m in self.messages for p in m.get("parts", [])):
            return "transcript"
        return "none"

    @property
    def user_turns(self) -> list[str]:
        """Text of each user turn; user messages without text (tool results, images) are skipped."""
        turns = []
        for m in self.messages:
            if m.get("role") != "user":
                continue
            text = "".join(p.get("content") or "" for p in m["parts"] if p.get("type") == "text").strip()
            if text:
                turns.append(text)
        return turns

    @property
    def final_answer(self) -> str:
        for m in reversed(self.messages):
            if m.get("role") == "assistant":
                text = "".join(p.get("content") or "" for p in m["parts"] if p.get("type") == "text")
                if text.strip():
                    return text
        return ""
