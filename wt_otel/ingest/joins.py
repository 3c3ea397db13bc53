"""The one rule that joins traces into sessions on evidence, for `import` and `serve` alike.

Traces are one session when they share a trace id (parentage), or a conversation, session or thread id
(`keys.CONVERSATION_KEYS`; grouped before a session is built). A trace without any id whose spans link to
exactly one other trace (span links: the producer's own word) continues the earlier session that holds that
trace, whatever its transcript (the history they share, where it repeats, is taken once); links to several
other traces (a batch that fans in) join nothing, said in a warning. Beyond that, a trace without any id
joins an earlier session only as a *content continuation*, and only on these terms (issue 29: a
conversation that opened like another one must never be absorbed into it):

- its transcript extends the earlier session's whole transcript exactly (user and assistant texts and
  tool calls, in order) and adds at least one message; where one side carries no tool call at all (apps
  that resend only the texts, an instrumentation that logs a call's tool rounds only in the next one), the
  earlier session's texts must all match exactly, in order;
- the earlier session ended before it started, on the same service instance (`service.name`,
  `service.instance.id`) and for the same user (`user.id`, `enduser.id`, `langfuse.user.id`...);
- each continuation has one predecessor and each predecessor at most one continuation: the longest
  matching transcript, and among equal ones the latest to end;
- on a tie (several equal candidates) a candidate that carries its own flag or feedback is never taken:
  both stay apart, each with a warning saying why.

`ContinuationIndex` holds the candidates (a transcript digest per session); `merge_continuations` runs
the rule over a whole import; serve's assembler keeps an index of the sessions it still holds records
of. Each session records the evidence it was assembled on (`Session.joined_by`).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from wt_otel.ingest.keys import CONVERSATION_KEYS
from wt_otel.model.parts import signature
from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord

__all__ = ["USER_KEYS", "ContinuationIndex", "Decision", "Tail", "compared", "conversation_key",
           "merge_continuations", "span_facts", "tail_of"]

# Attributes that name the end user a trace ran for: two traces of different users never join on content.
USER_KEYS = ("user.id", "enduser.id", "langfuse.user.id", "gen_ai.user.id", "traceloop.association.properties.user_id",
             "ai.telemetry.metadata.userId", "ai.telemetry.metadata.user_id", "mlflow.trace.user",
             "metadata.mlflow.trace.user", "session.user.id")
_CONVERSATION_KEYS = frozenset(CONVERSATION_KEYS)
_USER_KEYS = frozenset(USER_KEYS)


def conversation_key(attrs: dict[str, Any]) -> str | None:
    """Which conversation key (in `CONVERSATION_KEYS` precedence) the attributes carry, for the evidence."""
    if attrs.keys().isdisjoint(_CONVERSATION_KEYS):
        return None
    return next((k for k in CONVERSATION_KEYS if attrs.get(k) is not None), None)


def span_facts(spans: Iterable[SpanRecord], feedback_keys: Iterable[str]) -> tuple[str | None, bool]:
    """(the user id, whether any span or event carries a feedback key) of a session's spans. Only sessions
    without a conversation id need these: they are the ones a content join looks at."""
    is_feedback = _feedback_matcher(tuple(feedback_keys))
    user: str | None = None
    feedback = False
    for span in spans:
        for attrs in (span.attributes, *(e.attributes for e in span.events)):
            if user is None and not attrs.keys().isdisjoint(_USER_KEYS):
                user = next(str(attrs[k]) for k in USER_KEYS if k in attrs)
            if not feedback and any(map(is_feedback, attrs)):
                feedback = True
    return user, feedback


@functools.lru_cache(maxsize=8)
def _feedback_matcher(patterns: tuple[str, ...]) -> Callable[[str], object]:
    """Whether a key matches any of the `fnmatch` patterns, as one compiled expression: `fnmatchcase` per key and
    pattern was a fifth of building a session without a conversation id (every one is built for the join)."""
    if not patterns:
        return lambda key: False
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match


def compared(messages: list[dict[str, Any]]) -> tuple[list[tuple], list[int]]:
    """The part of a transcript a join compares, exactly: each user or assistant message's text and tool
    calls (name, arguments; ids are left out: producers make them up per call), and where each is."""
    sigs: list[tuple] = []
    where: list[int] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("user", "assistant"):
            continue
        text, calls = [], []
        for p in signature(m)[1]:
            if p[0] == "text":
                text.append(p[1])
            elif p[0] == "tool_call":
                calls.append(p)
        joined = "".join(text).strip()
        if joined or calls:
            sigs.append((role, joined, tuple(calls)))
            where.append(i)
    return sigs, where


def _digests(sigs: list[tuple]) -> list[str]:
    """The digest of every prefix of `sigs` (element k: the first k + 1 messages), chained."""
    out: list[str] = []
    h = hashlib.blake2b(digest_size=16)
    for sig in sigs:
        h.update(repr(sig).encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        out.append(h.copy().hexdigest())
    return out


@dataclass(slots=True)
class Tail:
    """What the rule needs of a session that may be continued (serve keeps these, not sessions)."""

    key: str
    digest: str  # of its whole compared transcript
    length: int  # messages compared
    text_digest: str  # of its texts alone (user and assistant messages with text, in order)
    text_length: int
    calls: bool  # its transcript holds a tool call
    started_ns: int
    ended_ns: int
    identity: tuple[str | None, str | None, str | None]  # service.name, service.instance.id, user id
    marked: bool  # carries its own flag or feedback
    trace_id: str = ""
    trace_ids: tuple[str, ...] = ()  # every trace it holds: a later trace links to one of them


def tail_of(session: Session, sigs: list[tuple] | None = None) -> Tail | None:
    """The session as a candidate predecessor; None when it has a conversation id or nothing to compare."""
    if session.conversation_id:
        return None
    if sigs is None:
        sigs = compared(session.messages)[0]
    if not sigs:
        return None
    texts = _texts(sigs)[0]
    return Tail(session.key, _digests(sigs)[-1], len(sigs), _digests(texts)[-1] if texts else "", len(texts),
                any(s[2] for s in sigs),
                session.started_ns, session.ended_ns,
                _identity(session), session.flagged or session.feedback,
                session.trace_ids[0] if session.trace_ids else session.key, tuple(session.trace_ids))


def _identity(session: Session) -> tuple[str | None, str | None, str | None]:
    return session.service_name, session.service_instance_id, session.user_id


@dataclass(slots=True)
class Decision:
    predecessor: Tail | None = None
    cut: int = 0  # how many of the continuation's compared messages the predecessor already holds
    refused: Tail | None = None  # a flagged candidate on a tie: not taken, both warned
    warning: str | None = None  # why it was refused, or that the predecessor was the latest of equals
    evidence: str = "continuation"  # or "link": the continuation's spans link to the predecessor's trace


def _texts(sigs: list[tuple]) -> tuple[list[tuple], list[int]]:
    """The text of each compared message that has one, and its place in `sigs`."""
    out, where = [], []
    for i, (role, text, _) in enumerate(sigs):
        if text:
            out.append((role, text))
            where.append(i)
    return out, where


class ContinuationIndex:
    """Candidate predecessors by transcript digest. The caller bounds it (serve drops a session's tail when
    it no longer holds the session's records); `remove` once a predecessor is taken or gone."""

    def __init__(self) -> None:
        self._by_digest: dict[str, dict[str, Tail]] = {}
        self._by_text: dict[str, dict[str, Tail]] = {}
        self._by_key: dict[str, Tail] = {}
        self._by_trace: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: str) -> bool:
        return key in self._by_key

    def add(self, tail: Tail) -> None:
        self.remove(tail.key)
        self._by_key[tail.key] = tail
        self._by_digest.setdefault(tail.digest, {})[tail.key] = tail
        if tail.text_digest:
            self._by_text.setdefault(tail.text_digest, {})[tail.key] = tail
        for trace_id in tail.trace_ids:
            self._by_trace[trace_id] = tail.key

    def remove(self, key: str) -> Tail | None:
        tail = self._by_key.pop(key, None)
        if tail is not None:
            for trace_id in tail.trace_ids:
                if self._by_trace.get(trace_id) == key:
                    del self._by_trace[trace_id]
            for table, digest in ((self._by_digest, tail.digest), (self._by_text, tail.text_digest)):
                same = table.get(digest)
                if same is not None:
                    same.pop(key, None)
                    if not same:
                        del table[digest]
        return tail

    def decide(self, session: Session, sigs: list[tuple]) -> Decision:
        """The predecessor `session` continues under the rule (the module docstring), if any."""
        if session.conversation_id or not self._by_key:
            return Decision()
        if session.linked_traces:
            return self._linked(session, sigs)
        if len(sigs) < 2:
            return Decision()
        digests = _digests(sigs)
        for k in range(len(sigs) - 1, 0, -1):  # the longest matching transcript first
            same = self._by_digest.get(digests[k - 1])
            if same:
                found = self._pick(session, [t for t in same.values() if t.length == k], k)
                if found is not None:
                    return found
        texts, where = _texts(sigs)
        calls = [i for i, s in enumerate(sigs) if s[2]]
        text_digests = _digests(texts)
        for j in range(len(texts), 0, -1):  # a history resent without its tool calls: its texts, exactly
            cut = where[j - 1] + 1
            if cut >= len(sigs):
                continue
            resent_calls = bool(calls) and calls[0] < cut
            same = self._by_text.get(text_digests[j - 1])
            if same:
                found = self._pick(session, [t for t in same.values() if t.text_length == j
                                             and (not resent_calls or not t.calls)], cut)
                if found is not None:
                    return found
        return Decision()

    def _linked(self, session: Session, sigs: list[tuple]) -> Decision:
        """The session that holds the one trace `session`'s spans link to; its shared history is cut."""
        if len(session.linked_traces) > 1:
            return Decision(warning=f"trace {session.trace_ids[0] if session.trace_ids else session.key} links to "
                                    f"{len(session.linked_traces)} other traces: not joined to any (a fan-in "
                                    "link is no evidence of one conversation)")
        key = self._by_trace.get(session.linked_traces[0])
        tail = self._by_key.get(key) if key is not None else None
        if tail is None or tail.key == session.key:
            return Decision()
        digests = _digests(sigs)
        cut = tail.length if len(sigs) > tail.length and digests[tail.length - 1] == tail.digest else 0
        return Decision(predecessor=tail, cut=cut, evidence="link")

    @staticmethod
    def _pick(session: Session, same: list[Tail], cut: int) -> Decision | None:
        """Among candidates with the matching transcript: the latest to end before `session` started, for the
        same service instance and user; on a tie, never one that carries its own flag or feedback."""
        me = _identity(session)
        fits = [t for t in same if t.identity == me and t.ended_ns <= session.started_ns and t.key != session.key]
        if not fits:
            return None
        best = max(fits, key=lambda t: (t.ended_ns, t.started_ns, t.key))
        if len(fits) > 1 and best.marked:
            why = (f"{len(fits)} earlier sessions hold exactly the history that trace "
                   f"{session.trace_ids[0] if session.trace_ids else session.key} continues; the latest, "
                   f"{best.key}, carries its own flag or feedback, so they were not joined (a continuation "
                   "filed under the wrong conversation would move that flag): set a conversation id "
                   "(gen_ai.conversation.id, session.id) to join them")
            return Decision(refused=best, warning=why)
        if len(fits) > 1:  # a guess by the rule (the latest of equals), said so: `--strict` fails on it
            why = (f"trace {session.trace_ids[0] if session.trace_ids else session.key} was joined to {best.key}, "
                   f"the latest of {len(fits)} earlier sessions that hold exactly the history it continues: set a "
                   "conversation id (gen_ai.conversation.id, session.id) to join on evidence")
            return Decision(predecessor=best, cut=cut, warning=why)
        return Decision(predecessor=best, cut=cut)


def merge_continuations(sessions: list[Session]) -> list[Session]:
    """Join the sessions of an import that continue one another without a conversation id (the rule above).
    Every session's traces end up in exactly one of the sessions returned."""
    index = ContinuationIndex()
    out: dict[str, Session] = {}
    order: list[str] = []
    for s in sorted(sessions, key=lambda x: (x.started_ns, x.key)):
        sigs, where = compared(s.messages)
        decision = index.decide(s, sigs)
        if decision.refused is not None and decision.warning:
            s.warnings.append(decision.warning)
            other = out[decision.refused.key]
            if decision.warning not in other.warnings:
                other.warnings.append(decision.warning)
        if decision.predecessor is None and decision.refused is None and decision.warning:
            s.warnings.append(decision.warning)  # links that fan in: joined to nothing, said
        parent = out.get(decision.predecessor.key) if decision.predecessor else None
        if parent is None:
            out[s.key] = s
            order.append(s.key)
            tail = tail_of(s, sigs)
            if tail is not None:
                index.add(tail)
            continue
        index.remove(parent.key)
        merged = _absorb(parent, s, where[decision.cut - 1] + 1 if decision.cut else 0)
        merged.joined_by.append(f"{decision.evidence}:" + (s.trace_ids[0] if s.trace_ids else s.key))
        if decision.warning:
            merged.warnings.append(decision.warning)
        tail = tail_of(merged, sigs)  # the joined transcript compares as the continuation's
        if tail is not None:
            index.add(tail)
    return [out[k] for k in order]


def _absorb(parent: Session, child: Session, cut: int) -> Session:
    """`parent` followed by what `child` added after its first `cut` messages (the history they share)."""
    shift = len(parent.messages) - cut
    merged = parent
    merged.messages = parent.messages + child.messages[cut:]
    merged.omitted_parts += [{**o, "message_index": o["message_index"] + shift}
                             for o in child.omitted_parts if o["message_index"] >= cut]
    seen = {w.span_id for w in parent.witnessed_calls}
    merged.witnessed_calls += [w for w in child.witnessed_calls if w.span_id not in seen]
    merged.llm_calls += child.llm_calls
    merged.trace_ids += [t for t in child.trace_ids if t not in merged.trace_ids]
    merged.ended_ns = max(parent.ended_ns, child.ended_ns)
    merged.dialects += [d for d in child.dialects if d not in merged.dialects]
    names = {d["name"] for d in merged.tool_definitions}
    merged.tool_definitions += [d for d in child.tool_definitions if d["name"] not in names]
    if child.flagged and not merged.flagged:
        merged.flagged, merged.flag_ref, merged.flag_reason = True, child.flag_ref, child.flag_reason
    merged.flag_refs += [r for r in child.flag_refs if r not in merged.flag_refs]
    merged.feedback = parent.feedback or child.feedback
    answered = {p.get("id") for m in merged.messages for p in m["parts"] if p.get("type") == "tool_call_response"}
    answered |= {w.tool_call_id for w in merged.witnessed_calls if w.result is not None}
    diagnostics = [d for d in parent.diagnostics + child.diagnostics if d["kind"] != "tool_call_without_result"]
    notes = [w for w in parent.warnings + child.warnings if not any(w == d["message"] for d in diagnostics)
             and not w.startswith("tool call ")]
    merged.diagnostics, merged.warnings = [], []
    for d in diagnostics:
        if d not in merged.diagnostics:
            merged.diagnostics.append(d)
            merged.warnings.append(d["message"])
    for w in notes:
        if w not in merged.warnings:
            merged.warnings.append(w)
    for m in merged.messages:
        for p in m["parts"]:
            if p.get("type") == "tool_call" and p.get("id") not in answered:
                msg = (f"tool call {p.get('name')!r} ({p.get('id')}) has no result in the transcript and no tool "
                       "span witnessed one: the universe cannot answer it")
                merged.diagnostics.append({"kind": "tool_call_without_result", "message": msg})
                merged.warnings.append(msg)
    merged.content_captured = parent.content_captured and child.content_captured
    return merged
