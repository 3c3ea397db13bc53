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
import re
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from wt_otel.ingest import dialects
from wt_otel.ingest.diagnostics import diagnose
from wt_otel.ingest.dialects import agents, shape
from wt_otel.ingest.dialects.common import conversation_id
from wt_otel.ingest.flags import FEEDBACK_KEYS, FlagRules, default_rules
from wt_otel.ingest.joins import conversation_key, merge_continuations, span_facts
from wt_otel.ingest.keys import FLAG_KEYS
from wt_otel.ingest.messages import function_response
from wt_otel.model.parts import CONTRACT_A_PART_TYPES, is_placeholder, signature
from wt_otel.model.session import LLMCall, Session, ToolExecution
from wt_otel.model.spans import LogRecord, SpanRecord

__all__ = ["FLAG_KEYS", "SessionGrouper", "attach_logs", "build_session", "merge_continuations"]

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
    parent = {s.span_id: s.parent_span_id for s in spans}  # the span tree, for every rule below that walks it
    _wrappers_are_transcripts(parent, calls)
    if not session.witnessed_calls and not any(
            c.input_messages or c.output_messages or not c.is_transcript for c in calls):
        return None  # e.g. a one-span agent set-up trace: no conversation, no model call, no tool run
    trace_ids = list(dict.fromkeys(s.trace_id for s in spans))
    session.trace_ids = trace_ids
    session.linked_traces = sorted({link.trace_id for s in spans for link in s.links
                                    if link.trace_id and link.trace_id not in trace_ids})
    session.key = key or trace_ids[0]
    session.started_ns = min(s.start_ns for s in spans)
    session.ended_ns = max(s.end_ns for s in spans)
    session.service_name = next((s.service_name for s in spans if s.service_name), None)
    roots = [s for s in spans if not s.parent_span_id]
    session.root_span_id = roots[0].span_id if roots else spans[0].span_id
    session.conversation_id = next((c.conversation_id for c in calls if c.conversation_id), None) or next(
        (conversation_id(s.attributes) for s in spans if conversation_id(s.attributes)), None)
    instance = next((s.resource.get("service.instance.id") for s in spans if s.resource.get("service.instance.id")),
                    None)
    session.service_instance_id = str(instance) if instance is not None else None
    session.joined_by = ["trace"]
    if session.conversation_id:
        used = next((k for s in spans if (k := conversation_key(s.attributes))), None)
        session.joined_by.append(f"conversation_id:{used}" if used else "conversation_id")  # a dialect's own id
    else:  # a candidate for a content join (wt_otel.ingest.joins): who it ran for, and whether it has feedback
        session.user_id, session.feedback = span_facts(spans, FEEDBACK_KEYS)
        # traces without an id in one group: serve joined them as content continuations (import joins built
        # sessions instead, `merge_continuations`); said from the records, so a render on demand says it too
        linking = {s.trace_id for s in spans for link in s.links if link.trace_id in trace_ids
                   and link.trace_id != s.trace_id}
        session.joined_by += [("link:" if t in linking else "continuation:") + t for t in trace_ids[1:]]
    (flag_rules or default_rules()).apply(session, spans)
    _gemini_function_responses(calls)
    under = {ex.span_id: _ancestors(ex.span_id, parent) for ex in session.witnessed_calls}  # each tool span's
    _drop_rewrapped(session, under)
    loops = _tool_loops_in_calls(session, under, parent, calls)
    _fill_from_calls(session, calls, loops, _text_protocol_runs(session, under, parent, calls, loops))
    _user_turns_from_agent_inputs(session, calls, parent)
    _fix_tool_call_ids(session)
    _correlate(session)
    _final_answer_tools(session)
    _check_content(session)
    diagnose(session, spans, calls, unread)
    return session


def _user_turns_from_agent_inputs(session: Session, calls: list[LLMCall], parent: dict[str, str | None]) -> None:
    """The user turn is what the user gave the agent: where a framework wrapped an agent's or task's input in
    a prompt of its own ("Current Task: <input> ... Answer their question"), the model calls show the
    prompt. On evidence only: the prompt is the last user message of the first model call that the agent
    span encloses, and it holds the agent's input. Said as a warning, since the prompt the model saw is
    not what a replay injects."""
    asked = {c.span_id: words for c in calls if c.is_transcript and (words := c.agent_input or _lone_ask(c))
             and len(words.strip()) >= 3}
    agents = [c for c in calls if c.span_id in asked]
    if not agents:
        return
    model_calls = sorted((c for c in calls if not c.is_transcript), key=lambda c: c.start_ns)
    lineage = {c.span_id: _ancestors(c.span_id, parent) for c in model_calls}
    prompts: dict[str, str] = {}  # the prompt text -> the user's words in it
    # the outermost agent first: a crew's kickoff input, not the task description its task filled in from it
    for agent in sorted(agents, key=lambda c: len(_ancestors(c.span_id, parent))):
        first = next((c for c in model_calls if agent.span_id in lineage[c.span_id]), None)
        users = [m for m in first.input_messages if m["role"] == "user"] if first else []
        texts = [p for p in users[-1]["parts"] if p.get("type") == "text"] if users else []
        prompt = texts[0].get("content") or "" if len(texts) == 1 else ""
        words = asked[agent.span_id].strip()
        if prompt != words and words in prompt:
            prompts.setdefault(prompt, words)
    if not prompts:
        return
    for m in session.messages:
        texts = [p for p in m["parts"] if p.get("type") == "text"]
        if m["role"] == "user" and len(texts) == 1 and texts[0].get("content") in prompts:
            texts[0]["content"] = prompts[texts[0]["content"]]
    for prompt, words in prompts.items():
        session.warnings.append(f"user turn {words[:60]!r} is the agent's input; the model was given a prompt "
                                f"built from it ({len(prompt)} characters), which a replay does not inject")


def _lone_ask(view: LLMCall) -> str | None:
    """What a run was asked when its span logs one user message (a crew's kickoff inputs as JSON text:
    their one value)."""
    if len(view.input_messages) != 1 or view.input_messages[0]["role"] != "user":
        return None
    parts = view.input_messages[0]["parts"]
    return shape.plain_text(parts[0].get("content")) if len(parts) == 1 and parts[0].get("type") == "text" else None


def _ancestors(span_id: str, parent: dict[str, str | None]) -> set[str]:
    out: set[str] = set()
    up = parent.get(span_id)
    while up and up not in out and len(out) < 256:
        out.add(up)
        up = parent.get(up)
    return out


_DONE_TOOL = re.compile(r"^(?:finish(?:ed)?|done|complete[d]?|task[_ ]?complete|end[_ ]?turn)$", re.IGNORECASE)
_FINAL_TOOL = re.compile(r"^(?:final[_ ]?(?:answer|result|response|output)|submit[_ ]?(?:final[_ ]?)?answer)$",
                         re.IGNORECASE)


def _final_answer_tools(session: Session) -> None:
    """A final answer given through a tool (smolagents' `final_answer`, an output tool) is the assistant's
    answer: the call becomes the answer's text, its result and its tool span go (no tool was run for it).
    Only when it ends its turn and its arguments hold one text."""
    messages = session.messages
    dropped: set[str] = set()
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        for j, p in enumerate(m["parts"]):
            name = str(p.get("name") or "")
            if p.get("type") != "tool_call" or not (_FINAL_TOOL.match(name) or _DONE_TOOL.match(name)):
                continue
            text = _one_text(p.get("arguments")) if _FINAL_TOOL.match(name) else None
            later = messages[i + 1:]
            end = next((k for k, x in enumerate(later) if x["role"] == "user"), len(later))
            answered_later = any(x["role"] == "assistant" and any(q.get("type") == "text" for q in x["parts"])
                                 for x in later[:end])
            calls_later = any(q.get("type") == "tool_call" for q in m["parts"][j + 1:])
            if text is None and not p.get("arguments") and answered_later and not calls_later and not any(
                    q.get("type") == "tool_call" for x in later[:end] for q in x["parts"]):
                # a no-argument `finish` that only marks the end of a run whose answer follows (DSPy ReAct):
                # the call goes with its result (below)
                dropped.add(p["id"])
                said = f"tool {name!r} only marked the end of the run (no arguments, the answer follows): dropped"
                if said not in session.warnings:
                    session.warnings.append(said)
                continue
            if text is None or answered_later or calls_later:
                continue
            m["parts"][j] = {"type": "text", "content": text}
            dropped.add(p["id"])
            said = f"the final answer was given through tool {p.get('name')!r}: read as the assistant's answer"
            if said not in session.warnings:
                session.warnings.append(said)
    if not dropped:
        return
    for m in messages:
        m["parts"] = [p for p in m["parts"] if not (p.get("type") in ("tool_call", "tool_call_response")
                                                    and p.get("id") in dropped)]
    session.messages = [m for m in messages if m["parts"]]
    session.witnessed_calls = [w for w in session.witnessed_calls if w.tool_call_id not in dropped]


def _one_text(args: Any) -> str | None:
    if isinstance(args, str):
        return args or None
    if isinstance(args, dict):
        texts = [v for v in args.values() if isinstance(v, str) and v.strip()]
        return texts[0] if len(texts) == 1 and len(args) == 1 else None
    return None


_GEMINI = ("gemini", "google", "vertex", "gcp.")


def _gemini_function_responses(calls: list[LLMCall]) -> None:
    """A Gemini model call's tool results are `FunctionResponse.response` objects however an instrumentation
    logs them (the parts model, here): the value the tool returned is inside (`messages.function_response`)."""
    for c in calls:
        if (c.provider or "").startswith(_GEMINI):
            for m in c.input_messages:
                for p in m["parts"]:
                    if p.get("type") == "tool_call_response":
                        p["response"] = function_response(p.get("response"))


def _wrappers_are_transcripts(parent: dict[str, str | None], calls: list[LLMCall]) -> None:
    """A model call read by shape that encloses another model call is a wrapper (an SDK's `generateText`
    around its `doGenerate`, a framework's LLM step around the client's span): the same evidence, so it
    counts as a transcript view, never as a second call."""
    if not any(c.dialect == "shape" and not c.is_transcript for c in calls):
        return
    enclosing = _enclosing(parent, calls)
    for c in calls:
        if c.dialect == "shape" and not c.is_transcript and c.span_id in enclosing:
            c.is_transcript = True


def _enclosing(parent: dict[str, str | None], calls: list[LLMCall]) -> set[str]:
    """Ids of the spans that enclose a model call (its ancestors)."""
    return {a for c in calls if not c.is_transcript for a in _ancestors(c.span_id, parent)}


def _drop_rewrapped(session: Session, under: dict[str, set[str]]) -> None:
    """A tool span inside another of the same tool and arguments is the same call wrapped twice (an
    instrumentation that re-wraps a function on every request): it counts once, the outermost."""
    by_span = {ex.span_id: ex for ex in session.witnessed_calls if ex.span_id}
    twice = {ex.span_id for ex in session.witnessed_calls if any(
        (outer := by_span.get(a)) is not None and outer.tool_name == ex.tool_name and outer.args == ex.args
        for a in under.get(ex.span_id, ()))}
    if twice:
        session.witnessed_calls = [ex for ex in session.witnessed_calls if ex.span_id not in twice]


def _tool_loops_in_calls(session: Session, under: dict[str, set[str]], parent: dict[str, str | None],
                         calls: list[LLMCall]) -> dict[str, list[dict[str, Any]]]:
    """The tool rounds a model call ran inside itself, by span id of the call.

    An SDK that runs the tool loop for the caller (automatic function calling) may be traced as one model
    call per user turn: its input is what the caller passed, its output the final text, and the turn's
    calls are only the tool spans under it (`under`: each tool span's ancestors). Those go between the
    two, one round per call in time order (calls whose spans overlap: one round)."""
    if not session.witnessed_calls:
        return {}
    enclosing = _enclosing(parent, calls)
    loops: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        if call.is_transcript or call.span_id in enclosing or any(
                p.get("type") == "tool_call" for m in call.output_messages for p in m.get("parts", [])):
            continue
        messages = _rounds(ex for ex in session.witnessed_calls if call.span_id in under.get(ex.span_id, ()))
        if messages:
            loops[call.span_id] = messages
    return loops


def _rounds(executions: Iterable[ToolExecution]) -> list[dict[str, Any]]:
    """Witnessed tool calls as the turn's tool rounds, in time order: calls whose spans overlap are one round
    (one assistant message asking for them all), each answered by a tool message."""
    rounds: list[list[ToolExecution]] = []
    for ex in sorted(executions, key=lambda ex: ex.start_ns):
        if rounds and ex.start_ns < max(e.end_ns for e in rounds[-1]):
            rounds[-1].append(ex)
        else:
            rounds.append([ex])
    messages: list[dict[str, Any]] = []
    for batch in rounds:
        messages.append({"role": "assistant", "parts": [
            {"type": "tool_call", "id": ex.tool_call_id or "", "name": ex.tool_name, "arguments": ex.args}
            for ex in batch]})
        messages += [{"role": "tool", "parts": [
            {"type": "tool_call_response", "id": ex.tool_call_id or "",
             "response": ex.error if ex.error is not None and ex.result is None else ex.result,
             **({"is_error": True} if ex.error is not None else {})}]} for ex in batch]
    return messages


def _text_protocol_runs(session: Session, under: dict[str, set[str]], parent: dict[str, str | None],
                        calls: list[LLMCall],
                        loops: dict[str, list[dict[str, Any]]]) -> list[LLMCall] | None:
    """Each run's ask, tool rounds and answer, where the model calls speak a text protocol of their own.

    Some frameworks never give the model a tool: it answers in a text format (DSPy's `[[ ## next_tool_name ## ]]`
    fields) that the framework parses and acts on. Then no model call holds a structured tool call although
    tool spans ran, and the model calls' messages are templates, not the conversation. On that evidence only
    (tools ran, no model call made a structured call, and every tool span ran inside a run that logs its ask
    and its answer and ran the model), the transcript is the outermost runs': ask, the tool spans under it,
    answer. Said as a warning; what the model saw stays in the session's model calls. Without such runs (and
    where no model call ran the tools itself, `loops`) the templates stay the transcript: said too."""
    models = [c for c in calls if not c.is_transcript]
    if not session.witnessed_calls or not models or any(
            p.get("type") == "tool_call" for c in models for m in c.input_messages + c.output_messages
            for p in m["parts"]):
        return None
    runs = {c.span_id: c for c in calls if c.is_transcript and c.input_messages and c.output_messages}
    outer = [c for c in runs.values() if not _ancestors(c.span_id, parent) & runs.keys()]
    model_lineage = [_ancestors(m.span_id, parent) for m in models]
    if not outer or not all(any(r.span_id in up for r in outer) for up in under.values()) or not all(
            any(r.span_id in up for up in model_lineage) for r in outer):
        if not loops and any(c.input_messages or c.output_messages for c in models):
            session.warnings.append(
                f"no model call made a structured tool call, yet {len(session.witnessed_calls)} tool span(s) ran, "
                "and no run span logs both its ask and its answer: the transcript is what the model calls logged "
                "(a framework's text protocol reads as its templates); the tool calls are only in witnessed_calls")
        return None
    views = []
    for run in sorted(outer, key=lambda c: c.start_ns):
        inside = [ex for ex in session.witnessed_calls if run.span_id in under[ex.span_id]]
        views.append(LLMCall(span_id=run.span_id, trace_id=run.trace_id, dialect=run.dialect, start_ns=run.start_ns,
                             end_ns=run.end_ns, input_messages=run.input_messages + _rounds(inside),
                             output_messages=run.output_messages))
    session.warnings.append(
        f"no model call made a structured tool call, yet {len(session.witnessed_calls)} tool span(s) ran: the "
        f"model speaks a text protocol of its framework; the transcript is each run's ask, the tool spans under "
        f"it and its answer, not the templated prompts the model saw")
    return views


def _fill_from_calls(session: Session, calls: list[LLMCall], loops: dict[str, list[dict[str, Any]]] | None = None,
                     runs: list[LLMCall] | None = None) -> None:
    inference = [c for c in calls if not c.is_transcript]
    session.llm_calls = inference
    transcript: list[dict[str, Any]] = []
    sigs: list[tuple] = []
    # Model calls first, in time order; spans that log a whole run (agent spans) last: they repeat
    # what the model calls said and only add what no model call carried. (`runs`: the runs' own views
    # instead, where the model calls speak a text protocol.)
    spoke = any(c.input_messages or c.output_messages for c in inference)
    for call in runs if runs is not None else sorted(calls, key=lambda c: (c.is_transcript, c.start_ns)):
        history: list[dict[str, Any]] = []
        hsigs: list[tuple] = []
        inside = (loops or {}).get(call.span_id, [])
        for m in call.input_messages + inside + call.output_messages:  # each message's signature, once
            if m.get("role") != "system":
                sig = _sig(m)
                if not any(sig[1]):
                    continue
                if _calls_only(sig) and history and hsigs[-1][0] == "assistant":
                    # one model response's parallel calls, as separate items (Responses API, some
                    # instrumentations) or as one message (Chat Completions): the same turn, one message
                    history[-1] = {**history[-1], "parts": [*history[-1].get("parts", []), *m.get("parts", [])]}
                    hsigs[-1] = _sig(history[-1])
                    continue
                history.append(m)
                hsigs.append(sig)
        if call.is_transcript and not spoke and hsigs and all(h[0] == "assistant" for h in hsigs):
            continue  # a run's answers alone, where no model call logged content: no conversation to keep
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
        for i in range(n):
            transcript[i] = _with_ids(transcript[i], history[i])
        transcript.extend(history[n:])
        sigs.extend(hsigs[n:])
        return
    if _contains(sigs, hsigs) or _subsequence(sigs, hsigs):
        # an older or partial view (a retry, a sub-agent, an agent span's input + final answer): nothing new
        return
    if extend_only:
        if sigs and sigs[-1][0] == "tool" and all(h[0] == "assistant" and h[1] and h[1][0][0] == "text"
                                                  for h in hsigs):
            # a run's final answer that no model call logged (a streamed reply without choice events)
            transcript.extend(history)
            sigs.extend(hsigs)
        return
    # A lossy or windowed view (an app that resends only the texts, an instrumentation that drops
    # tool items from the input): the longest head of this history already in the transcript, in
    # order, is the same evidence; only what follows it is new.
    k = _subsequence_head(sigs, hsigs)
    transcript.extend(history[k:])
    sigs.extend(hsigs[k:])


def _with_ids(seen: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """`seen` with the tool-call ids that a later view of the same message gives and it lacks (a response
    logged in a legacy form without ids, the next request's history with them)."""
    if seen.get("role") != "assistant":  # only an assistant message holds tool calls (most messages: not)
        return seen
    parts, later = seen.get("parts", []), again.get("parts", [])
    if len(parts) != len(later):
        return seen
    pairs = list(zip(parts, later, strict=True))
    if not any(p.get("type") == "tool_call" and not p.get("id") and q.get("id") for p, q in pairs):
        return seen
    return {**seen, "parts": [{**p, "id": q["id"]} if p.get("type") == "tool_call" and not p.get("id")
                              and q.get("id") else p for p, q in pairs]}


def _calls_only(sig: tuple) -> bool:
    """An assistant message that holds tool calls and nothing else."""
    return sig[0] == "assistant" and all(p[0] == "tool_call" for p in sig[1])


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
                    seed = f"{session.key}/{mi}/{pi}/{part.get('name')}"  # trace text: a lone surrogate too
                    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()
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
            # the call with the same arguments (concurrent calls of one tool end in any order), else the next
            part = queue.pop(next((i for i, p in enumerate(queue) if p.get("arguments") == ex.args), 0))
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
            if (not ex.args_decoded or not isinstance(ex.args, dict) or (not ex.args and call_part.get("arguments"))
                    or (shape.is_schema(ex.args) and ex.args != call_part.get("arguments"))) \
                    and isinstance(call_part.get("arguments"), dict) and not call_part.get("arguments_undecodable"):
                # (a tool span that logs the tool's parameter schema where the arguments go: OpenInference's
                # GenAI-semconv mode)
                ex.args, ex.args_decoded = call_part["arguments"], True
            if ex.result is None and call_part["id"] in responses:
                ex.result = responses[call_part["id"]].get("response")
            elif call_part["id"] in responses and _wraps(ex.result, responses[call_part["id"]].get("response")):
                # an SDK's `{"result": <what the tool returned>}` around the value the model was given
                ex.result = responses[call_part["id"]].get("response")
            asked = call_part.get("arguments")
            if isinstance(ex.args, dict) and isinstance(asked, dict) and asked and ex.args != asked and (
                    _positional(ex.args) or asked in ex.args.values()) and not call_part.get("arguments_undecodable"):
                # a decorator's `{"args": [...], "kwargs": {}}` (the names are in the model's call), or a framework's
                # envelope holding exactly the arguments the model asked for (`{"kwargs": {...}, "flag": true}`)
                ex.args, ex.args_decoded = asked, True
        if not ex.args_decoded:
            session.warnings.append(
                f"arguments of witnessed call {ex.tool_name} (span {ex.span_id}) are not JSON; kept as a string")


_WRAPPER_KEYS = frozenset({"result", "output", "return", "value", "content", "response"})


def _wraps(outer: Any, inner: Any) -> bool:
    """`outer` is a one-key wrapper around exactly `inner` (never a guess: the other evidence must agree)."""
    return (isinstance(outer, dict) and len(outer) == 1 and next(iter(outer)) in _WRAPPER_KEYS
            and inner is not None and next(iter(outer.values())) == inner)


def _positional(args: dict[str, Any]) -> bool:
    return "args" in args and isinstance(args["args"], list) and set(args) <= {"args", "kwargs"} and (
        not args.get("kwargs"))


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
