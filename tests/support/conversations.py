"""Look-alike conversations for the join rule (issue 29): many open with the same question and answer.

Each turn is its own trace (an `invoke_agent` root and a `chat` span with GenAI semconv messages), the
way runners without a session store emit them; the second turn resends the whole history."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wt_otel.model.spans import Link, SpanRecord

FIRST_Q = "hi, what can you do?"
FIRST_A = "I can look up orders and answer questions about shipping."
RESOURCE = {"service.name": "faq-bot", "service.instance.id": "faq-bot-1"}


def _msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


@dataclass
class Turn:
    trace_id: str
    records: list[SpanRecord]
    conversation: int


@dataclass
class Scenario:
    first: list[Turn] = field(default_factory=list)  # every conversation's first turn, in time order
    second: list[Turn] = field(default_factory=list)  # the second turns, all after every first turn
    second_q: dict[int, str] = field(default_factory=dict)  # conversation -> its own second question


def turn(n: int, conversation: int, history: list[dict[str, Any]], answer: str, start_ns: int,
         conv_id: str | None, extra: dict[str, Any] | None = None, resource: dict[str, Any] | None = None) -> Turn:
    trace_id = f"{n + 1:032x}"
    common = {"gen_ai.conversation.id": conv_id} if conv_id else {}
    agent = SpanRecord(trace_id=trace_id, span_id=f"{2 * n + 1:016x}", name="invoke_agent faq",
                       start_ns=start_ns, end_ns=start_ns + 900, resource=dict(resource or RESOURCE),
                       attributes={"gen_ai.operation.name": "invoke_agent", **common, **(extra or {})})
    chat = SpanRecord(trace_id=trace_id, span_id=f"{2 * n + 2:016x}", name="chat m", parent_span_id=agent.span_id,
                      start_ns=start_ns + 100, end_ns=start_ns + 800, resource=dict(resource or RESOURCE),
                      attributes={"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                                  "gen_ai.request.model": "m", **common,
                                  "gen_ai.input.messages": json.dumps(history),
                                  "gen_ai.output.messages": json.dumps([{**_msg("assistant", answer),
                                                                         "finish_reason": "stop"}])})
    return Turn(trace_id, [agent, chat], conversation)


def lookalikes(conversations: int, continued: list[int], with_ids: bool, t0: int = 1_000_000_000) -> Scenario:
    """`conversations` conversations that all open with FIRST_Q / FIRST_A; those in `continued` get a second
    turn of their own (its own trace, the history resent) after every first turn has ended."""
    out = Scenario()
    n = 0
    for c in range(conversations):
        out.first.append(turn(n, c, [_msg("user", FIRST_Q)], FIRST_A, t0 + c * 1000,
                              f"conv-{c}" if with_ids else None))
        n += 1
    later = t0 + conversations * 1000 + 10_000
    for i, c in enumerate(continued):
        q = f"where is order {c}?"
        out.second_q[c] = q
        history = [_msg("user", FIRST_Q), _msg("assistant", FIRST_A), _msg("user", q)]
        out.second.append(turn(n, c, history, f"order {c} ships tomorrow", later + i * 1000,
                               f"conv-{c}" if with_ids else None))
        n += 1
    return out


def linked(conversations: int, t0: int = 1_000_000_000) -> Scenario:
    """Like `lookalikes` with every conversation continued, but the second turn resends no history: its
    agent span links to the first turn's trace, the only evidence that they are one conversation."""
    out = lookalikes(conversations, continued=[], with_ids=False, t0=t0)
    later = t0 + conversations * 1000 + 10_000
    for c, first in enumerate(out.first):
        q = f"where is order {c}?"
        out.second_q[c] = q
        second = turn(conversations + c, c, [_msg("user", q)], f"order {c} ships tomorrow", later + c * 1000, None)
        second.records[0].links = [Link(first.trace_id, first.records[0].span_id)]
        out.second.append(second)
    return out


def texts(envelope: dict[str, Any]) -> list[str]:
    """The texts of an envelope's user and assistant messages, in order."""
    return ["".join(p.get("content") or "" for p in m["parts"] if p.get("type") == "text")
            for m in envelope["messages"] if m["role"] in ("user", "assistant")]
