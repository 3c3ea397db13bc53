"""`trace.observations["universe"]`: what one run's tool calls did to the served universe.

The scorer library's state assertion (`observation(source, path, predicate)`, 0001 Change 2) reads
`trace.observations[source]`; the runner fills the `universe` source from the universe's call log, so a
scenario can assert on what the agent *changed*, not only on what it said:

    observation("universe", "writes[-1].tool", lambda t: t == "refund")
    observation("universe", "tools.next_ticket.consumed", lambda n: n == 1)

A universe is not a database (recording-a-universe.md: "no statefulness beyond sequence mode"), so its
state is what the call log and the tool definitions say, nothing simulated:

- `calls`, `errors`, `misses`: counts over the run (a miss: the call left the recording, any policy);
- `tools.<name>`: per tool called, `calls`, `errors`, `misses`, `last_args`, `last_result`, `writes`
  (whether the tool changes state) and `mode`; a `sequence` tool also has `consumed` (its recordings
  used up this run: each call a recording answered) and `remaining`;
- `writes`: the answered calls (not errors) to tools that change state, in call order, with their index
  in `mcp_calls`. A tool changes state when the universe says so: `mode: sequence` (each call consumes a
  recording), or MCP tool annotations `readOnlyHint: false` / `destructiveHint: true` on its definition.
  A tool that says nothing is read as a read: no guess from its name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wt_otel.contracts.run import McpCall
from wt_otel.contracts.universe import Universe, UniverseTool

SOURCE = "universe"

__all__ = ["SOURCE", "changes_state", "universe_observations"]


def changes_state(tool: UniverseTool | None) -> bool:
    """Whether the universe marks `tool` as changing state (sequence mode, or MCP annotations saying so)."""
    if tool is None:
        return False
    if tool.mode == "sequence":
        return True
    annotations = (tool.model_extra or {}).get("annotations")
    if not isinstance(annotations, dict):
        return False
    return annotations.get("readOnlyHint") is False or annotations.get("destructiveHint") is True


def _is_miss(call: McpCall) -> bool:
    return call.divergence is not None


def universe_observations(calls: Sequence[McpCall], universe: Universe | None) -> dict[str, Any]:
    """The `universe` observation of one run: per-tool end state and the writes, from its witnessed calls."""
    defs = {t.name: t for t in universe.tools} if universe is not None else {}
    recorded: dict[str, int] = {}
    for rec in universe.recordings if universe is not None else []:
        recorded[rec.tool_name] = recorded.get(rec.tool_name, 0) + 1
    tools: dict[str, dict[str, Any]] = {}
    writes: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        tool = defs.get(call.tool_name)
        writer = changes_state(tool)
        state = tools.setdefault(call.tool_name, {"calls": 0, "errors": 0, "misses": 0, "writes": writer,
                                                  "mode": tool.mode if tool is not None and tool.mode else
                                                  "stateless"})
        state["calls"] += 1
        state["errors"] += call.is_error
        missed = _is_miss(call)
        state["misses"] += missed
        state["last_args"], state["last_result"] = call.args, call.result
        if state["mode"] == "sequence":  # a recording that answered a sequence tool is used up
            state["consumed"] = state.get("consumed", 0) + (call.recording is not None)
            state["remaining"] = max(0, recorded.get(call.tool_name, 0) - state["consumed"])
        if writer and not call.is_error:
            writes.append({"index": index, "tool": call.tool_name, "args": call.args, "result": call.result})
    return {"calls": len(calls), "errors": sum(c.is_error for c in calls), "misses": sum(map(_is_miss, calls)),
            "tools": tools, "writes": writes}
