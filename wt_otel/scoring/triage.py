"""Triage: who must act on a scenario that did not pass (0001-trace-reseeding.md, CI ergonomics).

A red row in CI is only useful when it says whose move it is. Three categories:

- `agent_regression`: the replay ran hermetically inside the recording and the agent's behaviour
  failed a gated layer (or a robustness perturbation): the agent's owners act.
- `recording_gap`: a failing run left the recording (a universe miss or an LLM cassette miss): the
  failure may be the fixture's, not the agent's; whoever owns the scenario re-records or widens it.
- `environment`: the run could not be judged at all (ERROR: endpoint down, reset failed, bad fixture;
  INVALID: the agent reached tools outside the served universe): whoever runs the bench acts.

PASS and PASS_WITH_VARIANCE carry no category.
"""

from __future__ import annotations

from collections.abc import Sequence

from wt_otel.contracts.results import RunScore
from wt_otel.contracts.run import Trace

AGENT_REGRESSION, RECORDING_GAP, ENVIRONMENT = "agent_regression", "recording_gap", "environment"
CATEGORIES = (AGENT_REGRESSION, RECORDING_GAP, ENVIRONMENT)
WHO_ACTS = {
    AGENT_REGRESSION: "the agent regressed inside the recording: the agent's owners act",
    RECORDING_GAP: "a failing run left the recording (divergence): re-record or widen the fixture, then judge",
    ENVIRONMENT: "the run could not be judged (endpoint, reset, fixture or a bypass of the universe): "
                 "whoever runs the bench acts",
}


def diverged(trace: Trace) -> bool:
    """The run asked something the recording did not hold (tool or model)."""
    return any(c.divergence for c in trace.mcp_calls) or any(c.match == "miss" for c in trace.llm_calls)


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
    if failed and any(diverged(t) for t in failed):
        return RECORDING_GAP
    return AGENT_REGRESSION
