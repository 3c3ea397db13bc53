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
from wt_otel.ingest.capture import capture_hint
from wt_otel.ingest.dialects.common import conversation_id
from wt_otel.ingest.flags import FlagRules, default_rules
from wt_otel.ingest.keys import FLAG_KEYS
from wt_otel.model.parts import CONTRACT_A_PART_TYPES, is_placeholder, signature
from wt_otel.model.session import LLMCall, Session, ToolExecution
from wt_otel.model.spans import LogRecord, SpanRecord

__all__ = ["FLAG_KEYS", "SessionGrouper", "attach_logs", "build_session"]

MAX_TRANSCRIPT_MESSAGES = 5000  # a hostile trace cannot make history merging quadratic forever


class SessionGrouper:
    """Collects records and yields them grouped by session, spilling to disk as it goes."""

    def __init__(self, spill_dir: str | None = None) -> None:
        fd, self._path = tempfile.mkstemp(prefix="wt-otel-", suffix=".sqlite", dir=spill_dir)
        os.close(fd)
        self._db = sqlite3.connect(self._path)
        self._db.execute("PRAGMA journal_mode=OFF")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("CREATE TABLE rec (trace_id TEXT, blob BLOB)")
        self._parent: dict[str, str] = {}  # union-find over trace ids and "conv:<id>" keys
        self._pending: list[tuple[str, bytes]] = []
        self.orphan_logs = 0

    def _find(self, x: str) -> str:
        parent = self._parent
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def _union(self, a: str, b: str) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)

    def add(self, record: SpanRecord | LogRecord) -> None:
        trace_id = record.trace_id
        if not trace_id:
            self.orphan_logs += 1
            return
        self._find(trace_id)
        conv = conversation_id(record.attributes)
        if conv:
            self._union(trace_id, "conv:" + conv)
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
        for key in list(self._parent):
            if not key.startswith("conv:"):
                members[self._find(key)].append(key)
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
    for span in spans:
        for obs in dialects.observe(span):
            if isinstance(obs, ToolExecution):
                session.witnessed_calls.append(obs)
            else:
                calls.append(obs)
            if obs.dialect not in session.dialects:
                session.dialects.append(obs.dialect)
    if not calls and not session.witnessed_calls:
        return None
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
    return session


def _fill_from_calls(session: Session, calls: list[LLMCall]) -> None:
    inference = [c for c in calls if not c.is_transcript]
    session.llm_calls = inference
    transcript: list[dict[str, Any]] = []
    sigs: list[tuple] = []
    for call in sorted(calls, key=lambda c: (c.is_transcript, c.start_ns)):
        history = [m for m in call.input_messages + call.output_messages if m.get("role") != "system"]
        _merge(transcript, sigs, history)
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


def _merge(transcript: list[dict[str, Any]], sigs: list[tuple], history: list[dict[str, Any]]) -> None:
    """Add a call's view of the history to the transcript without duplicating turns."""
    if len(transcript) >= MAX_TRANSCRIPT_MESSAGES:
        return
    hsigs = [_sig(m) for m in history]
    n, m = len(sigs), len(hsigs)
    if m == 0:
        return
    if hsigs[:n] == sigs:  # the common case: the same history, grown
        transcript.extend(history[n:])
        sigs.extend(hsigs[n:])
        return
    if _contains(sigs, hsigs):  # an older or partial view (a retry, a sub-agent): nothing new
        return
    overlap = next((k for k in range(min(n, m), 0, -1) if sigs[n - k:] == hsigs[:k]), 0)
    transcript.extend(history[overlap:])
    sigs.extend(hsigs[overlap:])


def _sig(message: dict[str, Any]) -> tuple:
    role, parts = signature(message)
    return role, tuple(p for p in parts if p != ("text", ""))


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
    for ex in session.witnessed_calls:
        if not ex.args_decoded:
            session.warnings.append(
                f"arguments of witnessed call {ex.tool_name} (span {ex.span_id}) are not JSON; kept as a string")


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
        session.content_captured = False
        session.warnings.append(f"message content was not captured: {capture_hint(session)}; "
                                "user turns and the final answer must be written by hand")
    for m_index, msg in enumerate(session.messages):
        for part in msg["parts"]:
            if part.get("arguments_undecodable"):
                session.warnings.append(
                    f"arguments of tool_call {part.get('name')!r} in message {m_index} are not JSON; kept as a string")
            if part.get("type") not in CONTRACT_A_PART_TYPES:
                session.omitted_parts.append({"message_index": m_index, "role": msg["role"], "part": part})
