"""Pass 1 of `wt-otel import`: which records make up which session, without keeping the records.

Uncompressed OTLP protobuf dumps (a `.pb` request or the collector's length-prefixed stream) are
only scanned: per message, the trace id and conversation id of each record (`dumps.scan_message`);
the index keeps where the message is (file, offset, length), so pass 2 reads and decodes only the
messages of the sessions it builds. Every other format (JSON lines, documents, gzip) is decoded
once here and its records spill to a temporary SQLite file, as `SessionGrouper` does.

Sessions are grouped exactly as `SessionGrouper` groups them (a union-find over trace ids and
`conv:<id>` keys, groups ordered by their root, traces sorted), and every record keeps its arrival
position, so pass 2 hands `build_session` the same records in the same order. Memory grows with
the number of traces and messages, never with their bytes.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import tempfile
from collections import defaultdict
from dataclasses import dataclass

from wt_otel.ingest.dialects.common import conversation_id
from wt_otel.ingest.sessions import TraceUnion
from wt_otel.model.spans import LogRecord, SpanRecord

__all__ = ["DumpIndex", "Frame", "Group"]


@dataclass(frozen=True, slots=True)
class Frame:
    """One OTLP message of an uncompressed protobuf dump."""

    path: str
    offset: int
    length: int
    seq: int  # arrival position of its first record; its records are seq, seq + 1, ...
    logs: bool  # an ExportLogsServiceRequest (else traces)


@dataclass(slots=True)
class Group:
    """One session's records: where they are, not what they say."""

    index: int  # position in the output order (SessionGrouper's)
    traces: list[str]
    frames: list[int]  # indexes into DumpIndex.frames, ascending
    spilled: int  # bytes of its records in the spill file
    first: int  # arrival position of its first record: sessions that arrived together are read together


class DumpIndex:
    """Trace ids into sessions, with where each trace's records are."""

    def __init__(self, spill_dir: str | None = None) -> None:
        self._spill_dir = spill_dir
        self.spill_path: str | None = None
        self._db: sqlite3.Connection | None = None
        self._pending: list[tuple[int, str, bytes]] = []
        self._uf = TraceUnion()
        self._frames_of: dict[str, list[int]] = {}
        self._first: dict[str, int] = {}  # trace id -> arrival position of its first record
        self._spilled: dict[str, int] = {}  # trace id -> bytes of its spilled records
        self.frames: list[Frame] = []
        self.records = 0  # every record read, with or without a trace id

    # ----------------------------------------------------------------- grouping (a TraceUnion, as SessionGrouper)

    def _see(self, trace_id: str, conv: str | None, seq: int) -> None:
        if trace_id not in self._first:
            self._first[trace_id] = seq
        self._uf.find(trace_id)
        if conv:
            self._uf.union(trace_id, "conv:" + conv)

    # ----------------------------------------------------------------- input

    def add_frame(self, path: str, offset: int, length: int, logs: bool, count: int,
                  found: list[tuple[str, str | None]]) -> None:
        """A scanned message: `count` records, `found` the (trace id, conversation id) of those with a trace id."""
        fid = len(self.frames)
        self.frames.append(Frame(path, offset, length, self.records, logs))
        for pair in dict.fromkeys(found):  # each pair once, in order (a trace's spans mostly share a message)
            trace_id = pair[0]
            self._see(trace_id, pair[1], self.records)
            frames = self._frames_of.setdefault(trace_id, [])
            if not frames or frames[-1] != fid:
                frames.append(fid)
        self.records += count

    def add_record(self, record: SpanRecord | LogRecord) -> None:
        """A decoded record of a format that cannot be read again by offset: spilled to disk."""
        seq = self.records
        self.records += 1
        trace_id = record.trace_id
        if not trace_id:
            return
        self._see(trace_id, conversation_id(record.attributes), seq)
        blob = pickle.dumps(record, pickle.HIGHEST_PROTOCOL)
        self._spilled[trace_id] = self._spilled.get(trace_id, 0) + len(blob)
        self._pending.append((seq, trace_id, blob))
        if len(self._pending) >= 5000:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._db is None:
            fd, self.spill_path = tempfile.mkstemp(prefix="wt-otel-", suffix=".sqlite", dir=self._spill_dir)
            os.close(fd)
            self._db = sqlite3.connect(self.spill_path)
            self._db.execute("PRAGMA journal_mode=OFF")
            self._db.execute("PRAGMA synchronous=OFF")
            self._db.execute("CREATE TABLE rec (seq INTEGER PRIMARY KEY, trace_id TEXT, blob BLOB)")
        self._db.executemany("INSERT INTO rec VALUES (?, ?, ?)", self._pending)
        self._pending.clear()

    # ----------------------------------------------------------------- output

    def groups(self) -> list[Group]:
        """Every session's group, in SessionGrouper's order (by root key); the spill is committed and
        indexed, so pass 2 (other processes too) can read it."""
        self._flush()
        if self._db is not None:
            self._db.execute("CREATE INDEX rec_trace ON rec (trace_id)")
            self._db.commit()
        members: dict[str, list[str]] = defaultdict(list)
        for key in list(self._uf.parent):
            if not key.startswith("conv:"):
                members[self._uf.find(key)].append(key)
        out = []
        frames_of, spilled, first = self._frames_of, self._spilled, self._first
        for index, root in enumerate(sorted(members)):
            traces = members[root]
            if len(traces) == 1:  # the common case, without the sets and sums
                t = traces[0]
                out.append(Group(index, traces, list(frames_of.get(t, ())), spilled.get(t, 0), first[t]))
                continue
            traces.sort()
            frames = sorted({f for t in traces for f in frames_of.get(t, ())})
            out.append(Group(index, traces, frames, sum(spilled.get(t, 0) for t in traces),
                             min(first[t] for t in traces)))
        return out

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self.spill_path and os.path.exists(self.spill_path):
            os.unlink(self.spill_path)

    def __enter__(self) -> DumpIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
