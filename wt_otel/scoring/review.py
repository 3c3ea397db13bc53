"""Unreviewed scenarios: never a plain PASS; say whether the flagged behaviour reproduced instead.

An incident imported automatically is scored with default checks
(`no_divergence`, `substantiated_by_tools`) until a person writes its real
outcome check. Those checks passing says the replay was clean, not that the
agent is right: a conversation a user complained about must not show green.
So a scenario tagged `unreviewed` gets the verdict UNREVIEWED where it would
have passed (FAIL, INVALID and ERROR stay), and every verdict of it says
whether the replay reproduced the incident: the same final answer and the
same tool trajectory (tool names in order) as the recorded session. Remove
the `unreviewed` tag from scenario.yaml once the scorer is written.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wt_otel.contracts.results import ScenarioResult
from wt_otel.contracts.run import Trace

__all__ = ["UNREVIEWED_TAG", "incident_behaviour", "mark_unreviewed", "reproduction"]

UNREVIEWED_TAG = "unreviewed"
ENVELOPE = "incident.wtin.json"


def _norm(text: str) -> str:
    return " ".join(text.split())


def incident_behaviour(envelope: dict[str, Any]) -> tuple[str, list[str]]:
    """(final answer, tool names in order) of a Contract A envelope's conversation."""
    answer, tools = "", []
    for message in envelope.get("messages") or []:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        text = ""
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "tool_call" and isinstance(part.get("name"), str):
                tools.append(part["name"])
            elif part.get("type") == "text" and isinstance(part.get("content"), str):
                text += part["content"]
        if text.strip():
            answer = text
    return answer, tools


def reproduction(incident: tuple[str, list[str]], trace: Trace) -> tuple[bool, str]:
    """Did this run do what the incident did? (reproduced, what differs)."""
    want_answer, want_tools = incident
    replies = [t.reply for t in trace.turns if t.reply.strip()]
    got_answer = replies[-1] if replies else ""
    got_tools = [c.name for t in trace.turns for c in t.tool_calls]
    differences = []
    if _norm(got_answer) != _norm(want_answer):
        differences.append("final answer differs")
    if got_tools != want_tools:
        differences.append(f"tools {got_tools} vs incident {want_tools}")
    return not differences, "; ".join(differences)


def _envelope(directory: Path | None) -> dict[str, Any] | None:
    if directory is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads((directory / ENVELOPE).read_text(encoding="utf-8"))
        return loaded if isinstance(loaded, dict) else None
    return None


def mark_unreviewed(record: ScenarioResult, traces: Sequence[Trace], directory: Path | None) -> None:
    """Turn a pass of an unreviewed scenario into UNREVIEWED and say whether the incident reproduced."""
    record.reviewed = False
    envelope = _envelope(directory)
    judged = [t for t in traces if t.integrity.status not in ("ERROR", "INVALID")]
    if envelope is None or not judged:
        record.reproduced = None
        said = "reproduction unknown (no incident envelope or no finished run)"
    else:
        incident = incident_behaviour(envelope)
        outcomes = [reproduction(incident, t) for t in judged]
        same = sum(ok for ok, _ in outcomes)
        record.reproduced = same == len(outcomes)
        if record.reproduced:
            said = "incident REPRODUCED (same final answer and tool trajectory)"
        else:
            first = next(why for ok, why in outcomes if not ok)
            said = f"incident not reproduced in {len(outcomes) - same}/{len(outcomes)} run(s) ({first})"
    if record.verdict in ("PASS", "PASS_WITH_VARIANCE"):
        record.verdict = "UNREVIEWED"
        record.detail = f"unreviewed: {said}; write its scorer.py and drop the `unreviewed` tag"
    else:  # FAIL, INVALID, ERROR keep their verdict and detail first; the review state follows
        note = "unreviewed" if record.reproduced is None else f"unreviewed; {said}"
        record.detail = f"{record.detail} [{note}]" if record.detail else note
