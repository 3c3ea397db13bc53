"""A sweep's results as a tree of spans to emit: pure data in, data out, no SDK and no I/O.

`exporters.result_spans` hands the tree to the OpenTelemetry SDK. Keeping the
shape here means every attribute, time and status can be tested without a
network, and the reference in docs/viewing-results.md has one place to match.

    sweep <sweep-id>                         root; the whole `wt-otel run`
      scenario <scenario-id>                 linked to the incident's original trace and span
        run <n>                              one Trace (`run-<n>.trace.json`)
          invoke_agent <agent>               one injected user turn (GenAI semconv)
            execute_tool <tool>              one call the universe MCP server witnessed

Times come from the traces, never from "now": a run spans its `started_at` to
`ended_at`; turns are laid end to end from the run's start plus its reset and
surface phases, each as long as its measured latency (the trace keeps
latencies, not start times); a tool call sits at the universe's timestamp of
the answer, under the turn whose window holds it. Parents are widened to
enclose their children, so estimated turn windows never hide a witnessed call.

LLM calls get no `chat` spans: the cassette's call log has no timestamps, and
a span with an invented time would be worse than none. Their counts are on the
run span instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from wt_otel._util.clock import parse_iso
from wt_otel.contracts.results import RunScore, ScenarioResult, SweepResult
from wt_otel.contracts.run import McpCall, Trace, Turn

AttrValue = str | bool | int | float | list[str]
Status = Literal["UNSET", "OK", "ERROR"]

NS_PER_MS = 1_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
GREEN = ("PASS", "PASS_WITH_VARIANCE")
_HEX_TRACE = re.compile(r"[0-9a-f]{32}")
_HEX_SPAN = re.compile(r"[0-9a-f]{16}")

# OpenInference span kinds: Phoenix draws its span icons from this attribute alone.
OI_KIND = "openinference.span.kind"


@dataclass(frozen=True)
class IncidentLink:
    """The incident's original trace and root span, from the envelope's provenance (lowercase hex)."""

    trace_id: str
    span_id: str
    origin_ref: str | None = None


@dataclass(frozen=True)
class ScenarioEvidence:
    """What the results record does not hold: the run traces and where the incident came from."""

    traces: Sequence[Trace] = ()
    incident: IncidentLink | None = None


@dataclass
class PlannedSpan:
    """One span to emit; `start_ns`/`end_ns` are Unix nanoseconds."""

    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, AttrValue] = field(default_factory=dict)
    kind: Literal["internal", "client"] = "internal"
    status: Status = "UNSET"
    status_detail: str | None = None
    links: list[IncidentLink] = field(default_factory=list)
    children: list[PlannedSpan] = field(default_factory=list)

    def fail(self, detail: str | None) -> None:
        self.status, self.status_detail = "ERROR", detail or "failed"

    def count(self) -> int:
        return 1 + sum(c.count() for c in self.children)

    def enclose(self) -> PlannedSpan:
        """Widen this span to cover its children (estimated windows must not cut off evidence)."""
        if self.children:
            self.start_ns = min([self.start_ns] + [c.start_ns for c in self.children])
            self.end_ns = max([self.end_ns] + [c.end_ns for c in self.children])
        self.end_ns = max(self.end_ns, self.start_ns)
        return self


# ---------------------------------------------------------------- small conversions


def iso_ns(value: str | None) -> int | None:
    """ISO 8601 (with `Z` or an offset) to Unix nanoseconds; None when absent or unreadable."""
    if not value:
        return None
    stamp = parse_iso(value)  # wt-otel writes UTC; a naive stamp is read as such rather than as local time
    if stamp is None:
        return None
    return (stamp - EPOCH) // timedelta(microseconds=1) * 1000  # exact: no float rounding


def as_json(value: Any) -> str:
    """A value as the JSON string GenAI semconv expects in span attributes (non-ASCII kept readable)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def tool_result_text(value: Any) -> str:
    """A plain string result stays itself (not JSON-quoted); anything else is JSON."""
    return value if isinstance(value, str) else as_json(value)


def incident_link(envelope: Mapping[str, Any]) -> IncidentLink | None:
    """The link target in a Contract A envelope: provenance trace id + root span id, both valid hex.

    None when either is missing, not hex or all zeros (an invalid OTel id): the
    scenario span is then simply exported without a link.
    """
    prov = envelope.get("provenance")
    if not isinstance(prov, Mapping):
        return None
    trace_ids, span_id = prov.get("trace_ids"), prov.get("root_span_id")
    trace_id = trace_ids[0] if isinstance(trace_ids, list) and trace_ids else None
    if not isinstance(trace_id, str) or not isinstance(span_id, str):
        return None
    trace_id, span_id = trace_id.lower(), span_id.lower()
    if not (_HEX_TRACE.fullmatch(trace_id) and _HEX_SPAN.fullmatch(span_id)):
        return None
    if int(trace_id, 16) == 0 or int(span_id, 16) == 0:
        return None
    source = envelope.get("source")
    ref = source.get("ref") if isinstance(source, Mapping) else None
    return IncidentLink(trace_id, span_id, ref if isinstance(ref, str) else None)


def _put(attrs: dict[str, AttrValue], key: str, value: Any) -> None:
    """Set an attribute only when there is something to say (OTel drops None anyway, but warns)."""
    if value is None or value == [] or value == "":
        return
    attrs[key] = value


# ---------------------------------------------------------------- runs


def run_verdict(trace: Trace, score: RunScore | None) -> tuple[str, str | None]:
    """One run's verdict and, when it did not pass, the failing layer's detail (as the scorers phrase it)."""
    if trace.integrity.status != "PASS":
        return trace.integrity.status, f"integrity: {trace.integrity.detail}"
    if score is None:
        return "PASS", None
    if score.passed:
        return "PASS", None
    for name in score.gate:
        layer = score.layers.get(name)
        if layer is not None and not layer.passed:
            return "FAIL", f"{name}: {layer.detail}"
    return "FAIL", "no gated layer was scored"


def turn_windows(trace: Trace, start_ns: int) -> list[tuple[int, int]]:
    """Each turn's (start, end): laid end to end after the reset and surface phases, as long as its latency."""
    t = start_ns + int(((trace.timings.reset_ms or 0) + (trace.timings.surface_ms or 0)) * NS_PER_MS)
    windows = []
    for turn in trace.turns:
        end = t + int(turn.latency_ms * NS_PER_MS)
        windows.append((t, end))
        t = end
    return windows


def place_tool_calls(trace: Trace, windows: Sequence[tuple[int, int]]) -> list[int | None]:
    """The index of the turn each witnessed call belongs to (None: no turn at all).

    By timestamp: the turn whose window holds it, else the nearest one (the
    windows are estimates). Without a timestamp: the first turn that reported
    a not yet matched call of that name, else the last turn.
    """
    if not windows:
        return [None] * len(trace.mcp_calls)
    reported = [[c.name for c in turn.tool_calls] for turn in trace.turns]
    placed: list[int | None] = []
    for call in trace.mcp_calls:
        if call.timestamp_ms is not None:
            ts = call.timestamp_ms * NS_PER_MS
            placed.append(min(range(len(windows)), key=lambda i: max(windows[i][0] - ts, ts - windows[i][1], 0)))
            continue
        index = next((i for i, names in enumerate(reported) if call.tool_name in names), len(windows) - 1)
        if call.tool_name in reported[index]:
            reported[index].remove(call.tool_name)
        placed.append(index)
    return placed


def turn_span(turn: Turn, index: int, window: tuple[int, int], agent: str, trace: Trace,
              common: Mapping[str, AttrValue]) -> PlannedSpan:
    output = {"role": "assistant", "parts": [{"type": "text", "content": turn.reply}] if turn.reply else [],
              "finish_reason": "error" if turn.error else "stop"}
    attrs: dict[str, AttrValue] = {
        **common,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.input.messages": as_json([{"role": "user", "parts": [{"type": "text", "content": turn.text}]}]),
        "gen_ai.output.messages": as_json([output]),
        "wt.turn.index": index,
        "wt.turn.latency_ms": turn.latency_ms,
        OI_KIND: "AGENT",
        "input.value": turn.text,
        "output.value": turn.reply,
    }
    _put(attrs, "gen_ai.conversation.id", trace.session_id)
    _put(attrs, "gen_ai.request.model", next((c.model for c in trace.llm_calls if c.model), None))
    _put(attrs, "wt.turn.reported_tools", [c.name for c in turn.tool_calls])
    span = PlannedSpan(f"invoke_agent {agent}", window[0], window[1], attrs, kind="client")
    if turn.error:
        span.attributes["error.type"] = "agent_error"
        span.fail(f"the agent reported an error: {turn.error}")
    return span


def tool_span(call: McpCall, at_ns: int, common: Mapping[str, AttrValue]) -> PlannedSpan:
    """A witnessed call; zero length at the universe's answer time (the call log keeps no duration)."""
    arguments, result = as_json(call.args), tool_result_text(call.result)
    attrs: dict[str, AttrValue] = {
        **common,
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.tool_name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.arguments": arguments,
        "gen_ai.tool.call.result": result,
        "wt.tool.match": call.match,
        "wt.tool.witnessed": True,
        OI_KIND: "TOOL",
        "tool.name": call.tool_name,
        "input.value": arguments,
        "output.value": result,
    }
    if call.divergence:
        _put(attrs, "wt.tool.divergence.policy", str(call.divergence.get("policy") or call.match))
    _put(attrs, "wt.tool.recording", call.recording)
    span = PlannedSpan(f"execute_tool {call.tool_name}", at_ns, at_ns, attrs)
    if call.is_error:
        span.attributes["error.type"] = "tool_error"
        span.fail(f"the universe answered {call.tool_name} with an error ({call.match})")
    return span


def run_span(trace: Trace, score: RunScore | None, agent: str, common: Mapping[str, AttrValue], *,
             reviewed: bool = True) -> PlannedSpan:
    """One run; a passing run of an unreviewed scenario says UNREVIEWED (status unset), never a green PASS:
    its checks are defaults nobody has confirmed."""
    start = iso_ns(trace.started_at) or 0
    end = iso_ns(trace.ended_at) or start + int((trace.timings.total_ms or 0) * NS_PER_MS)
    verdict, detail = run_verdict(trace, score)
    if not reviewed and verdict == "PASS":
        verdict = "UNREVIEWED"
    attrs: dict[str, AttrValue] = {**common, "wt.run.index": trace.run_index, "wt.run.id": trace.run_id,
                                   "wt.verdict": verdict, "wt.runtime": trace.runtime,
                                   "wt.evidence.witness": trace.evidence.witness, "wt.evidence.llm": trace.evidence.llm,
                                   "wt.llm.calls": len(trace.llm_calls),
                                   "wt.llm.misses": sum(c.match == "miss" for c in trace.llm_calls),
                                   OI_KIND: "CHAIN"}
    _put(attrs, "wt.detail", detail)
    _put(attrs, "gen_ai.conversation.id", trace.session_id)
    _put(attrs, "wt.label", trace.label)
    _put(attrs, "wt.run.warnings", list(trace.warnings))
    layers = dict(score.layers) if score else {}
    if "integrity" not in layers:
        attrs["wt.layer.integrity.passed"] = trace.integrity.status == "PASS"
        _put(attrs, "wt.layer.integrity.detail", trace.integrity.detail)
    for name, layer in layers.items():
        attrs[f"wt.layer.{name}.passed"] = layer.passed
        _put(attrs, f"wt.layer.{name}.detail", layer.detail)
    if score is not None:
        attrs["wt.gate"] = list(score.gate)
    span = PlannedSpan(f"run {trace.run_index}", start, end, attrs)
    inner = {**common, "wt.run.index": trace.run_index}
    windows = turn_windows(trace, start)
    turns = [turn_span(t, i, windows[i - 1], agent, trace, inner) for i, t in enumerate(trace.turns, 1)]
    for call, where in zip(trace.mcp_calls, place_tool_calls(trace, windows), strict=True):
        if call.timestamp_ms is not None:
            at = call.timestamp_ms * NS_PER_MS
        else:
            at = windows[where][0] if where is not None else start
        (turns[where].children if where is not None else span.children).append(tool_span(call, at, inner))
    span.children = [t.enclose() for t in turns] + span.children
    if verdict == "PASS":
        span.status = "OK"
    elif verdict != "UNREVIEWED":  # UNREVIEWED: neither OK nor an error, it waits for a person
        span.fail(detail)
    return span.enclose()


# ---------------------------------------------------------------- scenarios and the sweep


def agent_name(trace: Trace, configured: str | None) -> str:
    """`gen_ai.agent.name`: as configured, else the Contract C URL or the in-process runtime's name."""
    return configured or trace.inject_url or trace.runtime


def scenario_span(result: ScenarioResult, evidence: ScenarioEvidence, sweep: SweepResult, fallback_ns: int,
                  agent: str | None) -> PlannedSpan:
    common: dict[str, AttrValue] = {"wt.sweep.id": sweep.sweep_id, "wt.scenario.id": result.scenario_id}
    # an unreviewed scenario is never green, even when a record says PASS (mark_unreviewed sets UNREVIEWED)
    verdict = "UNREVIEWED" if not result.reviewed and result.verdict in GREEN else result.verdict
    attrs: dict[str, AttrValue] = {**common, "wt.verdict": verdict, "wt.runs": result.runs,
                                   "wt.runs.passed": result.runs_passed, "wt.gate": list(result.gate),
                                   OI_KIND: "CHAIN"}
    for key, value in (("wt.pack", result.pack), ("wt.owner", result.owner), ("wt.label", result.label or sweep.label),
                       ("wt.origin.ref", result.origin), ("wt.model", result.model), ("wt.detail", result.detail),
                       ("wt.tags", list(result.tags)), ("wt.quant", getattr(result, "quant", None)),
                       ("wt.triage", getattr(result, "triage", None))):
        _put(attrs, key, value)
    for name, rate in result.layer_pass_rates.items():
        attrs[f"wt.layer.{name}.pass_rate"] = rate
    if not result.reviewed:
        attrs["wt.reviewed"] = False
        _put(attrs, "wt.reproduced", result.reproduced)
    scores = {s.run_index: s for s in result.scores}
    runs = [run_span(t, scores.get(t.run_index), agent_name(t, agent), common, reviewed=result.reviewed)
            for t in evidence.traces]
    span = PlannedSpan(f"scenario {result.scenario_id}", fallback_ns, fallback_ns, attrs, children=runs)
    if runs:
        span.start_ns, span.end_ns = min(r.start_ns for r in runs), max(r.end_ns for r in runs)
    for entry in getattr(result, "robustness", None) or []:  # the robustness layer, one span per perturbation
        child_attrs: dict[str, AttrValue] = {**common, "wt.layer": "robustness",
                                             "wt.layer.robustness.passed": bool(entry.get("passed"))}
        for key, value in (("wt.perturbation", entry.get("perturbation")), ("wt.perturbation.kind", entry.get("kind")),
                           ("wt.perturbation.tool", entry.get("tool")), ("wt.run.id", entry.get("run_id")),
                           ("wt.layer.robustness.detail", entry.get("detail")),
                           ("wt.layer.robustness.status", entry.get("status"))):  # ERROR: it tested nothing
            _put(child_attrs, key, value)
        child = PlannedSpan(f"robustness {entry.get('perturbation')}", span.end_ns, span.end_ns, child_attrs)
        if entry.get("passed"):
            child.status = "OK"
        else:
            child.fail(str(entry.get("detail") or "not handled"))
        runs.append(child)
    if evidence.incident is not None:
        span.links.append(evidence.incident)
        _put(attrs, "wt.incident.trace_id", evidence.incident.trace_id)
        _put(attrs, "wt.incident.span_id", evidence.incident.span_id)
        if "wt.origin.ref" not in attrs:
            _put(attrs, "wt.origin.ref", evidence.incident.origin_ref)
    if verdict in GREEN:
        span.status = "OK"
    elif verdict == "UNREVIEWED":  # neither OK nor an error: it waits for a person
        span.status = "UNSET"
    else:
        span.fail(f"{result.verdict}: {result.detail}" if result.detail else result.verdict)
    return span.enclose()


def plan_sweep(sweep: SweepResult, evidence: Sequence[ScenarioEvidence], agent: str | None = None) -> PlannedSpan:
    """The whole span tree of one sweep. `evidence[i]` belongs to `sweep.scenarios[i]` (missing: none)."""
    start = iso_ns(sweep.started_at) or 0
    end = iso_ns(sweep.finished_at) or start
    scenarios = [scenario_span(r, evidence[i] if i < len(evidence) else ScenarioEvidence(), sweep, end, agent)
                 for i, r in enumerate(sweep.scenarios)]
    failed = [s for s in sweep.scenarios if s.verdict not in (*GREEN, "UNREVIEWED")]
    # nobody confirmed what an unreviewed scenario checks: the sweep is not failed by it, but never "passed"
    unreviewed = [s for s in sweep.scenarios if s.verdict == "UNREVIEWED" or (s.verdict in GREEN and not s.reviewed)]
    passed = sweep.ok and not unreviewed
    attrs: dict[str, AttrValue] = {"wt.sweep.id": sweep.sweep_id, "wt.sweep.passed": passed,
                                   "wt.sweep.scenarios": len(sweep.scenarios), "wt.sweep.failed": len(failed),
                                   "wt.sweep.unreviewed": len(unreviewed), OI_KIND: "CHAIN"}
    for key, value in (("wt.label", sweep.label), ("wt.git.sha", sweep.git_sha), ("wt.version", sweep.wt_version),
                       ("wt.sweep.stopped", sweep.stopped)):
        _put(attrs, key, value)
    if sweep.selection:
        attrs["wt.sweep.selection"] = as_json(sweep.selection)
    span = PlannedSpan(f"sweep {sweep.sweep_id}", start, end, attrs, children=scenarios)
    if passed:
        span.status = "OK"
    elif sweep.ok:  # only unreviewed scenarios keep it from green: unset, like theirs
        span.status = "UNSET"
    elif sweep.stopped:
        span.fail(sweep.stopped)
    else:
        first = failed[0]
        span.fail(f"{len(failed)} of {len(sweep.scenarios)} scenario(s) did not pass; first: {first.scenario_id} "
                  f"{first.verdict}" + (f": {first.detail}" if first.detail else ""))
    return span.enclose()
