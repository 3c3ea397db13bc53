"""Integrity of one run, and a scenario's verdict over its runs.

Integrity answers "can this run be scored at all?" before any scorer looks at
it. The one check that matters most is the bypass check: `turns[*].tool_calls`
is what the agent *reported*, `mcp_calls` what the served universe *witnessed*.
A reported call with no witnessed counterpart went somewhere else (live tools),
so the run is INVALID, whatever the agent answered: a replay that silently
reached production must never pass.

The scenario's verdict over N runs (outcome, trajectory, constraint and
integrity) is `wt_otel.scoring.layers.aggregate`, which the runner calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from wt_otel.contracts.run import Integrity, McpCall, Trace, Turn
from wt_otel.model.parts import canonical_json

BYPASS = "universe bypassed: the agent did not call the served universe"


@dataclass(frozen=True)
class WitnessCheck:
    """The reported calls set against the witnessed ones.

    `unwitnessed`: reported, never seen by the universe (the bypass evidence).
    `unreported`: witnessed, missing from the agent's report (Contract C wants every call).
    `args_differ`: a reported call paired with a witnessed call of the same tool but other arguments.
    """

    unwitnessed: list[str]
    unreported: list[str]
    args_differ: list[str]


def check_witness(turns: Iterable[Turn], mcp_calls: Iterable[McpCall]) -> WitnessCheck:
    """Pair every reported call with a witnessed one: by name and arguments, then by name alone.

    Multisets, not sets: two reported calls need two witnessed ones, so an agent
    that called the universe once and live tools once for the same query is caught.
    The name-only second pass tolerates an agent reporting arguments in a
    slightly different shape (defaults filled in, say) without calling it a bypass.
    """
    reported = Counter((c.name, canonical_json(c.arguments)) for t in turns for c in t.tool_calls)
    witnessed = Counter((c.tool_name, canonical_json(c.args)) for c in mcp_calls)
    exact = reported & witnessed
    reported, witnessed = reported - exact, witnessed - exact
    spare = Counter(name for name, _ in witnessed.elements())  # unpaired witnessed calls, per tool
    unwitnessed: list[str] = []
    args_differ: list[str] = []
    for name, args in reported.elements():
        if spare[name] > 0:
            spare[name] -= 1
            args_differ.append(f"{name}({args})")
        else:
            unwitnessed.append(f"{name}({args})")
    unreported: list[str] = []
    for name, args in reversed(list(witnessed.elements())):  # which same-tool call got paired is moot
        if spare[name] > 0:
            spare[name] -= 1
            unreported.append(f"{name}({args})")
    unreported.reverse()
    return WitnessCheck(unwitnessed, unreported, args_differ)


def run_integrity(turns: Sequence[Turn], mcp_calls: Sequence[McpCall], error: str | None = None) -> tuple[
        Integrity, list[str]]:
    """The run's integrity and the warnings the witness check raised.

    `error` is why the run could not complete (reset failed, endpoint down...):
    ERROR wins over INVALID, since an unfinished run proves nothing either way.
    """
    check = check_witness(turns, mcp_calls)
    warnings = []
    if check.args_differ:
        warnings.append("the agent reported arguments that differ from what the universe witnessed for: "
                        + ", ".join(check.args_differ))
    if check.unreported:
        warnings.append("the universe witnessed call(s) the agent did not report (Contract C tool_calls must list "
                        "every call): " + ", ".join(check.unreported))
    if error:
        return Integrity(status="ERROR", detail=error), warnings
    if check.unwitnessed:
        seen = f"it witnessed {len(mcp_calls)} call(s)" if mcp_calls else "it witnessed no call at all"
        return Integrity(status="INVALID", detail=f"{BYPASS}: reported but never witnessed: "
                                                  f"{', '.join(check.unwitnessed)} ({seen})"), warnings
    return Integrity(status="PASS"), warnings


def divergence_note(traces: Sequence[Trace]) -> str | None:
    """Misses across the runs, e.g. "divergence: 2 universe miss(es), 1 LLM miss(es)"; None when there are none.

    Divergence does not change the integrity verdict (a run that left the
    recording still ran hermetically), but a summary must not hide it.
    """
    tools = sum(1 for t in traces for c in t.mcp_calls if c.divergence)
    llm = sum(1 for t in traces for c in t.llm_calls if c.match == "miss")
    parts = [f"{tools} universe miss(es)" if tools else "", f"{llm} LLM miss(es)" if llm else ""]
    parts = [p for p in parts if p]
    return f"divergence: {', '.join(parts)}" if parts else None
