"""From records to Sessions: grouping spans into sessions, and building each one.

Grouping: spans are grouped by trace id, then traces that share a
conversation id (`gen_ai.conversation.id`, `session.id`, association
properties...) are merged, because plain chat instrumentations make every LLM
call its own trace. `SessionGrouper` spills records to a temporary SQLite file
so an import's memory grows with the largest session, not with the dump.

Building (`build_session`): dialects turn spans into LLM calls and tool
executions; every chat span repeats the history, so the transcript is the
longest consistent history plus each call's output, with no duplicated turns.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from wt_otel.ingest import dialects
from wt_otel.ingest.diagnostics import diagnose
from wt_otel.ingest.dialects import agents
from wt_otel.ingest.dialects.common import conversation_id
from wt_otel.ingest.flags import FlagRules, default_rules
from wt_otel.ingest.keys import FLAG_KEYS
from wt_otel.model.parts import CONTRACT_A_PART_TYPES, is_placeholder, signature
from wt_otel.model.session import LLMCall, Session, ToolExecution
from wt_otel.model.spans import LogRecord, SpanRecord

__all__ = ["FLAG_KEYS", "SessionGrouper", "attach_logs", "build_session"]

MAX_TRANSCRIPT_MESSAGES = 5000  # a hostile trace cannot make history merging quadratic forever



class TraceUnion:
    """Union-find over trace ids and `conv:<id>` keys: traces that share a conversation id are one session.
    The smaller key becomes the root, so the groups do not depend on arrival order."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

class SessionGrouper:
    """Collects records and yields them grouped by session, spilling to disk as it goes."""

    def __init__(self, spill_dir: str | None = None) -> None:
        fd, self._path = tempfile.mkstemp(prefix="wt-otel-", suffix=".sqlite", dir=spill_dir)
        os.close(fd)
        self._db = sqlite3.connect(self._path)
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("CREATE TABLE rec (trace_id TEXT, blob BLOB)")
        self._uf = TraceUnion()
        self._pending: list[tuple[str, bytes]] = []
        self.orphan_logs = 0

    def add(self, record: SpanRecord | LogRecord) -> None:
        trace_id = record.trace_id
        if not trace_id:
            self.orphan_logs += 1
            return
        self._uf.find(trace_id)
        conv = conversation_id(record.attributes)
        if conv:
            self._uf.union(trace_id, "conv:" + conv)
        self._pending.append((trace_id, pickle.dumps(record, pickle.HIGHEST_PROTOCOL)))
        if len(self._pending) >= 5000:
            self._flush()

    def add_all(self, records: Iterable[SpanRecord | LogRecord]) -> None:
        for r in records:
            self.add(r)

    def _flush(self) -> None:
        self._db.executemany("INSERT INTO rec VALUES (?, ?)", self._pending)
        self._pending.clear()

    def groups(self) -> Iterator[list[SpanRecord | LogRecord]]:
        """Each session's records, in arrival order; sessions ordered by first trace id."""
        self._flush()
        self._db.execute("CREATE INDEX rec_trace ON rec (trace_id)")
        members: dict[str, list[str]] = defaultdict(list)
        for key in list(self._uf.parent):
            if not key.startswith("conv:"):
                members[self._uf.find(key)].append(key)
        for root in sorted(members):
            traces = sorted(members[root])
            rows: list[tuple[int, bytes]] = []
            for tid in traces:
                rows.extend(self._db.execute("SELECT rowid, blob FROM rec WHERE trace_id = ?", (tid,)))
            rows.sort()
            yield [pickle.loads(blob) for _, blob in rows]

    def close(self) -> None:
        self._db.close()
        if os.path.exists(self._path):
            os.unlink(self._path)

    def __enter__(self) -> SessionGrouper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def attach_logs(records: Iterable[SpanRecord | LogRecord]) -> list[SpanRecord]:
    """Spans with their log records attached as events (GenAI events live in logs)."""
    spans: dict[str, SpanRecord] = {}
    logs: list[LogRecord] = []
    for r in records:
        if isinstance(r, SpanRecord):
            if r.span_id in spans:  # the same span exported twice: keep the first
                continue
            spans[r.span_id] = r
        else:
            logs.append(r)
    for log in logs:
        span = spans.get(log.span_id or "")
        if span is None:
            # The log's span is not in the dump: a stand-in keeps its content.
            sid = log.span_id or "log" + hashlib.sha256(repr((log.trace_id, log.time_ns)).encode()).hexdigest()[:13]
            span = spans.setdefault(sid, SpanRecord(trace_id=log.trace_id or "", span_id=sid, name="gen_ai.events",
                                                    start_ns=log.time_ns, end_ns=log.time_ns,
                                                    resource=log.resource))
        span.events.append(log.as_event())
    return sorted(spans.values(), key=lambda s: (s.start_ns, s.end_ns))


def build_session(records: Iterable[SpanRecord | LogRecord], key: str | None = None,
                  flag_rules: FlagRules | None = None) -> Session | None:
    """One Session from all records of a session group; None when it holds no GenAI evidence.

    Flags come from `flag_rules` (the one rule of `wt_otel.ingest.flags`; default: its default rules).
    """
    spans = attach_logs(records)
    if not spans:
        return None
    session = Session(key=key or "")
    calls: list[LLMCall] = []
    unread: list[SpanRecord] = []
    for span in spans:
        found = dialects.observe(span)
        if not found:
            unread.append(span)
        for obs in found:
            if isinstance(obs, ToolExecution):
                session.witnessed_calls.append(obs)
            else:
                calls.append(obs)
            if obs.dialect not in session.dialects:
                session.dialects.append(obs.dialect)
        custom = agents.custom_span(span)
        if custom is not None:
            session.custom_spans.append(custom)
    if not session.witnessed_calls and not any(
            c.input_messages or c.output_messages or not c.is_transcript for c in calls):
        return None  # e.g. a one-span agent set-up trace: no conversation, no model call, no tool run
    trace_ids = list(dict.fromkeys(s.trace_id for s in spans))
    session.trace_ids = trace_ids
    session.key = key or trace_ids[0]
    session.started_ns = min(s.start_ns for s in spans)
    session.ended_ns = max(s.end_ns for s in spans)
    session.service_name = next((s.service_name for s in spans if s.service_name), None)
    roots = [s for s in spans if not s.parent_span_id]
    session.root_span_id = roots[0].span_id if roots else spans[0].span_id
    session.conversation_id = next((c.conversation_id for c in calls if c.conversation_id), None) or next(
        (conversation_id(s.attributes) for s in spans if conversation_id(s.attributes)), None)
    (flag_rules or default_rules()).apply(session, spans)
    _fill_from_calls(session, calls)
    _fix_tool_call_ids(session)
    _correlate(session)
    _check_content(session)
    diagnose(session, spans, calls, unread)
    return session


def _fill_from_calls(session: Session, calls: list[LLMCall]) -> None:
    inference = [c for c in calls if not c.is_transcript]
    session.llm_calls = inference
    transcript: list[dict[str, Any]] = []
    sigs: list[tuple] = []
    # Model calls first, in time order; spans that log a whole run (agent spans) last: they repeat
    # what the model calls said and only add what no model call carried.
    spoke = any(c.input_messages or c.output_messages for c in inference)
    for call in sorted(calls, key=lambda c: (c.is_transcript, c.start_ns)):
        history: list[dict[str, Any]] = []
        hsigs: list[tuple] = []
        for m in call.input_messages + call.output_messages:  # each message's signature, once
            if m.get("role") != "system":
                sig = _sig(m)
                if any(sig[1]):
                    history.append(m)
                    hsigs.append(sig)
        _merge(transcript, sigs, history, extend_only=call.is_transcript and spoke, hsigs=hsigs)
    session.messages = transcript
    for call in calls:
        if not session.system_instructions and call.system_instructions:
            session.system_instructions = call.system_instructions
        seen = {d["name"] for d in session.tool_definitions}
        session.tool_definitions.extend(d for d in call.tool_definitions if d["name"] not in seen)
    first = next((c for c in inference if c.model), None) or next((c for c in calls if c.model), None)
    if first:
        session.model, session.provider, session.sampler = first.model, first.provider, dict(first.sampler)
    if not session.provider:
        session.provider = next((c.provider for c in calls if c.provider), None)
    if inference and not any(c.content_captured for c in inference) and not transcript:
        session.content_captured = False


def _merge(transcript: list[dict[str, Any]], sigs: list[tuple], history: list[dict[str, Any]],
           extend_only: bool = False, hsigs: list[tuple] | None = None) -> None:
    """Add a call's view of the history to the transcript without duplicating turns. With
    `extend_only` (an agent span's summary where model calls spoke) only a consistent continuation
    is taken: a partial view is the same evidence, never concatenated."""
    if len(transcript) >= MAX_TRANSCRIPT_MESSAGES:
        return
    if hsigs is None:
        hsigs = [_sig(m) for m in history]
    n, m = len(sigs), len(hsigs)
    if m == 0:
        return
    if hsigs[:n] == sigs:  # the common case: the same history, grown
        transcript.extend(history[n:])
        sigs.extend(hsigs[n:])
        return
    if _contains(sigs, hsigs) or _subsequence(sigs, hsigs):
        # an older or partial view (a retry, a sub-agent, an agent span's input + final answer): nothing new
        return
    if extend_only:
        return
    # A lossy or windowed view (an app that resends only the texts, an instrumentation that drops
    # tool items from the input): the longest head of this history already in the transcript, in
    # order, is the same evidence; only what follows it is new.
    k = _subsequence_head(sigs, hsigs)
    transcript.extend(history[k:])
    sigs.extend(hsigs[k:])


def _subsequence_head(seq: list[tuple], sub: list[tuple]) -> int:
    """How many leading items of `sub` appear in `seq` in order (gaps allowed)."""
    k, i = 0, 0
    for item in sub:
        while i < len(seq) and seq[i] != item:
            i += 1
        if i == len(seq):
            break
        k, i = k + 1, i + 1
    return k


def merge_continuations(sessions: list[Session]) -> list[Session]:
    """Join sessions that continue one another without a conversation id.

    Runners that make each user turn its own trace (and carry no session id) resend the history:
    a session whose user and assistant texts begin with all of an earlier session's (same service,
    started after it ended) is that session, continued. The earlier one's messages are kept (later
    views may drop tool items). Two users who opened with the same words and got the same answer
    would be joined too: producers that carry a session id never are."""
    out: list[Session] = []
    for s in sorted(sessions, key=lambda x: x.started_ns):
        proj = _projection(s.messages)
        parent = next((p for p in reversed(out) if not p.conversation_id and not s.conversation_id
                       and p.service_name == s.service_name and p.ended_ns <= s.started_ns
                       and 0 < len(pp := _projection(p.messages)) < len(proj) and proj[:len(pp)] == pp), None)
        if parent is None:
            out.append(s)
            continue
        out.remove(parent)
        out.append(_absorb(parent, s))
    return out


def _projection(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], t) for m in messages if m.get("role") in ("user", "assistant")
            and (t := "".join(p.get("content") or "" for p in m["parts"] if p.get("type") == "text").strip())]


def _absorb(parent: Session, child: Session) -> Session:
    """`parent` followed by what `child` added after the history they share."""
    want, cut = len(_projection(parent.messages)), 0
    for i, m in enumerate(child.messages):
        if want == 0:
            break
        if _projection([m]):
            want -= 1
        cut = i + 1
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
    answered = {p.get("id") for m in merged.messages for p in m["parts"] if p.get("type") == "tool_call_response"}
    answered |= {w.tool_call_id for w in merged.witnessed_calls if w.result is not None}
    diagnostics = [d for d in parent.diagnostics + child.diagnostics if d["kind"] != "tool_call_without_result"]
    merged.diagnostics, merged.warnings = [], []
    for d in diagnostics:
        if d not in merged.diagnostics:
            merged.diagnostics.append(d)
            merged.warnings.append(d["message"])
    for m in merged.messages:
        for p in m["parts"]:
            if p.get("type") == "tool_call" and p.get("id") not in answered:
                msg = (f"tool call {p.get('name')!r} ({p.get('id')}) has no result in the transcript and no tool "
                       "span witnessed one: the universe cannot answer it")
                merged.diagnostics.append({"kind": "tool_call_without_result", "message": msg})
                merged.warnings.append(msg)
    merged.content_captured = parent.content_captured and child.content_captured
    return merged


def _sig(message: dict[str, Any]) -> tuple:
    """The signature, with empty texts dropped and adjacent texts joined (one producer's two text
    blocks are another's one string)."""
    role, parts = signature(message)
    out: list[tuple] = []
    for p in parts:
        if p == ("text", ""):
            continue
        if p[0] == "text" and out and out[-1][0] == "text":
            out[-1] = ("text", out[-1][1] + p[1])
        else:
            out.append(p)
    return role, tuple(out)


def _subsequence(seq: list[tuple], sub: list[tuple]) -> bool:
    """Every message of `sub` appears in `seq`, in order (gaps allowed)."""
    it = iter(seq)
    return all(any(x == s for x in it) for s in sub)


def _contains(seq: list[tuple], sub: list[tuple]) -> bool:
    if len(sub) > len(seq):
        return False
    first = sub[0]
    return any(seq[i] == first and seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


def _fix_tool_call_ids(session: Session) -> None:
    """Give every tool_call an id (deterministic) and pair id-less responses in order."""
    unanswered: list[dict[str, Any]] = []
    for mi, msg in enumerate(session.messages):
        for pi, part in enumerate(msg["parts"]):
            if part.get("type") == "tool_call":
                if not part.get("id"):
                    digest = hashlib.sha256(f"{session.key}/{mi}/{pi}/{part.get('name')}".encode()).hexdigest()
                    part["id"] = "call_wt_" + digest[:12]
                    part["id_synthesized"] = True
                unanswered.append(part)
            elif part.get("type") == "tool_call_response":
                if not part.get("id") and unanswered:
                    part["id"] = unanswered[0]["id"]
                    part["id_synthesized"] = True
                unanswered = [p for p in unanswered if p["id"] != part.get("id")]


def _correlate(session: Session) -> None:
    """Match witnessed calls to transcript tool_calls: by call id, else by tool name and order."""
    calls = [p for m in session.messages for p in m["parts"] if p.get("type") == "tool_call"]
    by_id = {p["id"]: p for p in calls}
    used: set[str] = set()
    for ex in session.witnessed_calls:
        if ex.tool_call_id and ex.tool_call_id in by_id:
            ex.correlation = "tool_call_id"
            used.add(ex.tool_call_id)
    queues: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in calls:
        if p["id"] not in used:
            queues[p.get("name") or ""].append(p)
    for ex in sorted(session.witnessed_calls, key=lambda e: e.start_ns):
        if ex.correlation == "tool_call_id":
            continue
        queue = queues.get(ex.tool_name)
        if queue:
            part = queue.pop(0)
            ex.correlation = "name_order"
            if not ex.tool_call_id or ex.tool_call_id not in by_id:
                ex.tool_call_id = part["id"]
    if calls:
        # a tool span that witnessed nothing and answers no tool call is bookkeeping, not a call
        # (Google ADK's "execute_tool (merged)" span beside the real ones of a parallel response)
        session.witnessed_calls = [ex for ex in session.witnessed_calls if ex.correlation != "none" or witnessed(ex)]
    responses = {p.get("id"): p for m in session.messages for p in m["parts"] if p.get("type") == "tool_call_response"}
    for ex in session.witnessed_calls:
        call_part = by_id.get(ex.tool_call_id or "")
        if call_part is not None and ex.correlation != "none":
            # Arguments: where the tool span logged no object (a framework's string or unknown wrapper), the
            # model call's tool call says what the agent asked for. Results: the tool span witnessed them,
            # else the transcript.
            if (not ex.args_decoded or not isinstance(ex.args, dict) or (not ex.args and call_part.get("arguments"))) \
                    and isinstance(call_part.get("arguments"), dict) and not call_part.get("arguments_undecodable"):
                ex.args, ex.args_decoded = call_part["arguments"], True
            if ex.result is None and call_part["id"] in responses:
                ex.result = responses[call_part["id"]].get("response")
        if not ex.args_decoded:
            session.warnings.append(
                f"arguments of witnessed call {ex.tool_name} (span {ex.span_id}) are not JSON; kept as a string")


def witnessed(ex: ToolExecution) -> bool:
    """Whether a tool span recorded anything about the call beyond its name."""
    return ex.result is not None or ex.error is not None or ex.args not in ({}, None, "")


def _check_content(session: Session) -> None:
    """Tell 'capture was off / redacted' apart from a real empty answer."""
    placeholders = sum(
        1 for m in session.messages for p in m["parts"]
        if p.get("type") == "text" and is_placeholder(p.get("content"))
    )
    if placeholders:
        session.content_captured = False
        session.warnings.append(
            f"{placeholders} message part(s) hold a redaction placeholder (e.g. '[redacted]'), not real content")
    if not session.messages and session.llm_calls:
        session.content_captured = False  # diagnose() says so, naming the setting
    for m_index, msg in enumerate(session.messages):
        for part in msg["parts"]:
            if part.get("arguments_undecodable"):
                session.warnings.append(
                    f"arguments of tool_call {part.get('name')!r} in message {m_index} are not JSON; kept as a string")
            if part.get("type") not in CONTRACT_A_PART_TYPES:
                session.omitted_parts.append({"message_index": m_index, "role": msg["role"], "part": part})
