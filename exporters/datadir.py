"""The data-dir store `wt-otel serve` and the in-app SpanProcessor write sessions to.

Layout:

    <data-dir>/
        sessions/<slug>/          the six files `wt-otel import` writes (incident.wtin.json,
                                  fixture.universe.json, llm.cassette.json, scenario.yaml,
                                  scorer.py, IMPORTED.md), always the latest revision
        sessions.ndjsonl          append-only index: one JSON line per written revision
        .lock                     held (flock) by the one process writing this data dir
        .session-keys.sqlite      the key table's spill-over (exporters/session_keys.py): derived from the
                                  index, deleted when the store closes, replaced at the next start

Index line: {"v": 1, "key", "slug", "revision", "complete", "trace_ids",
"conversation_id", "service", "started", "ended" (ISO 8601), "flagged",
"flag_ref", "flag_reason", "redacted", "path" (relative to the data dir),
"files", "rendered", "written_at"}. `rendered: false` (config `datadir.render:
flagged`, unflagged sessions): `sessions/<slug>/` holds only the session's
records (`records.otlp.pb`, exporters/rawfile.py) and its own fields
(`session.json`); `render()` (`wt-otel sessions render`) and `flag()` turn it
into the six files, as the inline render would have written them.

Where rendering happens (config `datadir.workers`): in worker processes
(exporters/render_pool.py) that render and write each directory while the
pipeline thread goes on; the store appends the index lines of finished jobs in
submission order, all lines of one tick with one fsync (`retry_deferred`, each
pipeline tick). A job the workers cannot finish (an exception, a worker that
dies or hangs) is quarantined as below. With `workers: 0`, `write()` does it all
in the calling thread, one fsync per session.

The last line of a key is its current revision; flagged sessions (incidents to
replay) are the lines with `flagged: true`.

Revisions replace: a late span rewrites `sessions/<slug>/` as revision N+1
(a superset of N, see processors/assembler.py) and appends a new index line;
the index keeps the history. Slugs are chosen once per session key and
never change (the key table, exporters/session_keys.py, is rebuilt from the
index at start; it holds the recent keys in memory and the rest in SQLite).

Crash safety: a revision directory is built beside its destination and
renamed into place (`fsutil.write_directory`); only then is its index line
appended, flushed and fsynced. So after kill -9: every `sessions/<slug>/`
is whole; a half-built directory is a dot-named temp that start-up deletes
(a replaced revision caught mid-swap is put back); the index may end with a
torn line, which `read_index` reports and start-up truncates (the shared
journal's rules, `wt_otel._util.journal`); a directory
whose line was torn or never appended is re-indexed from its envelope's
provenance. Nothing else is needed to resume.

Durability order (power loss, not just kill -9): every file of a revision
and the temp directory are fsynced before the rename, the sessions/ directory
after it, and only then is the index line written and fsynced, so the index
never names a directory that is not on disk.

Writes that fail (issue 13):
- the disk refuses them (ENOSPC, EDQUOT, EROFS, EIO): the session is kept in
  memory, deferred, and `on_health(reason)` tells serve to stop acknowledging
  exports (503 / UNAVAILABLE, `/healthz` degraded); `retry_deferred()` (every
  pipeline tick) writes them once space returns and reports health again;
- anything else (a session no writer can render): the session is quarantined
  with its records and the reason under `quarantine/<slug>-<n>/`, logged and
  counted (`wt_otel_sessions_quarantined_total`); nothing else is affected.
Start-up never fails on foreign or damaged entries: an index line with a bad
`revision`/`slug`, or a stray directory whose envelope is not ours, is reported
(`recovery`) and set aside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from wt_otel._util import safejson
from wt_otel._util.clock import iso_from_ns, utc_now_iso
from wt_otel._util.fsutil import fsync_dir, safe_slug, unique_slug, write_directory
from wt_otel._util.hooks import crash_point
from wt_otel._util.journal import Journal, encode_line
from wt_otel._util.terminal import shown
from wt_otel.components import CompletedSession, IndexedSession, StageContext, StageType
from wt_otel.exporters.rawfile import RAW_FILE, Unencodable, read_records
from wt_otel.exporters.render_pool import DEFAULT_TARGET, META_FILE, Outcome, RenderJob, RenderPool, job_files
from wt_otel.exporters.scenario_dir import render
from wt_otel.exporters.session_keys import INDEXED, RAW, RENDERED, KeyState, SessionKeys
from wt_otel.ingest.sessions import attach_logs, build_session
from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord, SpanRefs
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.segments import SEGMENTS as SEGMENT_DIR
from wt_otel.serve.segments import generation_of, generations_on_disk, spans_of

log = logging.getLogger("wt_otel.datadir")

INDEX = "sessions.ndjsonl"
ARCHIVE = "sessions.archive.ndjsonl"  # index lines of sessions whose spans retention removed (serve, at a start)
ARCHIVE_MIN_LINES = 10_000  # ... moved there only when at least this many, and at least half the index
SESSIONS = "sessions"
KEYS_DB = ".session-keys.sqlite"  # the key table past its hot keys (exporters/session_keys.py)
ENVELOPE = "incident.wtin.json"
QUARANTINE = "quarantine"
FLAG_REQUESTS = "flag-requests.ndjsonl"  # `wt-otel flag` while serve runs: taken by serve each tick
# errno values that mean "the disk cannot take it now", not "this session is broken"
DISK_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


class DataDirLocked(RuntimeError):
    """Another process is writing this data dir."""


@dataclass
class IndexRead:
    entries: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "sessions.ndjsonl:LINE: what is wrong"
    torn_tail: bool = False  # the last line has no newline: a write cut short (kill -9)

    def latest(self) -> dict[str, dict[str, Any]]:
        """The current revision of each session key."""
        out: dict[str, dict[str, Any]] = {}
        for e in self.entries:
            out[e["key"]] = e
        return out


def read_index(data_dir: Path) -> IndexRead:
    """Every valid index line; bad or torn lines are reported, never fatal."""
    read = Journal(Path(data_dir) / INDEX).read(_index_entry, what="not an index entry", loads=_index_loads)
    return IndexRead(entries=read.records, problems=read.problems, torn_tail=read.torn)


def _index_loads(raw: bytes) -> Any:
    """One index line. orjson (~3x the stdlib parser: a start reads every line, millions after months of serve),
    and the stdlib's verdict on anything orjson refuses (NaN, a lone surrogate, bad UTF-8), so a bad line is
    reported as before. orjson reads an integer past 64 bits as a float; no field of ours holds one."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def _index_entry(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("key"), str) or "slug" not in obj:
        raise ValueError("needs key and slug")
    slug, revision = obj["slug"], obj.get("revision", 1)
    if not isinstance(slug, str) or not slug or slug != safe_slug(slug, ""):
        raise ValueError(f"slug {slug!r} is not a safe directory name; line set aside")
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 1:
        raise ValueError(f"revision {revision!r} is not a positive integer; line set aside")
    return obj


@dataclass
class _Job:
    """A session revision handed to the render workers, until its index line is appended."""

    seq: int
    key: str
    slug: str
    revision: int
    done: CompletedSession
    render: RenderJob
    state: str = "pending"  # pending -> running -> ok | gone (quarantined or deferred)
    files: list[str] = field(default_factory=list)
    retried: bool = False


@dataclass
class Written:
    """What one `write` produced (also the index line, as `entry`)."""

    path: Path
    slug: str
    revision: int
    entry: dict[str, Any]


class DataDirStore:
    """Writes sessions into a data dir; one instance (one process) per data dir, thread-safe."""

    def __init__(self, data_dir: Path | str, metrics: Metrics | None = None, *, render: str = "all",
                 workers: int = 0, max_pending: int = 256, worker_target: str = DEFAULT_TARGET,
                 job_timeout: float = 120.0, keys_in_memory: int = 20_000, archive_gone: bool = False) -> None:
        if render not in ("all", "flagged"):
            raise ValueError(f"datadir.render must be all or flagged, not {render!r}")
        self.render_mode = render
        self.max_pending = max_pending
        self._pool: RenderPool | None = None
        self._jobs: OrderedDict[int, _Job] = OrderedDict()
        self._seq = 0
        self.on_committed: Callable[[CompletedSession, Written], None] | None = None  # the stage: later stages
        self.on_indexed: Callable[[list[dict[str, Any]]], None] | None = None  # the stage: say kept sessions' lines
        self.root = Path(data_dir)
        self.sessions = self.root / SESSIONS
        self.metrics = metrics or Metrics()
        self.sessions.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._lockfile = open(self.root / ".lock", "a+b")  # noqa: SIM115 - held for the store's lifetime
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lockfile.close()
            raise DataDirLocked(f"{self.root} is in use by another wt-otel process (lock {self.root}/.lock)") from None
        self.recovery: list[str] = []  # what start-up repaired, for the log
        self.on_health: Callable[[str | None], None] | None = None  # serve: stop/resume acknowledging
        self.write_dir = write_directory  # the seam fault-injection tests replace (ENOSPC, EIO)
        self.replayed_below = -1  # serve: segment positions below it are replayed from a previous run
        self.kept_by_log = False  # serve's segment log holds every record: at shutdown, unwritten ones wait there
        self._deferred: OrderedDict[str, tuple[Session, object]] = OrderedDict()
        self.degraded: str | None = None
        self._clean_temp_dirs()
        (self.root / f".{INDEX}.compact").unlink(missing_ok=True)  # an archiving start cut short (`_archive_gone`)
        self._index = Journal(self.root / INDEX)  # its descriptor is held for the store's lifetime
        dropped = self._index.repair()  # a torn last line (kill -9): its directory, if any, is re-indexed below
        if dropped:
            self.recovery.append(f"{INDEX}: dropped a torn last line of {dropped} bytes")
        # every key's slug, revision and how it is kept: from the index, streamed (it may hold millions of lines)
        self._keys = SessionKeys(keys_in_memory, path=self.root / KEYS_DB)
        # keys whose latest line was re-indexed from their directory (its own line was lost in a crash), at this
        # start or an earlier one: their records in the replay are theirs (`replayable`)
        self._recovered: set[str] = set()
        self._unindexed: list[dict[str, Any]] = []  # lines of sessions kept by reference: encoded at the next tick
        self._unindexed_low = -1  # the lowest `segment_pos` among them (-1: none); serve asks it per status
        # serve (`archive_gone`): the segment generations on disk, to count the lines of kept sessions whose
        # spans retention removed (None: not counted)
        self._present = generations_on_disk(self.root / SEGMENT_DIR) if archive_gone else None
        self._lines = self._gone_lines = 0
        self.recovery.extend(self._index.read(_index_entry, what="not an index entry", into=self._load,
                                              loads=_index_loads).problems)
        if self._present is not None and self._gone_lines >= max(ARCHIVE_MIN_LINES, self._lines - self._gone_lines):
            self._archive_gone(keys_in_memory)
        self._present = None
        self._reindex_orphans()
        if workers:
            try:
                self._pool = RenderPool(workers, worker_target, job_timeout=job_timeout,
                                        on_restart=lambda: self.metrics.inc("wt_otel_render_worker_restarts_total"))
            except BaseException:
                self.close()
                raise
            self.metrics.set("wt_otel_render_workers", workers)

    @property
    def pooled(self) -> bool:
        """Whether sessions go to render workers (`submit`) rather than being written in the caller (`write`)."""
        return self._pool is not None

    # ------------------------------------------------------------------ start-up repair

    def _load(self, e: dict[str, Any], offset: int) -> None:
        """One index line, in file order: the last line of a key is its current revision."""
        state = self._keys.get(e["key"]) or self._keys.add(e["key"], e["slug"])
        state.revision = max(state.revision, e.get("revision", 1))
        by_reference = e.get("rendered") is False and isinstance(e.get("segments"), list)
        state.kept = INDEXED if by_reference else RAW if e.get("rendered") is False else RENDERED
        content, pos = e.get("content"), e.get("segment_pos")
        state.content = content if isinstance(content, str) else None
        state.pos = pos if isinstance(pos, int) and not isinstance(pos, bool) else None
        state.line = offset if by_reference else None
        state.note_flag(e)
        # A line re-indexed from its directory (a kill took the one written with it) names no records, and serve's
        # checkpoint never passed them: whatever serve replays for this key is that directory's session, so the
        # replay resumes the key (`replayable`) until a line written from records follows. Without this, a second
        # kill before that line left the key taken, and the replay wrote the same incident again as `KEY~2`.
        if e.get("recovered") and state.pos is None:
            self._recovered.add(e["key"])
        elif self._recovered:
            self._recovered.discard(e["key"])
        if self._present is not None:
            self._lines += 1
            self._gone_lines += by_reference and state.pos is not None and not self._spans_kept(state.pos)

    def _spans_kept(self, pos: int) -> bool:
        """Whether the segment generation holding a kept session's first spans is still on disk (retention
        removes the oldest first: once it is gone, the session cannot be rendered)."""
        return self._present is not None and generation_of(pos) in self._present

    def _archive_gone(self, keys_in_memory: int) -> None:
        """Move the index lines of sessions kept by reference into spans retention removed to
        `sessions.archive.ndjsonl`, so the index, and what each start reads, follows the segments' retention
        instead of growing forever. Line by line, no key looked up: a later revision of a session holds its
        earlier spans too, so when an earlier one's spans are gone, the later one's are (retention removes the
        oldest first). Rendered lines never move (their directories are the data).

        Both files are written as the index is read (memory stays flat); the archive is fsynced before the
        index is replaced (a rename), so a crash between them repeats lines in the archive, never loses one.
        The key table is then read again from the shorter index (offsets moved)."""
        moved = 0
        tmp = self.root / f".{INDEX}.compact"
        try:
            with open(self.root / INDEX, "rb") as src, open(tmp, "wb") as dst, \
                    open(self.root / ARCHIVE, "a+b") as archive:
                end = os.fstat(archive.fileno()).st_size
                if end and os.pread(archive.fileno(), 1, end - 1) != b"\n":
                    archive.write(b"\n")  # a torn tail (a full disk before): ours start on a line of their own
                for raw in src:
                    if self._gone_line(raw):
                        archive.write(raw)
                        moved += 1
                    else:
                        dst.write(raw)
                for f in (dst, archive):
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.root / INDEX)
            fsync_dir(self.root)
        except OSError as e:  # a full disk, say: the index stays as it was, read as it was
            tmp.unlink(missing_ok=True)
            self.recovery.append(f"{INDEX}: cannot move the lines of sessions whose spans are gone to {ARCHIVE} "
                                 f"({e.strerror or e}); the index stays whole")
            return
        self._index.close()
        self._keys.close()
        self._keys = SessionKeys(keys_in_memory, path=self.root / KEYS_DB)
        self._present = None
        self._index.read(_index_entry, what="not an index entry", into=self._load, loads=_index_loads)
        self.recovery.append(f"{INDEX}: moved {moved} line(s) of sessions kept by reference whose segments retention "
                             f"removed to {ARCHIVE}; {self._lines - moved} line(s) left")

    def _gone_line(self, raw: bytes) -> bool:
        """Whether an index line is a session kept by reference whose first spans' generation is gone (a line
        that does not parse is kept where it is, as the read kept it)."""
        try:
            e = _index_loads(raw)
        except ValueError:
            return False
        if not isinstance(e, dict):
            return False
        pos = e.get("segment_pos")
        return e.get("rendered") is False and isinstance(e.get("segments"), list) and isinstance(pos, int) \
            and not isinstance(pos, bool) and not self._spans_kept(pos)

    def _clean_temp_dirs(self) -> None:
        """Remove half-built revisions; put back a previous revision caught mid-swap."""
        for p in list(self.sessions.iterdir()):
            if not p.name.startswith("."):
                continue
            slug = p.name[1:].rsplit(".", 2)[0]
            if p.name.endswith(".old") and (p / "d").is_dir() and not (self.sessions / slug).exists():
                os.rename(p / "d", self.sessions / slug)
                self.recovery.append(f"restored {SESSIONS}/{slug} (killed while replacing a revision)")
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)

    def _reindex_orphans(self) -> None:
        """A directory without an index line (killed between rename and append): index it from its envelope."""
        for d in sorted(self.sessions.iterdir()):
            if d.name.startswith(".") or not d.is_dir() or self._keys.key_of(d.name) is not None:
                continue
            self._keys.reserve(d.name)  # whatever it turns out to be, its name is not given to another session
            if (d / META_FILE).is_file() and not (d / ENVELOPE).exists():
                self._reindex_raw(d)
                continue
            try:
                env = json.loads((d / ENVELOPE).read_text(encoding="utf-8"))
                if not isinstance(env, dict) or not isinstance(env.get("provenance"), dict):
                    raise ValueError("its envelope is not a JSON object with provenance")
                prov = env["provenance"]
                key = prov["session_key"]
                if not isinstance(key, str) or not key:
                    raise ValueError(f"session_key {key!r} is not a string")
                if not isinstance(env.get("source") or {}, dict) or not isinstance(env.get("session") or {}, dict):
                    raise ValueError("source/session are not objects")
            except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
                self.recovery.append(f"{SESSIONS}/{d.name}: not a wt-otel session directory ({e}); left alone")
                continue
            if key in self._keys:  # an older slug of a known key cannot happen; be safe
                continue
            source = env.get("source") or {}
            entry = self._entry_from(key, d.name, 1, prov, source, env)
            entry["recovered"] = True
            self._append(entry)
            state = self._keys.add(key, d.name)
            state.revision, state.kept = 1, RENDERED
            self._recovered.add(key)
            self.recovery.append(f"{SESSIONS}/{d.name}: re-indexed from its envelope")

    def _reindex_raw(self, d: Path) -> None:
        """An unrendered session directory without its index line: indexed from its `session.json`."""
        try:
            meta = json.loads((d / META_FILE).read_text(encoding="utf-8"))
            key = meta["key"] if isinstance(meta, dict) else None
            if not isinstance(key, str) or not key or not (d / RAW_FILE).is_file():
                raise ValueError(f"no session key or no {RAW_FILE}")
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            self.recovery.append(f"{SESSIONS}/{d.name}: not a wt-otel session directory ({e}); left alone")
            return
        if key in self._keys:
            return
        entry = {"v": 1, "key": key, "slug": d.name, "revision": 1,
                 **{k: meta.get(k) for k in ("complete", "trace_ids", "conversation_id", "service", "started",
                                             "ended", "flagged", "flag_ref", "flag_reason")},
                 "redacted": False, "path": f"{SESSIONS}/{d.name}", "files": sorted(p.name for p in d.iterdir()),
                 "rendered": False, "written_at": utc_now_iso(), "recovered": True}
        self._append(entry)
        state = self._keys.add(key, d.name)
        state.revision, state.kept = 1, RAW
        self._recovered.add(key)
        self.recovery.append(f"{SESSIONS}/{d.name}: re-indexed from its {META_FILE}")

    # ------------------------------------------------------------------ writing

    def has_key(self, key: str) -> bool:
        """Whether a session with this key was ever written here (the assembler avoids reusing it)."""
        with self._lock:
            return key in self._keys

    def replayable(self, key: str, start: int) -> bool:
        """Whether the key's latest revision came from records at or past segment position `start` (serve replays
        them), or was re-indexed at this start: a directory written before a crash took its index line with it,
        and serve's checkpoint never passes a session whose line is not in, so its records are in the replay."""
        with self._lock:
            state = self._keys.get(key)
            pos = state.pos if state is not None else None
            return key in self._recovered or (pos is not None and pos >= start)

    def pinned_position(self) -> int:
        """The lowest segment-log position a deferred session, one still with the render workers or one kept by
        reference whose index line is not appended yet holds (-1: none): the log keeps it until written."""
        with self._lock:
            held = [spans for _, spans in self._deferred.values()] + [job.done.spans for job in self._jobs.values()]
            lowest = [self._unindexed_low] if self._unindexed_low >= 0 else []
            return min([*lowest, *(p for spans in held for p in _positions(spans))], default=-1)

    # ------------------------------------------------------------------ sessions kept by reference

    def keep_indexed(self, indexed: IndexedSession) -> bool:
        """Keep an unflagged session by reference (serve, `datadir.render: flagged`): one index line naming
        the segment-log entries and spans that hold it, appended with the next batch of lines (the tick's
        one fsync); nothing is rendered or written until someone asks (`render`, `flag`). False: this
        store renders every session (`render: all`), so build it."""
        if self.render_mode != "flagged":
            return False
        refs = indexed.refs
        if len(refs) == 1:  # most sessions: one run of one request (ordinals ascending, as `SpanRefs` keeps them)
            ref = refs[0]
            lowest = highest = ref.segment_pos
            segments: list[list[Any]] = [[lowest, ref.ordinals]]
            trace_ids, conv, spans = [ref.trace_id], ref.conversation or None, len(ref.ordinals)
            listed = segments
        else:
            by_pos: dict[int, list[int]] = {}
            for ref in refs:
                by_pos.setdefault(ref.segment_pos, []).extend(ref.ordinals)
            segments = [[pos, sorted(ordinals)] for pos, ordinals in by_pos.items()]  # in the order they came
            listed = sorted(segments)
            lowest, highest = listed[0][0], listed[-1][0]
            trace_ids, conv, spans = indexed.trace_ids, indexed.conversation_id, indexed.spans
        # which spans, by where they lie: the same after a restart replays them (positions do not move)
        content = _refs_digest(listed)
        with self._lock:
            key = indexed.key
            state = self._keys.get(key)
            if state is not None and highest < self.replayed_below and state.content is not None and (
                    state.content == content or state.content == _legacy_refs_digest(listed)):
                self.metrics.inc("wt_otel_sessions_unchanged_total")  # the same spans, replayed after a restart
                return True
            if state is not None and (state.flagged or state.kept == RENDERED):
                return False  # an incident (flagged by hand, say), or rendered on demand: it stays rendered
            # the one string from the trace (ids are hex): made JSON-safe here
            conv = safejson.sanitize(conv) if conv is not None and not conv.isascii() else conv
            if state is None:
                state = self._keys.add(key, unique_slug(conv or key, key, self._keys.taken))
            state.revision += 1
            entry = {"v": 1, "key": key, "slug": state.slug, "revision": state.revision, "complete": indexed.complete,
                     "trace_ids": trace_ids, "conversation_id": conv, "service": None,
                     "started": None, "ended": None, "flagged": False, "flag_ref": None, "flag_reason": None,
                     "redacted": False, "path": None, "files": [], "rendered": False, "segments": segments,
                     "spans": spans, "warnings": indexed.warnings, "written_at": None,  # set as the tick writes it
                     "content": content, "segment_pos": lowest}
            self._unindexed.append(entry)
            if self._unindexed_low < 0 or lowest < self._unindexed_low:
                self._unindexed_low = lowest
            return True

    def _indexed_session(self, key: str) -> Session:
        """A session kept by reference, built from the segment log's entries its index line names."""
        return session_from_segments(self.root, self._indexed_line(key), key)

    def _indexed_line(self, key: str) -> dict[str, Any]:
        """The key's latest index line: read at the offset the key table keeps (one line, not the whole
        index: `sessions render --all` renders them one by one), else found by reading the index through."""
        state = self._keys.get(key)
        if state is not None and state.line is not None:
            try:
                with open(self.root / INDEX, "rb") as f:
                    f.seek(state.line)
                    entry = _index_entry(json.loads(f.readline()))
                if entry["key"] == key:
                    return entry
            except (OSError, ValueError):
                pass
            log.warning("%s: the line of session %s is not where it was; reading the index through", INDEX, shown(key))
        found: list[dict[str, Any]] = [{}]
        Journal(self.root / INDEX).read(_index_entry, into=lambda e, _: found.append(e) if e["key"] == key else None)
        return found[-1]

    def _state_for(self, session: Session) -> KeyState:
        """The session key's state; a new key gets its slug (never changed after). A key flagged before
        (by hand, say: `wt-otel flag`) flags the session too: a later revision, with late spans, is the
        same incident, and spans that do not say so must not undo the flag."""
        state = self._keys.get(session.key)
        if state is None:
            # from ids only, never content: a session kept by reference gets its slug before it is decoded, and
            # its render on demand must land where an inline render would (import names by first turn instead)
            text = session.flag_ref or session.conversation_id or session.key
            state = self._keys.add(session.key, unique_slug(text, session.key, self._keys.taken))
        elif state.flagged and not session.flagged:
            session.flagged, session.flag_ref, session.flag_reason = True, state.flag_ref, state.flag_reason
            session.flag_refs = [state.flag_ref] if state.flag_ref else []
        return state

    def write(self, session: Session, spans: object = None) -> Written | None:
        """Write (or rewrite, as the next revision) one session's directory, then its index line.

        None when the session was deferred (the disk refused it; kept in memory and retried) or
        quarantined (it cannot be rendered); both are logged and counted."""
        with self._lock:
            if self._deferred:  # keep the order: nothing overtakes a deferred session
                self._defer(session, spans, self.degraded or "earlier writes are pending")
                self._retry_locked()
                return None
            return self._write_or_defer(session, spans)

    def retry_deferred(self) -> int:
        """Write what a full disk deferred; returns how many are still waiting. Safe to call often.
        With render workers, first index what they finished (the per-tick group commit); then the lines of
        sessions kept by reference."""
        if self._pool is not None:
            self.pump()
        with self._lock:
            self._append_indexed_locked()
            return self._retry_locked()

    @property
    def deferred(self) -> int:
        return len(self._deferred)

    def _retry_locked(self) -> int:
        while self._deferred:
            key, (session, spans) = next(iter(self._deferred.items()))
            del self._deferred[key]
            if self._write_or_defer(session, spans, first=True) is None and key in self._deferred:
                self._deferred.move_to_end(key, last=False)
                return len(self._deferred)
        self.metrics.set("wt_otel_sessions_deferred", 0)
        if self.degraded is not None:
            log.warning("data dir %s is writable again; deferred sessions written", self.root)
            self.degraded = None
            if self.on_health:
                self.on_health(None)
        return 0

    def _unchanged(self, session: Session, spans: object) -> bool:
        """Rebuilt from serve's segment log after a restart with the very records written before: no new
        revision (outside a replay, the same spans sent again still make one, as before)."""
        content = _content(spans)[0]
        state = self._keys.get(session.key) if content is not None else None
        if state is not None and state.content == content and max(_positions(spans), default=-1) < self.replayed_below:
            self.metrics.inc("wt_otel_sessions_unchanged_total")
            return True
        return False

    def _write_or_defer(self, session: Session, spans: object, first: bool = False) -> Written | None:
        if self._unchanged(session, spans):
            return None
        try:
            state = self._state_for(session)
            slug, revision = state.slug, state.revision + 1
            job = self._render_job(session, spans, slug, rendered=state.kept == RENDERED)
            try:
                files = job_files(job, render)  # this module's `render`: the seam fault tests replace
            except Unencodable:  # a value OTLP cannot carry: render it instead of keeping its records
                job = RenderJob(job.dest, slug, session=session)
                files = job_files(job, render)
        except Exception as e:  # noqa: BLE001 - any bug in rendering must cost this session only
            self._quarantine(session, spans, f"cannot render the session: {type(e).__name__}: {e}")
            return None
        dest = self.sessions / slug
        try:
            self.write_dir(dest, files, force=True, durable=True)
            entry = self._entry(session, slug, revision, sorted(files), rendered=not job.raw, spans=spans)
            self._append(entry)
        except OSError as e:
            if e.errno in DISK_ERRORS:
                self._defer(session, spans, f"{os.strerror(e.errno)} writing {dest}", first=first)
            else:
                self._quarantine(session, spans, f"cannot write {dest}: {e}")
            return None
        self._written(session.key, revision, job.raw, entry)
        return Written(path=dest, slug=slug, revision=revision, entry=entry)

    def _written(self, key: str, revision: int, raw: bool, entry: dict[str, Any]) -> None:
        state = self._known_state(key)
        state.revision = max(state.revision, revision)
        state.kept, state.content, state.pos = RAW if raw else RENDERED, entry.get("content"), entry.get("segment_pos")
        self.metrics.inc("wt_otel_sessions_written_total")
        if raw:
            self.metrics.inc("wt_otel_sessions_kept_unrendered_total")

    def _render_job(self, session: Session, spans: object, slug: str, rendered: bool) -> RenderJob:
        """Rendered, or (render: flagged, not flagged) kept as records plus the fields the stages set. A key
        whose latest revision is `rendered` (on demand, say: `sessions render`) stays rendered, so its
        directory keeps showing the latest revision in the six files a user asked for."""
        dest = str(self.sessions / slug)
        if self.render_mode == "flagged" and not session.flagged and not rendered and isinstance(spans, list) \
                and spans and all(isinstance(s, SpanRecord) for s in spans):
            meta = {"v": 1, "key": session.key, "complete": session.complete, "trace_ids": session.trace_ids,
                    "conversation_id": session.conversation_id, "service": session.service_name,
                    "started": iso_from_ns(session.started_ns), "ended": iso_from_ns(session.ended_ns),
                    "flagged": session.flagged, "flag_ref": session.flag_ref, "flag_refs": session.flag_refs,
                    "flag_reason": session.flag_reason, "warnings": session.warnings}
            return RenderJob(dest, slug, spans=spans, meta=meta)
        return RenderJob(dest, slug, session=session)

    # ------------------------------------------------------------------ render workers

    def submit(self, done: CompletedSession) -> bool:
        """Hand a session revision to the render workers. True: it is on its way (`on_committed` follows);
        False: deferred (the disk refuses writes) or quarantined (it cannot be rendered), as `write` does."""
        finished: list[tuple[CompletedSession, Written]] = []
        with self._lock:
            session, spans = done.session, done.spans
            if self._deferred:
                self._defer(session, spans, self.degraded or "earlier writes are pending")
                self._retry_locked()
                return False
            if self._unchanged(session, spans):
                return False
            try:
                state = self._state_for(session)
                slug = state.slug
                job = self._render_job(session, spans, slug, rendered=state.kept == RENDERED)
            except Exception as e:  # noqa: BLE001 - as in `write`
                self._quarantine(session, spans, f"cannot render the session: {type(e).__name__}: {e}")
                return False
            while len(self._jobs) >= self.max_pending and self._pool is not None:  # back-pressure
                self._collect_locked(0.5)
                finished += self._commit_locked()
            # Added after the wait: this job is not committed before `submit` returns (the pipeline sets
            # `done.resume` once it does).
            self._seq += 1
            state = self._state_for(session)
            state.revision += 1  # reserved: a later revision of the key follows it
            revision = state.revision
            self._jobs[self._seq] = _Job(self._seq, session.key, slug, revision, done, job)
            self._collect_locked(0)
            self.metrics.set("wt_otel_render_pending", len(self._jobs))
        self._finish(finished)
        return True

    def pump(self, wait: float = 0.0) -> int:
        """Collect what the workers finished, append its index lines (one fsync), hand out more; returns how
        many jobs are still in flight. The pipeline calls it every tick (through `retry_deferred`)."""
        with self._lock:
            self._collect_locked(wait)
            finished = self._commit_locked()
            left = len(self._jobs)
            self.metrics.set("wt_otel_render_pending", left)
        self._finish(finished)
        return left

    def drain(self, timeout: float = 60.0) -> None:
        """Finish every job in flight (SIGTERM, stop). Jobs still running after `timeout` seconds are
        quarantined, their workers stopped: nothing acknowledged is dropped without a trace. With serve's
        segment log (`kept_by_log`) they are left alone instead: the log holds their records and the next
        start writes them (serve reads `pinned_position()` before it closes the store)."""
        deadline = time.monotonic() + timeout
        while self._jobs and time.monotonic() < deadline:
            self.pump(min(0.2, max(0.0, deadline - time.monotonic())))
        with self._lock:  # the lines of sessions kept by reference: then they pin no segment
            self._append_indexed_locked()
        if self.kept_by_log:
            return
        with self._lock:
            for job in list(self._jobs.values()):
                if job.state in ("pending", "running"):
                    job.state = "gone"
                    self._quarantine(job.done.session, job.done.spans,
                                     f"not written within {timeout:g} s of shutdown by the render workers")
            finished = self._commit_locked()
        self._finish(finished)

    def _collect_locked(self, wait: float) -> None:
        if self._pool is None:
            return
        for outcome in self._pool.poll(wait):
            self._outcome_locked(outcome)
        running = {j.key for j in self._jobs.values() if j.state == "running"}
        for job in self._jobs.values():
            if not self._pool.idle():
                break
            if job.state != "pending" or job.key in running:
                continue  # one job per key at a time: revision N+1 never lands before N
            try:
                self._pool.send(job.seq, job.render)
            except Exception as e:  # noqa: BLE001 - e.g. nesting too deep to pickle: this session only
                self._gone_locked(job)
                self._quarantine(job.done.session, job.done.spans,
                                 f"cannot hand the session to a render worker: {type(e).__name__}: {e}")
                continue
            job.state = "running"
            running.add(job.key)

    def _outcome_locked(self, out: Outcome) -> None:
        job = self._jobs.get(out.seq)
        if job is None:
            return
        session, spans, dest = job.done.session, job.done.spans, job.render.dest
        if out.kind == "ok":
            job.state, job.files = "ok", list(out.detail)
            return
        if out.kind == "error" and out.detail == Unencodable.__name__ and job.render.raw:
            job.state, job.render = "pending", RenderJob(dest, job.slug, session=session)  # render it instead
            return
        if out.kind == "requeue":  # the worker was gone before it took the job: another one will
            job.state = "pending"
            return
        if out.kind == "died" and out.detail == -signal.SIGTERM and not job.retried:
            # stopped from outside (systemd signals the whole group at shutdown): not the session's fault
            job.state, job.retried = "pending", True
            return
        self._gone_locked(job)
        if out.kind == "oserror" and out.detail in DISK_ERRORS:
            self._defer(session, spans, f"{os.strerror(out.detail)} writing {dest}")
        elif out.kind == "oserror":
            self._quarantine(session, spans, f"cannot write {dest}: {out.message}")
        elif out.kind == "died":
            self._quarantine(session, spans, out.message or "the render worker died")
        else:
            self._quarantine(session, spans, f"cannot render the session: {out.message}")

    def _gone_locked(self, job: _Job) -> None:
        job.state = "gone"
        state = self._keys.get(job.key)
        if state is not None and state.revision == job.revision:  # give the reserved revision back
            state.revision = job.revision - 1

    def _commit_locked(self) -> list[tuple[CompletedSession, Written]]:
        """Index lines for the finished jobs at the head of the order, appended together (one fsync)."""
        ready: list[_Job] = []
        while self._jobs:
            job = next(iter(self._jobs.values()))
            if job.state == "gone":
                del self._jobs[job.seq]
                continue
            if job.state != "ok":
                break
            del self._jobs[job.seq]
            ready.append(job)
        if not ready:
            return []
        entries = [self._entry(j.done.session, j.slug, j.revision, j.files, rendered=not j.render.raw,
                               spans=j.done.spans) for j in ready]
        try:
            self._append(entries)
        except OSError as e:  # the directories are whole; without their lines they are re-done
            for job in ready:
                self._gone_locked(job)
                if e.errno in DISK_ERRORS:
                    self._defer(job.done.session, job.done.spans, f"{os.strerror(e.errno)} appending to {INDEX}")
                else:
                    self._quarantine(job.done.session, job.done.spans, f"cannot append to {INDEX}: {e}")
            return []
        self.metrics.inc("wt_otel_index_commits_total")
        out = []
        for job, entry in zip(ready, entries, strict=True):
            self._written(job.key, job.revision, job.render.raw, entry)
            out.append((job.done, Written(path=Path(job.render.dest), slug=job.slug, revision=job.revision,
                                          entry=entry)))
        return out

    def _finish(self, finished: list[tuple[CompletedSession, Written]]) -> None:
        """Outside the lock: the stages after the store (auto-replay) for each committed revision."""
        for done, written in finished:
            try:
                if self.on_committed is not None:
                    self.on_committed(done, written)
            except Exception:  # a later stage failing costs that stage, not the other sessions
                log.exception("session %s: a stage after the data dir failed", shown(done.session.key))
                self.metrics.inc("wt_otel_pipeline_errors_total")

    # ------------------------------------------------------------------ rendering on demand

    def resolve(self, name: str) -> tuple[str, str]:
        """(key, slug) of a session named by its slug, key or directory; ValueError naming a few known ones."""
        state = self._keys.get(name)
        slug = state.slug if state is not None else Path(name).name
        key = self._keys.key_of(slug)
        if key is None:
            if _archived(self.root, name):
                raise ValueError(f"session {name!r} was moved to {self.root / ARCHIVE} at a serve start: its spans "
                                 "were in segments that durability.retain_age / retain_bytes removed, so it cannot "
                                 "be rendered")
            raise ValueError(f"no session {name!r} in {self.sessions} (sessions: {self._known()})")
        return key, slug

    def _known(self) -> str:
        return ", ".join(self._keys.slugs(10)) or "none"

    def unrendered(self) -> list[str]:
        """Keys whose latest revision is kept as records only or by reference, in index order."""
        with self._lock:
            return list(self._keys.keys((RAW, INDEXED)))

    def render(self, name: str) -> Written | None:
        """Render a session kept as records or by reference (render: flagged) into its six files, as a new
        index revision. None when it is rendered already; ValueError when there is no such session or its
        records cannot be read back."""
        with self._lock:
            key, slug = self.resolve(name)
            kept = self._kept(key)
            if kept == INDEXED:
                return self._render_raw_locked(self._indexed_session(key), slug)
            if kept != RAW:
                return None
            return self._render_raw_locked(self._session_from_raw(key, slug), slug)

    def _known_state(self, key: str) -> KeyState:
        """The state of a key given its slug earlier (by `_state_for`, `keep_indexed` or the start)."""
        state = self._keys.get(key)
        if state is None:
            raise KeyError(f"session key {key!r} has no slug")
        return state

    def _kept(self, key: str) -> str | None:
        state = self._keys.get(key)
        return state.kept if state is not None else None

    def _session_from_raw(self, key: str, slug: str) -> Session:
        """The Session the pipeline had when it kept these records: built again, with the stages' fields back."""
        return session_from_records(self.sessions / slug, key)

    def _render_raw_locked(self, session: Session, slug: str) -> Written:
        dest = self.sessions / slug
        files = job_files(RenderJob(str(dest), slug, session=session), render)
        self.write_dir(dest, files, force=True, durable=True)
        state = self._state_for(session)
        revision = state.revision + 1
        entry = self._entry(session, slug, revision, sorted(files), rendered=True)
        if state.content is not None:  # the same records: a restart's replay of them is this session, not a new one
            entry["content"], entry["segment_pos"] = state.content, state.pos
        self._append(entry)
        state = self._state_for(session)  # fetched again: appending may have used many keys
        state.revision, state.kept = revision, RENDERED
        self.metrics.inc("wt_otel_sessions_rendered_on_demand_total")
        return Written(path=dest, slug=slug, revision=revision, entry=entry)

    def flag(self, name: str, ref: str | None = None, reason: str = "flagged by hand (wt-otel flag)") -> Written:
        """Promote a written session to an incident after the fact: its envelope's `source` and its
        scenario.yaml's tags say so, and a new index revision is appended (flagged, with the ref).

        `name` is the session's slug, its key, or its directory. ValueError when there is no such session.
        """
        with self._lock:
            return self._flag_locked(name, ref, reason)[1]

    def take_flag_requests(self) -> list[tuple[Session, Written]]:
        """Flag what `wt-otel flag` asked for while this store held the data dir (serve: every tick).

        The command cannot open the store (serve holds the lock), so it appends a request to
        `flag-requests.ndjsonl`; here each is taken (under the file's lock, then the file is emptied) and
        flagged as `flag` would. Returned: the sessions built for it (kept by reference or as records: the
        default for an unflagged session), so serve runs them through the stages after the store
        (auto-replay); one rendered before the flag is flagged in place and not returned (logged)."""
        path = self.root / FLAG_REQUESTS
        try:
            if path.stat().st_size == 0:
                return []
        except FileNotFoundError:
            return []
        with open(path, "r+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # `Journal.append` takes it too: a request is never half-taken
            try:
                lines = f.read().splitlines()
                f.truncate(0)
                os.fsync(f.fileno())
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
        out: list[tuple[Session, Written]] = []
        for raw in lines:
            try:
                request = json.loads(raw)
                name, ref = str(request["session"]), request.get("ref")
            except (ValueError, KeyError, TypeError):
                log.warning("%s: not a flag request, skipped: %r", FLAG_REQUESTS, raw[:200])
                continue
            try:
                with self._lock:
                    session, written = self._flag_locked(name, str(ref) if ref else None,
                                                         "flagged by hand (wt-otel flag)")
            except (ValueError, OSError) as e:
                log.error("wt-otel flag %s: not flagged: %s", name, e)
                continue
            log.info("flagged %s as incident %s (revision %s), as `wt-otel flag` asked", written.path,
                     shown(written.entry["flag_ref"]), written.revision)
            if session is None:
                log.warning("incident %s: rendered before it was flagged, so not queued for replay here; run it "
                            "with `wt-otel run %s`", shown(written.entry["flag_ref"]), written.path)
            else:
                out.append((session, written))
        return out

    def _flag_locked(self, name: str, ref: str | None, reason: str) -> tuple[Session | None, Written]:
        """`flag`, with the lock held: (the session when it was built to be rendered as the incident, written)."""
        state = self._keys.get(name)
        slug = state.slug if state is not None else Path(name).name
        key = self._keys.key_of(slug)
        directory = self.sessions / slug
        kept = self._kept(key) if key is not None else None
        if key is not None and kept in (RAW, INDEXED):  # rendered now, as the incident
            session = self._indexed_session(key) if kept == INDEXED else self._session_from_raw(key, slug)
            ref = ref or (session.flag_ref if session.flagged else None) or key
            session.flagged, session.flag_ref, session.flag_reason = True, ref, reason
            session.flag_refs = [ref]
            return session, self._render_raw_locked(session, slug)
        if key is None or not (directory / ENVELOPE).is_file():
            raise ValueError(f"no session {name!r} in {self.sessions} (sessions: {self._known()})")
        env = json.loads((directory / ENVELOPE).read_text(encoding="utf-8"))
        source = env.setdefault("source", {})
        ref = ref or (source.get("ref") if source.get("flag") else None) or key
        source["ref"], source["flag"] = ref, reason
        _rewrite(directory / ENVELOPE, json.dumps(env, indent=2, ensure_ascii=False) + "\n")
        scenario = directory / "scenario.yaml"
        if scenario.is_file():
            text = scenario.read_text(encoding="utf-8")
            data = yaml.safe_load(text) or {}
            tags = [t for t in data.get("tags") or [] if not str(t).startswith("origin:")]
            data["tags"] = [f"origin:{ref}", *[t for t in tags if t != "unreviewed"], "unreviewed"]
            _rewrite(scenario, "# flagged by hand (wt-otel flag); the skeleton's comments were dropped\n"
                     + yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        state = self._known_state(key)
        revision = state.revision + 1
        entry = self._entry_from(key, slug, revision, env.get("provenance") or {}, source, env)
        if state.content is not None:  # the same records: a replay must not undo the flag with a "new" revision
            entry["content"], entry["segment_pos"] = state.content, state.pos
        self._append(entry)
        self._known_state(key).revision = revision  # fetched again: appending may have used many keys
        return None, Written(path=directory, slug=slug, revision=revision, entry=entry)

    def _defer(self, session: Session, spans: object, reason: str, first: bool = False) -> None:
        """Keep the session for `retry_deferred`; a later revision of the same key replaces it."""
        self._deferred.pop(session.key, None)
        self._deferred[session.key] = (session, spans)
        if first:
            self._deferred.move_to_end(session.key, last=False)
        self.metrics.set("wt_otel_sessions_deferred", len(self._deferred))
        if self.degraded is None:
            log.error("data dir %s cannot be written (%s): session %s kept in memory, exports refused until "
                      "space returns", self.root, reason, session.key)
            self.degraded = reason
            if self.on_health:
                self.on_health(reason)

    def quarantine(self, session: Session, spans: object, reason: str) -> Path | None:
        """Set a session aside that a stage before the store could not process (see `_quarantine`)."""
        with self._lock:
            return self._quarantine(session, spans, reason)

    def _quarantine(self, session: Session, spans: object, reason: str) -> Path | None:
        """Set a session that cannot be written aside, with its records and the reason; never raises."""
        try:
            base = safe_slug(session.flag_ref or session.conversation_id or session.key)
            dest = self.root / QUARANTINE / f"{base}-{time.time_ns()}"
            records: list[Any] = list(spans) if isinstance(spans, list | tuple) else []
            files: dict[str, str | bytes] = {
                "reason.txt": f"session {session.key} (trace ids {', '.join(session.trace_ids)}) was not "
                              f"written:\n{reason}\n".encode("utf-8", "backslashreplace"),
                "records.ndjson": b"".join(safejson.dumps(_plain(r), indent=False) + b"\n" for r in records),
            }
            write_directory(dest, files, durable=True)
        except Exception as e:  # noqa: BLE001 - quarantine is the last resort: it must not raise
            if isinstance(e, OSError) and e.errno in DISK_ERRORS:
                self._defer(session, spans, f"{os.strerror(e.errno)} writing the quarantine")
                return None
            log.exception("session %s: not written (%s) and cannot be quarantined", shown(session.key), shown(reason))
            self.metrics.inc("wt_otel_sessions_lost_total")
            return None
        log.error("session %s quarantined in %s: %s", shown(session.key), dest, shown(reason))
        self.metrics.inc("wt_otel_sessions_quarantined_total")
        return dest

    def _entry(self, session: Session, slug: str, revision: int, files: list[str], rendered: bool = True,
               spans: object = None) -> dict[str, Any]:
        entry = {
            "v": 1,
            "key": session.key,
            "slug": slug,
            "revision": revision,
            "complete": session.complete,
            "trace_ids": session.trace_ids,
            "conversation_id": session.conversation_id,
            "service": session.service_name,
            "started": iso_from_ns(session.started_ns),
            "ended": iso_from_ns(session.ended_ns),
            "flagged": session.flagged,
            "flag_ref": session.flag_ref if session.flagged else None,
            "flag_reason": session.flag_reason,
            "redacted": bool(session.redaction),
            "path": f"{SESSIONS}/{slug}",
            "files": files,
            "rendered": rendered,
            "written_at": utc_now_iso(),
        }
        content, pos = _content(spans)
        if content is not None:  # which records, and where in serve's segment log (restart dedupe, checkpoint)
            entry["content"], entry["segment_pos"] = content, pos
        return entry

    def _entry_from(self, key: str, slug: str, revision: int, prov: dict[str, Any], source: dict[str, Any],
                    env: dict[str, Any]) -> dict[str, Any]:
        flag = source.get("flag")
        return {
            "v": 1, "key": key, "slug": slug, "revision": revision, "complete": prov.get("complete", True),
            "trace_ids": prov.get("trace_ids") or [], "conversation_id": prov.get("conversation_id"),
            "service": prov.get("service_name"), "started": (env.get("session") or {}).get("started_at"),
            "ended": source.get("captured_at"), "flagged": bool(flag), "flag_ref": source.get("ref") if flag else None,
            "flag_reason": flag, "redacted": bool(env.get("redaction")), "path": f"{SESSIONS}/{slug}",
            "files": sorted(p.name for p in (self.sessions / slug).iterdir()), "rendered": True,
            "written_at": utc_now_iso(),
        }

    def _append(self, entry: dict[str, Any] | list[dict[str, Any]]) -> None:
        """One line (or a batch: one write(2) each, one fsync for all) fsynced before the write counts (the
        journal's rule); the lines of sessions kept by reference since the last batch go first."""
        entries = entry if isinstance(entry, list) else [entry]
        crash_point("index.appending")
        # a lone surrogate in an id, say (the lines of sessions kept by reference are safe as built)
        self._append_lines([encode_line(safejson.sanitize(e)) for e in entries])
        crash_point("index.appended")
        for e in entries:  # the key table remembers a flag: later revisions are the same incident (`_state_for`)
            if e.get("flagged") and (state := self._keys.get(e["key"])) is not None:
                state.note_flag(e)

    def _append_indexed_locked(self) -> None:
        """Append the lines of the sessions kept by reference since the last batch (each tick)."""
        if not self._unindexed:
            return
        try:
            self._append_lines([])
        except OSError as e:  # retried next tick; their spans stay in the segment log (`pinned_position`)
            log.warning("cannot append %d index line(s) to %s (%s); retrying", len(self._unindexed), INDEX, e)

    def _append_lines(self, lines: list[bytes]) -> None:
        """The pending lines of sessions kept by reference, then `lines`, as one batch. A failed write (full
        disk) is cut back off, so the next batch does not follow a torn line and the offsets the key table
        notes stay exact; the pending lines stay pending (OSError is raised)."""
        size = self._index_size()
        indexed, self._unindexed, low = self._unindexed, [], self._unindexed_low
        self._unindexed_low = -1
        encoded = _indexed_lines(indexed)
        try:
            self._index.append([*encoded, *lines], encoded=True)
        except OSError:
            self._unindexed = indexed + self._unindexed  # kept for the next batch: the segment log holds their spans
            self._unindexed_low = min((p for p in (low, self._unindexed_low) if p >= 0), default=-1)
            with contextlib.suppress(OSError), open(self.root / INDEX, "r+b") as f:
                f.truncate(size)
            raise
        self._indexed_appended(indexed, encoded, size)

    def _index_size(self) -> int:
        """Where the next line starts (this process is the index's only writer): to cut back a failed
        write, and to note where each kept session's line is."""
        try:
            return os.stat(self.root / INDEX).st_size
        except FileNotFoundError:
            return 0

    def _indexed_appended(self, entries: list[dict[str, Any]], lines: list[bytes], offset: int) -> None:
        """The lines of sessions kept by reference are in, from byte `offset` of the index (this process is its
        only writer): the key table notes where each is, to read it back alone when rendered."""
        for e, line in zip(entries, lines, strict=True):
            state = self._keys.get(e["key"])
            if state is not None:  # always: `keep_indexed` gave it its slug
                state.kept, state.content, state.pos, state.line = INDEXED, e["content"], e["segment_pos"], offset
            offset += len(line)
        if self.on_indexed is not None:
            self.on_indexed(entries)
        if entries:
            self.metrics.inc("wt_otel_sessions_written_total", len(entries))
            self.metrics.inc("wt_otel_sessions_kept_unrendered_total", len(entries))

    def close(self) -> None:
        if self._jobs and not self.kept_by_log:
            self.drain()
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        with self._lock:
            self._append_indexed_locked()
            left = len(self._deferred) + sum(j.state in ("pending", "running") for j in self._jobs.values())
            if self.kept_by_log and left:
                log.warning("data dir %s: %d session revision(s) not written at shutdown; their records stay in "
                            "the segment log and the next start writes them", self.root, left)
            elif self._deferred:  # the disk never came back: say exactly what is lost, loudly
                log.error("data dir %s still cannot be written (%s): %d acknowledged session(s) NOT written: %s",
                          self.root, self.degraded, len(self._deferred), ", ".join(self._deferred))
                self.metrics.inc("wt_otel_sessions_lost_total", len(self._deferred))
            self._index.close()
            self._keys.close()
            if not self._lockfile.closed:
                self._lockfile.close()

    def __enter__(self) -> DataDirStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def session_from_segments(root: Path, entry: dict[str, Any], key: str) -> Session:
    """A session kept by reference, built from the segment-log entries its index line names (read-only: what
    `render` writes and what the session store (exporters/store.py) shows without writing)."""
    try:
        refs = [SpanRefs("", None, int(pos), [int(n) for n in ordinals])
                for pos, ordinals in entry.get("segments") or []]
        spans = spans_of(Path(root) / SEGMENT_DIR, refs)
    except (ValueError, TypeError, OSError) as e:
        raise ValueError(f"session {entry.get('slug')}: cannot read its spans back from the segment log: {e}") from None
    session = build_session(attach_logs(spans), key=key)
    if session is None:
        raise ValueError(f"session {entry.get('slug')}: its spans hold no GenAI session")
    session.complete = bool(entry.get("complete", True))
    session.warnings.extend(str(w) for w in entry.get("warnings") or [])
    return session


def session_from_records(directory: Path, key: str) -> Session:
    """A session kept as records (`records.otlp.pb` + `session.json`), built again with the stages' fields back."""
    slug = directory.name
    try:
        meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
        spans = read_records(directory / RAW_FILE)
    except (OSError, ValueError, RecursionError) as e:
        raise ValueError(f"session {slug}: cannot read its records in {directory}: {e}") from None
    session = build_session(spans, key=key)
    if session is None or not isinstance(meta, dict):
        raise ValueError(f"session {slug}: {directory / RAW_FILE} holds no GenAI session")
    session.complete = bool(meta.get("complete", True))
    session.flagged, session.flag_ref = bool(meta.get("flagged")), meta.get("flag_ref")
    session.flag_reason, session.flag_refs = meta.get("flag_reason"), list(meta.get("flag_refs") or [])
    if isinstance(meta.get("warnings"), list):
        session.warnings = [str(w) for w in meta["warnings"]]
    return session


def _line_field(raw: bytes, name: str) -> str | None:
    """A string field of an index line; None for a line that is not one (kept where it is, as the read kept it)."""
    try:
        obj = _index_loads(raw)
    except ValueError:
        return None
    value = obj.get(name) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None


def _indexed_lines(entries: list[dict[str, Any]]) -> list[bytes]:
    """The index lines of sessions kept by reference, stamped with one `written_at` (the batch is written now).
    orjson: our own types only (no floats); ~20x the stdlib encoder. The concatenation is a copy of the line's
    size (orjson's own buffer is >= 4 KiB)."""
    stamp = utc_now_iso()
    lines = []
    for entry in entries:
        entry["written_at"] = stamp
        try:
            lines.append(orjson.dumps(entry) + b"\n")
        except TypeError:  # an integer past 64 bits, say
            lines.append(encode_line(entry))
    return lines


def _archived(root: Path, name: str) -> bool:
    """Whether `name` (a key or slug) is in the archive; read through only to explain an unknown name."""
    try:
        with open(root / ARCHIVE, "rb") as f:
            return any(name.encode() in raw and name in (_line_field(raw, "key"), _line_field(raw, "slug"))
                       for raw in f)
    except OSError:
        return False


def _rewrite(path: Path, text: str) -> None:
    """Replace a file atomically (a reader never sees half of it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
def _positions(spans: object) -> list[int]:
    return [p for s in spans if (p := getattr(s, "segment_pos", -1)) >= 0] if isinstance(spans, list | tuple) else []


def _refs_digest(listed: list[list[Any]]) -> str:
    """Which spans a session kept by reference holds ([[segment position, [ordinals]], ...], sorted), in 32 hex
    characters. blake2b of orjson: a third of the sha256-of-repr before it, on every kept session."""
    return hashlib.blake2b(orjson.dumps(listed), digest_size=16).hexdigest()


def _legacy_refs_digest(listed: list[list[Any]]) -> str:
    """The digest index lines written before `_refs_digest` hold: a restart after an upgrade replays the same
    spans, which must still be found unchanged (not one more revision of each session in the replay)."""
    return hashlib.sha256(repr(listed).encode()).hexdigest()[:32]


def _content(spans: object) -> tuple[str | None, int | None]:
    """A digest of which records a revision holds (span ids, and the events each carries: logs attach as
    events), and its lowest segment-log position; (None, None) without spans."""
    if not isinstance(spans, list | tuple) or not spans:
        return None, None
    parts = sorted(f"{getattr(s, 'span_id', '')}:{len(getattr(s, 'events', ()) or ())}" for s in spans)
    digest = hashlib.sha256("\n".join(parts).encode("utf-8", "replace")).hexdigest()[:32]
    return digest, min(_positions(spans), default=None)


def _plain(record: Any) -> Any:
    """A record (and its events, links) as plain dicts, one level at a time: `dataclasses.asdict`
    deep-copies every value recursively and overflows the stack on hostile nesting."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: _plain(getattr(record, f.name)) if f.name in ("events", "links") else getattr(record, f.name)
                for f in dataclasses.fields(record)}
    if isinstance(record, list):
        return [_plain(x) for x in record]
    return record


class DataDirStage:
    """The `datadir` session stage: writes each session revision into the store, then tells who asked."""

    def __init__(self, store: DataDirStore, ctx: StageContext) -> None:
        self.store = store
        self.ctx = ctx
        if not ctx.quiet:
            store.on_indexed = self._announce_indexed

    def _announce_indexed(self, entries: list[dict[str, Any]]) -> None:
        """One line per batch (a tick's worth): at volume, a line per kept session would cost more than keeping it."""
        if len(entries) == 1:
            entry = entries[0]
            state = "complete" if entry["complete"] else "INCOMPLETE"
            self.ctx.emit(f"wrote {entry['slug']} to the index only (revision {entry['revision']}, {state}, "
                          f"{entry['spans']} spans kept by reference: wt-otel sessions render {entry['slug']})")
        elif entries:
            self.ctx.emit(f"wrote {len(entries)} sessions to the index only ({sum(e['spans'] for e in entries)} spans "
                          "kept by reference: wt-otel sessions render KEY|--all)")

    def on_session(self, done: CompletedSession) -> None:
        if self.store.pooled:  # a render worker writes it; `_committed` goes on once its index line is in
            if self.store.submit(done):
                done.pending = True
            else:
                done.halted = True
            return
        written = done.written = self.store.write(done.session, done.spans)
        if written is None:  # deferred (the disk refused it) or quarantined: logged; later stages skip it
            done.halted = True
            return
        self._announce(done, written)

    def _committed(self, done: CompletedSession, written: Written) -> None:
        done.written = written
        self._announce(done, written)
        if done.resume is not None:
            done.resume()

    def drain(self, timeout: float = 60.0) -> None:
        """At shutdown, before any stage closes: finish what the workers hold, run the stages after it."""
        self.store.drain(timeout)

    def _render_continued(self, key: str) -> None:
        """A flagged continuation (`<key>~N`, late records after the first part's were dropped): the part it
        continues is evidence of the same incident, so it is rendered too when it was kept as records."""
        try:
            written = self.store.render(key)
        except (ValueError, OSError) as e:
            log.warning("session %s: not rendered for its flagged continuation: %s", shown(key), e)
            return
        if written is not None and not self.ctx.quiet:
            self.ctx.emit(f"rendered {written.path} (revision {written.revision}): its continuation was flagged")

    def _announce(self, done: CompletedSession, written: Written) -> None:
        session = done.session
        if not self.ctx.quiet:
            state = "complete" if session.complete else "INCOMPLETE"
            flag = f", flagged {shown(session.flag_ref)}" if session.flagged else ""
            kept = "" if written.entry.get("rendered", True) else ", records only: wt-otel sessions render"
            self.ctx.emit(f"wrote {written.path} (revision {written.revision}, {state}{flag}{kept})")
        if session.flagged and "~" in session.key:
            self._render_continued(session.key.split("~", 1)[0])
        for callback in self.ctx.on_written:
            callback(written)

    def close(self) -> None:
        self.store.close()


def _create(data_dir: Path, ctx: StageContext, _next: None) -> DataDirStage:
    """Opens (and locks, and repairs) the data dir; the assembler asks the store which keys exist.

    `datadir.render: flagged` keeps unflagged sessions as records, except with the redactor on: records are
    not redacted, so every session is rendered (redacted) then, and the log says so."""
    config = getattr(ctx.serve_config, "datadir", None)
    render, workers, max_pending = (config.render, config.workers, config.max_pending) if config else ("all", 0, 256)
    redactor = getattr(ctx.serve_config, "redactor", None)
    stages = getattr(getattr(ctx.serve_config, "pipeline", None), "stages", [])
    if render == "flagged" and redactor is not None and redactor.enabled and "redactor" in stages:
        ctx.warn("datadir.render: flagged is ignored while the redactor is on (records are kept unredacted): "
                 "every session is rendered, redacted")
        render = "all"
    durability = getattr(ctx.serve_config, "durability", None)
    store = DataDirStore(data_dir, ctx.metrics, render=render, workers=workers, max_pending=max_pending,
                         archive_gone=bool(getattr(durability, "enabled", False)))
    ctx.store = store
    ctx.recovery.extend(store.recovery)
    stage = DataDirStage(store, ctx)
    store.on_committed = stage._committed
    return stage


# config section `data_dir` (a path; no model of its own)
STAGE = StageType("datadir", "session", _create, None, section="data_dir",
                  description="write each session revision to <data_dir>/sessions/<slug>/ and the index")
