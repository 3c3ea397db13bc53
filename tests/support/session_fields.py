"""Fields right: how much of what a producer was driven to do an import got back, field by field.

The producer fixtures' ground truth is per session: user turns, final answers, and tool calls with
name, arguments and result. `score` counts each of those as one field, compares an import's
envelopes to it position by position, and counts whatever the import added (an extra turn, a
split-off session) as a wrong field too, so a score of 1.0 means exact. The leave-one-producer-out
test and `bench/` read producers with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import PRODUCERS
from tests.support.producers import FIRST_ANSWER

# The first producers (before the weather story) all played one conversation: tests/unit/ingest/test_producers.py.
BLUEWING_TURNS = ("What is the email on file for Bluewing?", "Thanks! And its phone?")


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _texts(message: dict[str, Any]) -> str:
    return "".join(p.get("content") or "" for p in message["parts"] if p["type"] == "text")


def observed(env: dict[str, Any]) -> dict[str, Any]:
    """What a person reading an envelope takes the session to be."""
    messages = env["messages"]
    results = {p["id"]: p["response"] for m in messages for p in m["parts"] if p["type"] == "tool_call_response"}
    witnessed = {w["tool_call_id"]: w for w in env["witnessed_calls"] if w.get("tool_call_id")}
    calls = []
    for m in messages:
        for p in m["parts"]:
            if p["type"] == "tool_call":
                w = witnessed.get(p["id"])
                result = w["result"] if w and w.get("result") is not None else results.get(p["id"])
                calls.append({"name": p["name"], "arguments": p["arguments"], "result": result})
    return {
        "users": [_texts(m) for m in messages if m["role"] == "user"],
        "answers": [_texts(m) for m in messages if m["role"] == "assistant" and _texts(m)],
        "tool_calls": calls,
    }


def wanted(producer_dir: Path) -> list[dict[str, Any]]:
    """Each session the producer was driven through, in `observed`'s terms."""
    path = producer_dir / "expected.json"
    if path.exists():
        sessions = json.loads(path.read_text(encoding="utf-8"))["sessions"]
        return [{"users": [t["user"] for t in s["turns"]], "answers": [t["answer"] for t in s["turns"]],
                 "tool_calls": [{k: c[k] for k in ("name", "arguments", "result")} for t in s["turns"]
                                for c in t["tool_calls"]]} for s in sessions]
    first, second = BLUEWING_TURNS
    # the shared agent loops return the whole record; the older generators' own tools only the email
    generator = (producer_dir / "generate.py").read_text(encoding="utf-8")
    record: dict[str, Any] = {"email": "ops@bluewing.example"}
    if "chat_agent" in generator or "agents_app" in generator:
        record = {"client": "Bluewing", **record, "phone": "+1-555-0100"}
    call = {"name": "client_lookup", "arguments": {"query": "Bluewing"}, "result": record}
    return [{"users": [first, second],
             "answers": [FIRST_ANSWER, f'You asked: "{second}" The phone on file for Bluewing is +1-555-0100.'],
             "tool_calls": [call, call]}]


@dataclass
class Score:
    right: int = 0
    total: int = 0
    sessions_got: int = 0
    sessions_wanted: int = 0

    @property
    def ratio(self) -> float:
        return self.right / self.total if self.total else 1.0


def _fields(session: dict[str, Any]) -> list[tuple[str, int, str]]:
    out = [("user", i, _canon(u)) for i, u in enumerate(session["users"])]
    out += [("answer", i, _canon(a)) for i, a in enumerate(session["answers"])]
    for i, c in enumerate(session["tool_calls"]):
        out += [("tool.name", i, _canon(c["name"])), ("tool.arguments", i, _canon(c["arguments"])),
                ("tool.result", i, _canon(c["result"]))]
    return out


def score(envelopes: list[dict[str, Any]], want: list[dict[str, Any]]) -> Score:
    """Fields right of `envelopes` against `want`: sessions are paired by their first user turn."""
    got = [observed(e) for e in envelopes]
    s = Score(sessions_got=len(got), sessions_wanted=len(want))
    free = list(range(len(got)))
    for w in want:
        wf = _fields(w)
        best, best_right = None, -1
        for gi in free:
            gf = set(_fields(got[gi]))
            right = sum(1 for f in wf if f in gf)
            if right > best_right:
                best, best_right = gi, right
        if best is None:
            s.total += len(wf)
            continue
        free.remove(best)
        gf = _fields(got[best])
        s.right += best_right
        s.total += len(wf) + max(0, len(gf) - len(wf))  # what the import added beyond the story
    for gi in free:  # a session nobody was driven through: each of its fields is wrong
        s.total += len(_fields(got[gi]))
    return s


def producer_dumps() -> list[Path]:
    """Every producer dump that carries conversation content."""
    found = [p for p in PRODUCERS.glob("*/*") if p.is_file() and p.name.startswith(("dump", "trace"))
             and not p.parent.name.startswith("_") and "no-content" not in p.name and "metrics-off" not in p.name]
    return sorted(found)
