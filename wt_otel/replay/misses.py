"""Misses that explain themselves: what left the recording, why, and the command that closes the gap.

A run leaves its recording in one of three ways, and each has a different owner and next step:

- `prompt_changed`: an LLM request differs from its recording in the system prompt, the tool list or the
  model (a deliberate edit, usually): re-record the baseline (`--llm record`);
- `new_path`: an LLM request differs later in the conversation (another user turn, another tool result):
  the conversation took a path the recording never took;
- `tool_call_changed`: a tool call the universe holds no answer for (another tool, or the same tool with
  other arguments): the argument diff against the nearest recording, and a `wt-otel universe add`
  command with the arguments filled in (or `wt-otel universe record` to ask the real tool server).

A fourth is not a gap at all: `reintroduced`, an LLM request identical to one an older run of the cassette
recorded (the incident's own run, say): the old behaviour is back, and triage calls it a regression.
The LLM kinds are set where the miss is answered (`replay.cassette`); tool misses are explained here,
against the scenario's universe, when the run's trace is sealed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wt_otel.contracts.run import McpCall, Trace, load_trace
from wt_otel.contracts.universe import POLICIES, Universe
from wt_otel.model.parts import canonical_json

PROMPT_CHANGED, NEW_PATH, TOOL_CALL_CHANGED, REINTRODUCED = (
    "prompt_changed", "new_path", "tool_call_changed", "reintroduced")
RESULT_PLACEHOLDER = "RESULT_JSON"  # what the printed `universe add` leaves for the reviewer to fill in
SOURCE_PLACEHOLDER = "URL_OR_COMMAND"
MAX_VALUE = 80
SUMMARY_FILE = "summary.json"  # the sweep's index (replay.runner writes it)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 3] + "..."


def args_diff(recorded: Mapping[str, Any], called: Mapping[str, Any]) -> list[str]:
    """Per argument, what the call changed against a recording: `~ k: old -> new`, `+ k: new`, `- k: old`."""
    lines = []
    for k in sorted(set(recorded) | set(called), key=str):
        if k not in called:
            lines.append(f"- {k}: {_short(recorded[k])}")
        elif k not in recorded:
            lines.append(f"+ {k}: {_short(called[k])}")
        elif canonical_json(recorded[k]) != canonical_json(called[k]):
            lines.append(f"~ {k}: {_short(recorded[k])} -> {_short(called[k])}")
    return lines


def explain_tool_miss(tool: str, args: Mapping[str, Any], universe: Universe | None) -> dict[str, Any]:
    """`{kind, nearest, diff}` for one tool call the universe did not hold: the recording of the same tool
    that shares the most argument values (ties: recording order), and the argument diff against it."""
    if universe is None or all(t.name != tool for t in universe.tools):
        return {"kind": TOOL_CALL_CHANGED, "nearest": None,
                "diff": [f"tool {tool!r} is not in the universe (a tool production never offered)"]}
    called = {k: canonical_json(v) for k, v in args.items()}
    best, best_score = None, -1
    for i, rec in enumerate(universe.recordings):
        if rec.tool_name != tool:
            continue
        score = sum(1 for k, v in rec.args.items() if called.get(k) == canonical_json(v))
        if score > best_score:
            best, best_score = i, score
    if best is None:
        return {"kind": TOOL_CALL_CHANGED, "nearest": None,
                "diff": [f"no recording of {tool!r}: production never called it"]}
    return {"kind": TOOL_CALL_CHANGED, "nearest": best,
            "diff": args_diff(universe.recordings[best].args, args) or ["same arguments (a sequence tool called "
                                                                          "more often than recorded?)"]}


def explain_tool_misses(calls: Iterable[McpCall], universe: Universe | None) -> None:
    """Add the explanation to each missed call's `extra.divergence`, in place."""
    for call in calls:
        divergence = call.divergence
        if divergence is not None and "kind" not in divergence:
            divergence.update(explain_tool_miss(call.tool_name, call.args, universe))


def add_command(universe_path: Path | str, tool: str, args: Mapping[str, Any]) -> str:
    """The `wt-otel universe add` line for one miss, every value shell-quoted (tool names and arguments come
    from the agent, so from untrusted trace content); the result is left for the reviewer."""
    return " ".join(["wt-otel universe add", shlex.quote(str(universe_path)), "--tool", shlex.quote(tool),
                     "--args", shlex.quote(json.dumps(dict(args), ensure_ascii=False, sort_keys=True)),
                     "--result", RESULT_PLACEHOLDER])


def record_command(universe_path: Path | str, sweep_dir: Path | str) -> str:
    return " ".join(["wt-otel universe record", shlex.quote(str(universe_path)), "--from", SOURCE_PLACEHOLDER,
                     "--sweep", shlex.quote(str(sweep_dir))])


@dataclass(frozen=True)
class ToolMiss:
    """One distinct tool call of a sweep that its scenario's universe could not answer."""

    scenario_id: str
    universe_path: Path | None
    tool: str
    args: dict[str, Any]
    diff: tuple[str, ...]


def tool_misses(scenario_id: str, universe_path: Path | None, traces: Sequence[Trace]) -> list[ToolMiss]:
    """The distinct missed calls of a scenario's runs (robustness runs aside), in the order first made."""
    seen: set[tuple[str, str]] = set()
    out = []
    for trace in traces:
        if trace.perturbation:
            continue
        for call in trace.mcp_calls:
            divergence = call.divergence
            if not divergence or call.match not in POLICIES:
                continue
            key = (call.tool_name, canonical_json(call.args))
            if key in seen:
                continue
            seen.add(key)
            out.append(ToolMiss(scenario_id, universe_path, call.tool_name, dict(call.args),
                                tuple(divergence.get("diff") or ())))
    return out


def hint_lines(misses: Sequence[ToolMiss], sweep_dir: Path) -> list[str]:
    """What `wt-otel run` prints at the end of a sweep with tool misses: per miss the diff and the exact
    `universe add` command, then per universe the `universe record` command that asks the real server."""
    if not misses:
        return []
    lines = [f"{len(misses)} tool call(s) had no recorded answer; give each one (a reviewed answer, "
             f"replace {RESULT_PLACEHOLDER}), then run again:"]
    for m in misses:
        lines.append(f"  {m.scenario_id}: {m.tool}({_short(m.args)}): the tool call changed")
        lines += [f"      {d}" for d in m.diff]
        if m.universe_path is None:
            lines.append("    (the scenario names no universe fixture: add `fixtures.universe` to scenario.yaml)")
        else:
            lines.append(f"    {add_command(m.universe_path, m.tool, m.args)}")
    paths = list(dict.fromkeys(m.universe_path for m in misses if m.universe_path is not None))
    if paths:
        lines.append(f"  or ask the real tool server (an MCP URL, or the command that starts it; replace "
                     f"{SOURCE_PLACEHOLDER}):")
        lines += [f"    {record_command(p, sweep_dir)}" for p in paths]
    return lines


def universe_path_of(scenario_dir: Path, fixture: str | None) -> Path | None:
    """The universe file a scenario names, as the path a user would type (absolute only if the dir was)."""
    return scenario_dir / fixture if fixture else None


def sweep_tool_misses(sweep_dir: Path, universe_file: Path) -> list[ToolMiss]:
    """The tool misses of a finished sweep (`<runs_dir>/<sweep_id>`, its summary.json and traces) in the
    scenarios whose universe is `universe_file`. Raises ValueError when `sweep_dir` is not a sweep."""
    from wt_otel.replay.scenarios import load_scenario_dir

    summary_path = sweep_dir / SUMMARY_FILE
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{sweep_dir} is not a sweep of `wt-otel run` (no readable {SUMMARY_FILE}: "
                         f"{getattr(exc, 'strerror', None) or exc})") from None
    target = universe_file.resolve()
    out: list[ToolMiss] = []
    for row in summary.get("scenarios") or []:
        scenario_dir = Path(row.get("path") or "")
        loaded = load_scenario_dir(scenario_dir, need_cassette=False)
        fixture = loaded.scenario.fixtures.universe if loaded.scenario else None
        path = universe_path_of(scenario_dir, fixture)
        if path is None or path.resolve() != target:
            continue
        traces = []
        for rel in row.get("traces") or []:
            try:
                traces.append(load_trace(json.loads((sweep_dir / rel).read_text(encoding="utf-8"))))
            except (OSError, ValueError):
                continue  # a trace that cannot be read holds no miss we can answer
        seen = {(m.tool, canonical_json(m.args)) for m in out}
        out += [m for m in tool_misses(row.get("id") or loaded.id, path, traces)
                if (m.tool, canonical_json(m.args)) not in seen]
    return out


__all__ = ["NEW_PATH", "PROMPT_CHANGED", "REINTRODUCED", "TOOL_CALL_CHANGED", "ToolMiss", "add_command",
           "args_diff", "explain_tool_miss", "explain_tool_misses", "hint_lines", "record_command", "sweep_tool_misses",
           "tool_misses", "universe_path_of"]
