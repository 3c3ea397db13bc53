"""Triage: who must act on a scenario that did not pass (0001-trace-reseeding.md, CI ergonomics).

A red row in CI is only useful when it says whose move it is. Three categories:

- `agent_regression`: the replay ran hermetically inside the recording and the agent's behaviour
  failed a gated layer (or a robustness perturbation): the agent's owners act.
- `prompt_changed`: a failing run's model request differs from the recording in the system prompt, the
  tool list or the model (a deliberate edit, usually): re-record the baseline (`--llm record`).
- `recording_gap`: a failing run left the recording otherwise (a tool call the universe has no answer
  for, a new path through the conversation): the failure may be the fixture's, not the agent's; whoever
  owns the scenario answers the new call (`wt-otel universe add`) or re-records.
- A failing run whose model request is the very one an older run of the cassette recorded (the incident's,
  say) is `agent_regression`: the old behaviour is back, whatever else it missed.
- `environment`: the run could not be judged at all (ERROR: endpoint down, reset failed, bad fixture;
  INVALID: the agent reached tools outside the served universe): whoever runs the bench acts.

PASS and PASS_WITH_VARIANCE carry no category.
"""

from __future__ import annotations

from collections.abc import Sequence

from wt_otel.contracts.results import RunScore
from wt_otel.contracts.run import Trace

AGENT_REGRESSION, RECORDING_GAP, ENVIRONMENT = "agent_regression", "recording_gap", "environment"
PROMPT_CHANGED = "prompt_changed"
CATEGORIES = (AGENT_REGRESSION, PROMPT_CHANGED, RECORDING_GAP, ENVIRONMENT)
WHO_ACTS = {
    AGENT_REGRESSION: "the agent regressed inside the recording: the agent's owners act",
    PROMPT_CHANGED: "the prompt, tool list or model changed since the recording: re-record the baseline "
                    "(wt-otel run ... --llm record), then judge",
    RECORDING_GAP: "a failing run left the recording (a new tool call or conversation path): answer the new "
                   "call (wt-otel universe add) or re-record, then judge",
    ENVIRONMENT: "the run could not be judged (endpoint, reset, fixture or a bypass of the universe): "
                 "whoever runs the bench acts",
}


def triage(verdict: str, traces: Sequence[Trace], scores: Sequence[RunScore]) -> str | None:
    """The category of a scenario's verdict over its runs, or None for a pass."""
    if verdict in ("PASS", "PASS_WITH_VARIANCE"):
        return None
    if verdict in ("ERROR", "INVALID"):
        return ENVIRONMENT
    by_id = {t.run_id: t for t in traces}
    failed = [by_id[s.run_id] for s in scores if not s.passed and s.run_id in by_id]
    if not failed and not scores:
        failed = list(traces)
    kinds = {k for t in failed for k in miss_kinds(t)}
    if not kinds or "reintroduced" in kinds:
        return AGENT_REGRESSION
    if kinds == {"prompt_changed"}:
        return PROMPT_CHANGED
    return RECORDING_GAP


def miss_kinds(trace: Trace) -> list[str]:
    """Why each miss of a run left the recording (`wt_otel.replay.misses`); `recording_gap` for a miss
    recorded before misses were classified."""
    kinds = [str((c.divergence or {}).get("kind") or RECORDING_GAP) for c in trace.llm_calls if c.match == "miss"]
    return kinds + ["tool_call_changed" for c in trace.mcp_calls if c.divergence]
