"""Several data dirs read as one: the sessions of N `wt-otel serve` instances behind a load balancer.

Each instance keeps its own data dir, so a conversation whose traces were routed to different instances is
written as one part per instance, each a session of its own. The merged view lists every session of every
dir with the dir it lives in, and finds such splits instead of merging them silently (a merge would have to
pick which part's flag, slug and revision win) or dropping one (a part would vanish from review):

    view = SessionStore.merged([dir_a, dir_b])   # NotADataDir for a dir without sessions.ndjsonl
    view.list()                                  # [Located(data_dir, stored)], dir by dir, index order within
    view.splits()                                # [Split]: parts of one conversation in different dirs

Evidence of a split, cheapest first:

- from the index lines alone: the same session key, a trace id or a conversation id in more than one dir
  (a trace whose spans went to two instances; a conversation id under trace-id routing);
- with `content=True` (the default): the join rule of `ingest/joins.py`, run over the sessions of every dir
  that have no conversation id, in time order. A session that continues another dir's session (it resends
  that session's whole transcript and adds to it, or its spans link to that session's trace) is the same
  conversation split across instances: what conversation-keyed routing cannot keep together, because there
  is no id to route on. This builds each such session (from its segments or records), so it costs what
  `sessions render` costs per session without writing anything.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wt_otel.ingest.joins import ContinuationIndex, compared, tail_of
from wt_otel.ingest.sessions import TraceUnion
from wt_otel.model.session import Session

__all__ = ["Located", "MergedView", "Split"]


class StoredSession(Protocol):
    """What the view reads of `store.StoredSession` (not imported: the store imports this module)."""

    @property
    def key(self) -> str: ...
    @property
    def slug(self) -> str: ...
    @property
    def entry(self) -> dict[str, Any]: ...
    def to_dict(self) -> dict[str, Any]: ...


class SessionStore(Protocol):
    """What the view reads of one data dir's `store.SessionStore`."""

    root: Path
    problems: list[str]

    def list(self) -> list[Any]: ...
    def session(self, stored: Any) -> Session: ...


@dataclass(frozen=True)
class Located:
    """One session of the merged view and the data dir it lives in."""

    data_dir: Path
    stored: StoredSession

    @property
    def where(self) -> str:
        return f"{self.data_dir}: {self.stored.slug}"

    def to_dict(self) -> dict[str, Any]:
        return {"data_dir": str(self.data_dir), **self.stored.to_dict()}


@dataclass
class Split:
    """Sessions in different data dirs that are parts of one conversation, and the evidence for it."""

    parts: list[Located]
    evidence: list[str] = field(default_factory=list)  # e.g. "conversation conv-7", "continuation of trace T"

    @property
    def data_dirs(self) -> list[Path]:
        return list(dict.fromkeys(p.data_dir for p in self.parts))

    def describe(self) -> str:
        """`split across 2 data dirs (conversation conv-7): dir-a: slug-1; dir-b: slug-2`."""
        return (f"split across {len(self.data_dirs)} data dirs ({'; '.join(self.evidence)}): "
                + "; ".join(p.where for p in self.parts))


class MergedView:
    """The sessions of several data dirs (each through its own `SessionStore`), read together."""

    def __init__(self, stores: Sequence[SessionStore]) -> None:
        roots = [s.root.resolve() for s in stores]
        if len(set(roots)) != len(roots):
            raise ValueError("a data dir is named twice: " + ", ".join(
                str(s.root) for s, r in zip(stores, roots, strict=True) if roots.count(r) > 1))
        self.stores = list(stores)
        self.problems: list[str] = []  # what reading found: bad index lines, sessions that could not be compared
        for store in self.stores:
            self.problems += [f"{store.root}: {p}" for p in store.problems]

    def list(self) -> list[Located]:
        """Every session of every dir (its latest revision there), dir by dir in the order given."""
        return [Located(store.root, stored) for store in self.stores for stored in store.list()]

    def splits(self, *, content: bool = True) -> builtins.list[Split]:
        """The conversations split across dirs (the module docstring); each session is in at most one Split."""
        parts = self.list()
        union = TraceUnion()  # over the sessions' places in `parts`, as text
        evidence: dict[tuple[int, int], list[str]] = {}  # (session, session) in different dirs -> why

        def join(a: int, b: int, why: str) -> None:
            union.union(str(a), str(b))
            if parts[a].data_dir != parts[b].data_dir:
                evidence.setdefault((min(a, b), max(a, b)), []).append(why)

        seen: dict[str, int] = {}
        for i, p in enumerate(parts):
            entry = p.stored.entry
            shared = [f"session key {p.stored.key}"]
            shared += [f"trace {t}" for t in entry.get("trace_ids") or [] if isinstance(t, str)]
            if entry.get("conversation_id"):
                shared.append(f"conversation {entry['conversation_id']}")
            for what in dict.fromkeys(shared):
                first = seen.setdefault(what, i)
                if first != i:
                    join(first, i, what)
        if content:
            for a, b, why in self._continuations(parts):
                join(a, b, why)
        groups: dict[int, list[int]] = {}
        for i in range(len(parts)):
            groups.setdefault(int(union.find(str(i))), []).append(i)
        reasons: dict[int, list[str]] = {}
        for (a, _), ws in sorted(evidence.items()):
            reasons.setdefault(int(union.find(str(a))), []).extend(ws)
        out = []
        for root, members in groups.items():
            if len({parts[i].data_dir for i in members}) < 2:
                continue
            whys = list(dict.fromkeys(reasons.get(root, [])))
            keys = {w.removeprefix("session key ") for w in whys if w.startswith("session key ")}
            whys = [w for w in whys if w.removeprefix("trace ") not in keys]  # a key is its first trace id
            out.append(Split([parts[i] for i in members], whys))
        return out

    def _continuations(self, parts: Sequence[Located]) -> Iterable[tuple[int, int, str]]:
        """(predecessor, continuation, why) for each session that continues a session of another dir under
        the join rule. Only sessions without a conversation id are built: the rule joins nothing else."""
        stores = {s.root: s for s in self.stores}
        built = []
        for i, p in enumerate(parts):
            if p.stored.entry.get("conversation_id"):
                continue
            try:
                session = stores[p.data_dir].session(p.stored)
            except ValueError as e:
                self.problems.append(f"{p.where}: not compared with the other data dirs: {e}")
                continue
            session.key = str(i)  # unique across dirs: the same key may be in two of them
            sigs = compared(session.messages)[0]
            session.messages, session.llm_calls, session.witnessed_calls = [], [], []  # the rule reads `sigs`
            built.append((session, sigs))
        index = ContinuationIndex()
        for session, sigs in sorted(built, key=lambda b: (b[0].started_ns, int(b[0].key))):
            decision = index.decide(session, sigs)
            if decision.predecessor is not None:
                index.remove(decision.predecessor.key)
                before, after = int(decision.predecessor.key), int(session.key)
                if parts[before].data_dir != parts[after].data_dir:
                    trace = session.trace_ids[0] if session.trace_ids else parts[after].stored.key
                    how = "links to" if decision.evidence == "link" else "continues the transcript of"
                    guess = " (the latest of several with that transcript)" if decision.warning else ""
                    yield before, after, f"trace {trace} {how} {parts[before].stored.slug}{guess}"
            tail = tail_of(session, sigs)
            if tail is not None:
                index.add(tail)
