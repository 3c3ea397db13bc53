"""Pass 2 of `wt-otel import`, one batch of sessions at a time, in a worker process or in-process.

A batch is a few hundred session groups that arrived together (`dumpindex.Group`). The batch reads
and decodes only its messages (only the records of its traces become `SpanRecord`s), builds each
session exactly as the single-process import did, renders its files with the slug it will most
likely get, and writes them to a staging directory next to the output. Slugs depend on every
session before it (`unique_slug`), so the importer decides them afterwards, in output order, and
moves each staged directory into place; the rare session whose slug turned out different is
rendered again (`run_batch` with `slugs`).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from wt_otel._util.fsutil import readable_name, safe_slug
from wt_otel._util.tuning import tune_gc
from wt_otel.ingest.diagnostics import explain_group
from wt_otel.ingest.dumpindex import Frame, Group
from wt_otel.ingest.dumps import DumpReadError, read_frame
from wt_otel.ingest.flags import FlagRules
from wt_otel.ingest.otlp import logs_from_request, spans_from_request
from wt_otel.ingest.sessions import attach_logs, build_session, witnessed
from wt_otel.model.session import Session
from wt_otel.model.spans import LogRecord, SpanRecord

__all__ = ["DirectorySink", "GroupResult", "Settings", "Staged", "is_directory_sink", "later_incidents", "run_batch",
           "stage"]

MAX_REASONS = 50  # groups without a session explained, for "no GenAI session found: <why>"


class DirectorySink(Protocol):
    """A sink whose output per session is one directory of files (`ScenarioDirWriter`): the parallel
    import renders in workers and moves the directories into place itself."""

    out: Path
    force: bool

    def files(self, session: Session, slug: str) -> dict[str, str | bytes]: ...


def is_directory_sink(writer: object) -> bool:
    return callable(getattr(writer, "files", None)) and hasattr(writer, "out") and hasattr(writer, "force")


@dataclass(slots=True)
class Settings:
    """What every batch needs; sent once to each worker."""

    writer: Any  # a DirectorySink
    flag_rules: FlagRules | None
    wanted: frozenset[str]  # --trace-id (lowercase)
    flagged_only: bool
    staging: str
    spill_path: str | None


@dataclass(slots=True)
class Staged:
    """One session of a group, as the write loop will see it."""

    key: str
    name: str  # flag_ref or conversation_id or key: what warnings are prefixed with
    slug_text: str  # what the slug is made of (`scenario_name`)
    warnings: list[str]  # the session's warnings at its turn in the write loop
    strict_warnings: int  # how many of them it had before anything of its group was rendered
    selected: bool
    slug: str | None = None  # the slug it was rendered with
    staged: str | None = None  # the directory holding its files
    error: str | None = None  # rendering failed: the write loop reports it


@dataclass(slots=True)
class GroupResult:
    index: int
    sessions: list[Staged] = field(default_factory=list)
    unnamed: Session | None = None  # no conversation id: may continue another session (joined by the importer)
    error: str | None = None  # the session could not be built
    empty: bool = False  # built, but with no content
    reason: tuple[int, str] | None = None  # why no session came out of it


_settings: Settings | None = None


def init_worker(settings: Settings) -> None:
    """Process-pool initializer: the settings stay in the worker for all its batches; the GC is tuned for
    batch work (`_util.tuning`; a forked worker has it from the importer already)."""
    global _settings
    _settings = settings
    tune_gc()


def run_batch_in_worker(groups: list[Group], frames: dict[int, Frame]) -> list[GroupResult]:
    assert _settings is not None, "init_worker was not called"
    return run_batch(groups, frames, _settings)


def run_batch(groups: list[Group], frames: dict[int, Frame], settings: Settings,
              slugs: dict[tuple[int, int], str] | None = None) -> list[GroupResult]:
    """Build, render and stage every session of `groups` (in group order); `slugs` forces the slug of
    (group index, session number) and renders again (the rest of the group is rendered too, since a
    render can add warnings the later sessions of the group share)."""
    records = _read(groups, frames, settings.spill_path)
    out = []
    reasons = 0
    for group in sorted(groups, key=lambda g: g.index):
        result = GroupResult(group.index)
        out.append(result)
        recs = records.get(group.index, [])
        try:
            session = build_session(recs, flag_rules=settings.flag_rules)
        except Exception as e:  # noqa: BLE001 - a hostile trace costs its own session only
            traces = sorted({r.trace_id for r in recs if r.trace_id})
            result.error = f"trace {', '.join(traces[:3])}: session not built: {type(e).__name__}: {e}"
            continue
        if session is not None and (session.messages or any(map(witnessed, session.witnessed_calls))):
            if not session.conversation_id:
                result.unnamed = session
                continue
            items = [session, *later_incidents(session)]
            before = [len(s.warnings) for s in items]
            for i, item in enumerate(items):
                forced = slugs.get((group.index, i)) if slugs else None
                result.sessions.append(stage(item, settings, f"{group.index}-{i}{'-r' if slugs else ''}",
                                             before[i], forced))
            continue
        result.empty = session is not None
        if reasons < MAX_REASONS:
            try:
                result.reason = explain_group(attach_logs(recs))
                reasons += 1
            except Exception:  # noqa: BLE001, S112 - an explanation must not cost the import
                continue
    return out


def later_incidents(session: Session) -> Iterator[Session]:
    """One conversation flagged several times (each trace with its own incident id): every id after the first
    is a session of its own (key `<key>+<id>`), so each incident becomes its own scenario."""
    for ref in session.flag_refs:
        if ref != session.flag_ref:
            yield dataclasses.replace(session, key=f"{session.key}+{ref}", flag_ref=ref, flag_refs=[ref],
                                      flag_reason=f"{session.flag_reason} (a later incident, {ref}, in the "
                                                  f"conversation of {session.flag_ref})")


def scenario_name(session: Session) -> str:
    """The name a session's scenario folder starts from: its incident ref or a readable conversation id as
    they are, else (a trace id, a UUID) its first user turn plus a short id (`fsutil.readable_name`)."""
    turns = session.user_turns
    return readable_name(session.flag_ref or session.conversation_id or session.key, turns[0] if turns else None)


def stage(session: Session, settings: Settings, name: str, strict_warnings: int | None = None,
          slug: str | None = None) -> Staged:
    """Render one session into `<staging>/<name>` (when selected) with `slug` (default: its slug
    when no other session takes it first)."""
    text = session.flag_ref or session.conversation_id or session.key
    item = Staged(key=session.key, name=text, slug_text=scenario_name(session), warnings=list(session.warnings),
                  strict_warnings=len(session.warnings) if strict_warnings is None else strict_warnings,
                  selected=not ((settings.wanted and not settings.wanted & {t.lower() for t in session.trace_ids})
                                or (settings.flagged_only and not session.flagged)))
    if not item.selected:
        return item
    item.slug = slug or safe_slug(item.slug_text)
    try:
        files = settings.writer.files(session, item.slug)
        path = os.path.join(settings.staging, name)
        os.mkdir(path)
        _write_files(path, files)
        item.staged = path
    except Exception as e:  # noqa: BLE001 - one bad session must not sink the others (nor the report)
        item.error = f"session {session.key}: not written: {type(e).__name__}: {e}"
    return item


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FD = os.open in os.supports_dir_fd  # (not on Windows)


def _write_files(path: str, files: dict[str, str | bytes]) -> None:
    """A session's files in its new staging directory; file names are the sink's constants, never trace text."""
    if not _DIR_FD:
        for file_name, data in files.items():
            _write_file(os.path.join(path, file_name), data.encode() if isinstance(data, str) else data)
        return
    folder = os.open(path, _FOLDER)
    try:
        for file_name, data in files.items():
            _write_file(file_name, data.encode() if isinstance(data, str) else data, folder)
    finally:
        os.close(folder)


def _write_file(name: str, data: bytes, folder: int | None = None) -> None:
    """A new file (`name` inside the directory open as `folder`), with plain system calls: no buffered file
    object (half the cost of `open()` for these few-KB files), no path to resolve again per file (a
    fifth of a session's file-writing time on tmpfs) and no fsync (import output can be made again)."""
    fd = os.open(name, _CREATE, 0o666, dir_fd=folder)
    try:
        written = os.write(fd, data)
        if written < len(data):  # a short write (a full disk answers with an error, not this): the rest
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _read(groups: list[Group], frames: dict[int, Frame], spill_path: str | None
          ) -> dict[int, list[SpanRecord | LogRecord]]:
    """Each group's records in arrival order, decoding only the records of the batch's traces."""
    owner = {t: g.index for g in groups for t in g.traces}
    raw = {bytes.fromhex(t) for g in groups if g.frames for t in g.traces if _hex32(t)}
    keyed: dict[int, list[tuple[tuple[int, int], SpanRecord | LogRecord]]] = {g.index: [] for g in groups}
    for fid in sorted({f for g in groups for f in g.frames}):
        frame = frames[fid]
        data = read_frame(frame.path, frame.offset, frame.length)
        request: Any = ExportLogsServiceRequest() if frame.logs else ExportTraceServiceRequest()
        try:
            request.ParseFromString(data)
        except Exception as e:
            raise DumpReadError(f"{frame.path}: changed during the import (message at byte {frame.offset}: "
                                f"{e})") from e
        found: Iterator[SpanRecord | LogRecord] = (logs_from_request(request, trace_ids=raw) if frame.logs
                                                   else spans_from_request(request, trace_ids=raw))
        for i, record in enumerate(found):
            g = owner.get(record.trace_id or "")
            if g is not None:
                keyed[g].append(((frame.seq, i), record))
    spilled = [t for g in groups if g.spilled for t in g.traces]  # (only some of them were spilled)
    if spilled and spill_path:
        db = sqlite3.connect(f"file:{spill_path}?mode=ro", uri=True)
        try:
            for i in range(0, len(spilled), 500):
                chunk = spilled[i:i + 500]
                marks = ",".join("?" * len(chunk))
                rows = db.execute(f"SELECT seq, trace_id, blob FROM rec WHERE trace_id IN ({marks})", chunk)
                for seq, trace_id, blob in rows:
                    keyed[owner[trace_id]].append(((seq, 0), pickle.loads(blob)))
        finally:
            db.close()
    out = {}
    for g, pairs in keyed.items():
        pairs.sort(key=lambda p: p[0])
        out[g] = [r for _, r in pairs]
    return out


def _hex32(text: str) -> bool:
    if len(text) != 32:
        return False
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True
