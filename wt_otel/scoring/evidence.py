"""One view of "what the agent did" over a replayed Trace or a recorded Session.

Assertions and provenance scorers must not care whether they look at a replay
(`wt-otel run`) or at a recording (`wt-otel check`), but they must care how
trustworthy the calls are. So the view keeps the evidence-quality rule in one
place: server-witnessed calls when a witness was available (the universe MCP
server's call log, execute_tool / TOOL spans), else the agent's own transcript
(Contract C `tool_calls`, `tool_call` / `tool_call_response` parts), and
`describe()` names which one a verdict rests on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from wt_otel.contracts.run import Trace
from wt_otel.model.session import Session

Source = Literal["witnessed", "transcript", "none"]
NO_RECORDED_RESULT = "no_recorded_result"
MARKER_PREFIXES = ("guardrail:", "handoff:", "custom:")


def markers_of(custom_spans: list[dict[str, Any]]) -> list[CallView]:
    """Canonical custom spans as selectable views: a guardrail's result is {triggered, ...its payload}, a
    handoff's {from_agent, to_agent}, a custom span's its data."""
    out = []
    for span in sorted(custom_spans, key=lambda c: c.get("start_ns") or 0):
        kind, name = span.get("type"), str(span.get("name") or "")
        raw = span.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if kind == "guardrail":
            out.append(CallView(f"guardrail:{name}", {}, {**data, "triggered": bool(span.get("triggered"))}, True))
        elif kind == "handoff":
            out.append(CallView(f"handoff:{span.get('to_agent') or name}", {},
                                {"from_agent": span.get("from_agent"), "to_agent": span.get("to_agent")}, True))
        else:
            out.append(CallView(f"custom:{name}", {}, data, True))
    return out


@dataclass(frozen=True)
class CallView:
    """One tool call: name, arguments and (when the evidence carries it) its result.

    `has_result` is False for Contract C transcript calls: the agent reports
    what it called, not what it got back, so "no result" must not read as
    "returned null".
    """

    name: str
    args: Any
    result: Any = None
    has_result: bool = False
    match: str | None = None  # universe match (exact, keyed, fail_call...) on a replay
    divergence: dict[str, Any] | None = None

    @property
    def is_fail_call_echo(self) -> bool:
        """The universe's `fail_call` answer: the agent's own arguments echoed back, never evidence of a fact."""
        if self.match == "fail_call":
            return True
        return isinstance(self.result, dict) and self.result.get("error") == NO_RECORDED_RESULT


@dataclass(frozen=True)
class EvidenceView:
    """The calls, in order, and the final reply of one run or recorded session."""

    source: Source
    calls: list[CallView] = field(default_factory=list)
    final_reply: str = ""
    user_turns: list[str] = field(default_factory=list)
    # guardrails, handoffs and custom spans of a recording, selectable as `guardrail:NAME`, `handoff:AGENT`,
    # `custom:NAME` (e.g. an output assertion on a guardrail's {"triggered": ...}); never in tool sequences
    markers: list[CallView] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def describe(self) -> str:
        """The evidence a detail rests on, e.g. "evidence: 2 server-witnessed call(s)"."""
        n = len(self.calls)
        if self.source == "witnessed":
            return f"evidence: {n} server-witnessed call(s)"
        if self.source == "transcript":
            return f"evidence: {n} transcript call(s) (the agent's own account; no server witness was available)"
        return "evidence: none (no tool call was witnessed or reported)"

    def of_tool(self, name: str) -> list[CallView]:
        if name.startswith(MARKER_PREFIXES):
            return [c for c in self.markers if c.name == name]
        return [c for c in self.calls if c.name == name]


def from_trace(trace: Trace) -> EvidenceView:
    """Witnessed MCP calls when the universe saw the agent (or any call); else the reported tool calls.

    Reported calls carry no results (Contract C), so a transcript view of a
    Trace has `has_result=False` everywhere.
    """
    reply = trace.turns[-1].reply if trace.turns else ""
    users = [t.text for t in trace.turns]
    if trace.evidence.witness == "available" or trace.mcp_calls:
        calls = [CallView(c.tool_name, c.args, c.result, True, c.match, c.divergence) for c in trace.mcp_calls]
        return EvidenceView("witnessed", calls, reply, users)
    reported = [CallView(c.name, c.arguments) for t in trace.turns for c in t.tool_calls]
    return EvidenceView("transcript" if reported else "none", reported, reply, users)


def from_session(session: Session) -> EvidenceView:
    """Witnessed tool executions when the dump has them; else transcript tool_call parts with their responses."""
    if session.witnessed_calls:
        ordered = sorted(session.witnessed_calls, key=lambda c: c.start_ns)
        calls = [CallView(c.tool_name, c.args, c.result if c.error is None or c.result is not None else
                          {"error": c.error}, True) for c in ordered]
        return EvidenceView("witnessed", calls, session.final_answer, session.user_turns,
                            markers_of(session.custom_spans))
    responses: dict[str, Any] = {}
    for m in session.messages:
        for p in m.get("parts", []):
            if p.get("type") == "tool_call_response" and p.get("id"):
                responses[p["id"]] = p.get("response", p.get("result"))
    calls = []
    for m in session.messages:
        for p in m.get("parts", []):
            if p.get("type") == "tool_call":
                answered = p.get("id") in responses
                calls.append(CallView(p.get("name") or "", p.get("arguments"), responses.get(p.get("id")), answered))
    return EvidenceView("transcript" if calls else "none", calls, session.final_answer, session.user_turns,
                        markers_of(session.custom_spans))
