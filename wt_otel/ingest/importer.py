"""`wt-otel import`: dump files in, one scenario directory per session out.

Reading comes first and completely, writing second: with `strict`, a corrupt
input aborts before anything is written. Each scenario directory appears
atomically, so a failure leaves whole scenarios or none.

Two passes (docs/architecture.md, "import"): pass 1 (`dumpindex`) reads every
dump once and keeps only which records make up which session and where they
are; pass 2 (`importbatch`) builds, renders and stages the sessions in batches,
in `jobs` worker processes; meanwhile, in output order, each built session gets its
slug and its staged directory is moved into place (`_Placer`; with `strict`, only once
every session is built and judged). The files are byte for byte
what the single-process import writes (`_import_serial`, still used for sinks
that only have `write()`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from wt_otel._util.fsutil import DirectoryExists, place_directory, unique_slug
from wt_otel._util.tuning import gc_tuned
from wt_otel.ingest.diagnostics import explain_group
from wt_otel.ingest.dumpindex import DumpIndex, Frame, Group
from wt_otel.ingest.dumps import LineError, detect_format, read_dump, read_proto_frames, scan_message
from wt_otel.ingest.flags import FlagRules
from wt_otel.ingest.importbatch import (
    MAX_REASONS,
    DirectorySink,
    GroupResult,
    Settings,
    init_worker,
    is_directory_sink,
    later_incidents,
    run_batch,
    run_batch_in_worker,
    scenario_name,
)
from wt_otel.ingest.sessions import SessionGrouper, attach_logs, build_session, merge_continuations, witnessed
from wt_otel.model.session import Session, ToolExecution

BATCH_SESSIONS = 200  # sessions per pass-2 batch: enough to read each message about once, few enough to spread
BATCH_BYTES = 16 * 1024 * 1024  # ...and about this much of their records at a time (or the one session larger)
FORMATS = ("auto", "otlp-json", "otlp-proto", "agents-jsonl", "generic-jsonl", "jaeger-json", "wtin")


class SessionWriter(Protocol):
    def write(self, session: Session, slug: str) -> Path: ...


class ImportAborted(Exception):
    """Raised in strict mode on the first input error; nothing has been written."""


@dataclass
class ImportReport:
    written: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # input and write errors, each with its place
    records: int = 0
    sessions: int = 0
    skipped: int = 0  # sessions not selected by --trace-id / --flagged-only
    empty: int = 0  # GenAI sessions with neither messages nor a witnessed tool call (content capture off)
    warnings: list[str] = field(default_factory=list)  # "<session>: <what was not understood>"
    why_none: str | None = None  # set when no GenAI session was found: the reason, in words
    stale_staging: list[str] = field(default_factory=list)  # staging folders of killed imports, removed from OUT

    @property
    def found_nothing(self) -> bool:
        return not self.written and not self.skipped and not self.errors

    @property
    def ok(self) -> bool:
        return not self.errors


def session_from_envelope(env: dict[str, Any], name: str) -> Session:
    """A Session from a Contract A envelope (already validated)."""
    source = env.get("source") or {}
    prov = env.get("provenance") or {}
    ref = source.get("ref")
    # without source.ref there is no origin: never invent one from the file name (0001: source is the
    # producer's own provenance, "null when the scenario wasn't seeded from a trace")
    s = Session(key=str(ref or name), trace_ids=list(prov.get("trace_ids") or ([str(ref)] if ref else [])))
    s.messages = [dict(m) for m in env["messages"]]
    s.tool_definitions = list(env.get("tool_definitions") or [])
    s.system_instructions = list(env.get("system_instructions") or [])
    s.witnessed_calls = [
        ToolExecution(tool_name=w["tool_name"], args=w["args"], result=w.get("result"),
                      tool_call_id=w.get("tool_call_id"), span_id=w.get("span_id") or "",
                      error=w.get("error"), correlation=w.get("correlation") or "none")
        for w in env.get("witnessed_calls") or []
    ]
    sess = env["session"]
    s.model, s.provider, s.sampler = sess["model"], sess.get("provider"), dict(sess.get("sampler") or {})
    s.service_name = source.get("system")
    s.flagged, s.flag_ref = bool(source.get("ref")), source.get("ref")
    s.dialects = ["wtin"]
    s.custom_spans = [c for c in env.get("custom_spans") or [] if isinstance(c, dict)]
    if not ref:
        s.warnings.append(NO_REF_WARNING)
    return s


NO_REF_WARNING = ("the envelope has no source.ref: the scenario carries no origin:<ref> tag and its ledger "
                  "rows no origin (add source.ref to the envelope to trace results back to the incident)")


def _envelope_sessions(path: Path, report: ImportReport) -> Iterator[Session]:
    from wt_otel.contracts import validate_data

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        report.errors.append(f"{path}: cannot read envelope: {e}")
        return
    problems = validate_data("envelope", data) if isinstance(data, dict) else ["not a JSON object"]
    if problems:
        report.errors.extend(f"{path}: {p}" for p in problems)
        return
    yield session_from_envelope(data, path.name.removesuffix(".json").removesuffix(".wtin"))


def import_dumps(
    paths: list[Path],
    writer: SessionWriter,
    fmt: str = "auto",
    trace_ids: tuple[str, ...] = (),
    flagged_only: bool = False,
    strict: bool = False,
    progress: Callable[[str, int], None] | None = None,
    flag_rules: FlagRules | None = None,
    jobs: int = 1,
    batch_sessions: int = BATCH_SESSIONS,
    batch_bytes: int = BATCH_BYTES,
) -> ImportReport:
    """Read every dump, assemble sessions, write the selected ones. Never raises on bad input
    unless `strict` (then `ImportAborted`, before any write). Incidents are what `flag_rules` say
    (serve's `flagger:` section; default: its default rules), exactly as in `wt-otel serve`.

    `jobs`: worker processes for building and rendering (1, the default: in this process; an input of one
    batch always runs in this process). Workers are forks of this process on Linux when it runs no other
    thread; otherwise they import the caller's `__main__` module, as every multiprocessing start method
    but fork does: a script that passes `jobs` > 1 must guard its entry point with
    `if __name__ == "__main__":` (`wt-otel import` defaults to the CPU count). A batch is at
    most `batch_sessions` sessions and, beyond its first session, `batch_bytes` of their records: a
    worker holds one batch at a time."""
    sink = cast(DirectorySink, writer)
    if not is_directory_sink(writer) or not _writable(sink.out):
        # a sink that only writes, or an output folder that cannot be made: the single-process path reports
        # that per session, as it always did
        return _import_serial(paths, writer, fmt, trace_ids, flagged_only, strict, progress, flag_rules)
    made_out = not sink.out.exists()
    if jobs > 1 and _input_bytes(paths) >= EARLY_WORKERS_BYTES:
        _start_forkserver(settings_module=type(writer).__module__)
    report = ImportReport()
    ready: list[Session] = []
    with DumpIndex() as index:
        for path in paths:
            kind = detect_format(path) if fmt == "auto" else fmt
            if kind == "wtin":
                before = len(report.errors)
                ready.extend(_envelope_sessions(path, report))
                if strict and len(report.errors) > before:
                    raise ImportAborted(report.errors[before])
                continue
            frames = read_proto_frames(path) if kind == "otlp-proto" else None
            if frames is None:
                for item in read_dump(path, kind):
                    if isinstance(item, LineError):
                        _line_error(report, item, strict)
                        continue
                    index.add_record(item)
                    _progress_records(progress, index.records - 1, index.records)
                continue
            for frame in frames:
                if isinstance(frame, LineError):
                    _line_error(report, frame, strict)
                    continue
                number, offset, data = frame
                try:
                    logs, count, found = scan_message(data)
                except ValueError as e:
                    _line_error(report, LineError(os.fspath(path), number, str(e)), strict)
                    continue
                before_records = index.records
                index.add_frame(os.fspath(path), offset, len(data), logs, count, found)
                _progress_records(progress, before_records, index.records)
        report.records = index.records
        groups = index.groups()
        sink.out.mkdir(parents=True, exist_ok=True)
        report.stale_staging = remove_stale_staging(sink.out)
        staging = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{_HOST}-{os.getpid()}-", dir=sink.out)
        try:
            settings = Settings(sink, flag_rules, frozenset(t.lower() for t in trace_ids), flagged_only, staging,
                                index.spill_path)
            placer = _Placer(report, sink, ready, groups, index.frames, settings, progress)
            if strict:  # judged whole before anything is written
                results = _pass2(groups, index.frames, settings, jobs, batch_sessions, batch_bytes, progress)
                placer.judge(results)
                placer.start()
                placer.add(list(results.values()), errors=False)
            else:  # placed while the workers build the rest
                placer.start()
                _pass2(groups, index.frames, settings, jobs, batch_sessions, batch_bytes, progress, placer.add)
            placer.finish()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            if made_out and not any(sink.out.iterdir()):  # nothing written: no folder, as before
                sink.out.rmdir()
    return report


STAGING_PREFIX = ".wt-import-"  # + host + "-" + pid + "-" + random: pass 2's scratch in OUT, removed at the end
STALE_STAGING_AGE = 24 * 3600.0  # a staging folder of another host (a shared volume), or without a pid: stale past it
_HOST = re.sub(r"[^A-Za-z0-9]+", "_", socket.gethostname())[:40] or "host"
_STAGING = re.compile(re.escape(STAGING_PREFIX) + r"(?:(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-)?[^/]*\Z")


def remove_stale_staging(out: Path, now: float | None = None) -> list[str]:
    """Remove the staging folders killed imports left in `out` (kill -9 runs no `finally`); their names.

    Safe: a folder is ours by its name alone (`.wt-import-HOST-PID-...`); one of this host whose process is
    gone is removed; one of this host whose pid is alive is left (it may be an import running now, even a
    reused pid); one of another host (a volume shared between machines: its pids mean nothing here), or
    named by an older version without a pid, only once nothing in it changed for `STALE_STAGING_AGE`."""
    removed: list[str] = []
    now = time.time() if now is None else now
    try:
        entries = list(os.scandir(out))
    except OSError:
        return removed
    for entry in entries:
        m = _STAGING.match(entry.name)
        if m is None or not entry.is_dir(follow_symlinks=False):
            continue
        if m["pid"] is not None and m["host"] == _HOST:
            if _alive(int(m["pid"])):
                continue
        else:
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime < STALE_STAGING_AGE:
                    continue
            except OSError:
                continue
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.exists(entry.path):
            removed.append(entry.name)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists (on this host)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


EARLY_WORKERS_BYTES = 2 * BATCH_BYTES  # inputs this large surely make several batches: start the workers' server early


def _input_bytes(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total


def _can_fork() -> bool:
    """Whether pass 2's workers may be forks of this process: on Linux, with no thread but this one
    (a fork copies only the calling thread, so a lock another thread held would stay locked in the
    child; `wt-otel import` on a terminal runs the progress display's thread)."""
    import sys
    import threading

    return sys.platform == "linux" and threading.active_count() == 1


def _pool_context(writer_module: str) -> Any:
    """The multiprocessing context pass 2's workers come from. A fork when `_can_fork()`: the workers
    start with everything this process imported, instead of a server process importing it all again
    (~0.5 s of CPU, on machines with few cores taken from pass 1 and 2). Otherwise forkserver, so no
    fork of a threaded process: the server imports the pass-2 modules once, and the main module (the
    `wt-otel` script) too, so every worker starts warm instead of importing them again."""
    import multiprocessing

    if _can_fork():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", "wt_otel.ingest.importbatch", writer_module])
    return context


def _start_forkserver(settings_module: str) -> None:
    """Start the server that forks pass 2's workers now, so that its imports (a few hundred ms)
    overlap pass 1 instead of delaying the first batch. Only a large input does this: a small one
    may make a single batch, run in this process, and then the server would be started for nothing;
    workers forked from this process (`_can_fork`) need no server."""
    from multiprocessing import forkserver

    if _pool_context(settings_module).get_start_method() != "forkserver":
        return
    try:
        forkserver.ensure_running()
    except OSError:  # pass 2 tries again, and reports what goes wrong then
        return


def _writable(out: Path) -> bool:
    """Whether `out` is, or can be made, a folder to stage in (tried without leaving anything behind)."""
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def _line_error(report: ImportReport, item: LineError, strict: bool) -> None:
    msg = f"{item.path}:{item.line}: {item.message}"
    if strict:
        raise ImportAborted(msg)
    report.errors.append(msg)


def _progress_records(progress: Callable[[str, int], None] | None, before: int, after: int) -> None:
    """Every 10,000th record, as the record-by-record loop reported them."""
    if progress:
        for n in range((before // 10000 + 1) * 10000, after + 1, 10000):
            progress("records", n)


def _batches(groups: list[Group], frames: list[Frame], size: int, max_bytes: int) -> list[list[Group]]:
    """Groups that arrived together, `size` at a time (fewer when their records add up to `max_bytes`)."""
    out: list[list[Group]] = []
    batch: list[Group] = []
    seen: set[int] = set()
    nbytes = 0
    for group in sorted(groups, key=lambda g: (g.first, g.index)):
        batch.append(group)
        nbytes += group.spilled
        for f in group.frames:
            if f not in seen:
                seen.add(f)
                nbytes += frames[f].length
        if len(batch) >= size or nbytes >= max_bytes:
            out.append(batch)
            batch, seen, nbytes = [], set(), 0
    if batch:
        out.append(batch)
    return out


TAIL_PIECES = 4  # the last batches are split in this many pieces


def _even_tail(batches: list[list[Group]], workers: int) -> list[list[Group]]:
    """The last `workers` batches split in `TAIL_PIECES`: workers take batches as they finish, so the last
    one to start decides when pass 2 ends; with small batches at the end the others wait less for it.
    (Which groups share a batch changes nothing in the output: each session is built alone.)"""
    if workers <= 1 or len(batches) <= workers:
        return batches
    head, tail = batches[:-workers], batches[-workers:]
    for batch in tail:
        step = -(-len(batch) // TAIL_PIECES)
        head.extend(batch[i:i + step] for i in range(0, len(batch), step))
    return head


def _pass2(groups: list[Group], frames: list[Frame], settings: Settings, jobs: int, size: int,
           max_bytes: int, progress: Callable[[str, int], None] | None,
           on_results: Callable[[list[GroupResult]], None] | None = None) -> dict[int, GroupResult]:
    """Every group's result; `on_results` gets each batch's as it is done (in the order batches finish),
    so the main process can place finished sessions while workers build the rest (it then reports the
    progress)."""
    batches = _batches(groups, frames, max(1, size), max_bytes)
    workers = min(jobs, len(batches))
    batches = _even_tail(batches, workers)
    results: dict[int, GroupResult] = {}
    done = 0

    def collect(found: list[GroupResult]) -> None:
        nonlocal done
        for r in found:
            results[r.index] = r
            done += len(r.sessions)
        if on_results is not None:
            on_results(found)
        elif progress:
            progress("sessions", done)

    def frames_of(batch: list[Group]) -> dict[int, Frame]:
        return {f: frames[f] for g in batch for f in g.frames}

    if workers <= 1:
        with gc_tuned():
            for batch in batches:
                collect(run_batch(batch, frames_of(batch), settings))
        return results
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = _pool_context(type(settings.writer).__module__)
    with gc_tuned(), ProcessPoolExecutor(workers, mp_context=context, initializer=init_worker,
                                         initargs=(settings,)) as pool:
        futures = [pool.submit(run_batch_in_worker, batch, frames_of(batch)) for batch in batches]
        try:
            for future in as_completed(futures):
                collect(future.result())
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return results


class _Placer:
    """The single-process loop's slugs, errors, warnings and counts, in its order: envelopes first, then
    sessions by group (staged directories move into place; a session pass 2 could not finish, a slug
    another session took, is rendered here), then joined continuations. Without `strict` each group is
    placed as soon as it and every group before it are built, while the workers build the rest; with
    `strict` every warning is judged before anything is written (`judge`)."""

    def __init__(self, report: ImportReport, sink: DirectorySink, ready: list[Session], groups: list[Group],
                 frames: list[Frame], settings: Settings, progress: Callable[[str, int], None] | None) -> None:
        self.report, self.sink, self.groups, self.frames = report, sink, groups, frames
        self.settings, self.progress = settings, progress
        self.taken: set[str] = set()
        self.reasons: list[tuple[int, str]] = []
        self.unnamed: list[Session] = []
        self.direct = [x for s in ready for x in (s, *later_incidents(s))]
        self.by_index = {g.index: g for g in groups}
        self.pending: dict[int, GroupResult] = {}
        self.next = 0  # position in `groups` of the next group to place
        self.out = os.fspath(sink.out)
        self.joined: list[Session] | None = None  # joined continuations, once joined (joining changes them)

    def judge(self, results: dict[int, GroupResult]) -> None:
        """--strict: every build error and warning, before anything is written (ImportAborted on the first)."""
        ordered = [results[g.index] for g in self.groups]
        for r in ordered:
            if r.error is not None:
                self.report.errors.append(r.error)
        self.joined = joined = self._join([r.unnamed for r in ordered if r.unnamed is not None])
        warned = [f"session {s.key}: {w}" for s in self.direct for w in s.warnings]
        warned += [f"session {st.key}: {w}" for r in ordered for st in r.sessions
                   for w in st.warnings[:st.strict_warnings]]
        warned += [f"session {s.key}: {w}" for s in joined for w in s.warnings]
        if warned:
            raise ImportAborted(f"{len(warned)} warning(s), e.g. {warned[0]}")

    def start(self) -> None:
        for session in self.direct:
            self._write_direct(session)

    def add(self, found: list[GroupResult], errors: bool = True) -> None:
        """Results of a batch; every group whose turn has come is placed (`errors`: its build error reported)."""
        for r in found:
            self.pending[r.index] = r
        while self.next < len(self.groups) and self.groups[self.next].index in self.pending:
            self._place(self.pending.pop(self.groups[self.next].index), errors)
            self.next += 1

    def finish(self) -> None:
        for session in self._join(self.unnamed) if self.joined is None else self.joined:
            self._write_direct(session)
        report = self.report
        if report.found_nothing and not self.direct:
            report.why_none = (max(self.reasons)[1] if self.reasons else "the input holds no spans")

    @staticmethod
    def _join(unnamed: list[Session]) -> list[Session]:
        """Sessions without a conversation id that continue one another, joined (once: it changes them)."""
        return [x for s in merge_continuations(unnamed) for x in (s, *later_incidents(s))]

    def _write_direct(self, session: Session) -> None:
        report, settings = self.report, self.settings
        report.sessions += 1
        report.warnings.extend(f"{session.flag_ref or session.conversation_id or session.key}: {w}"
                               for w in session.warnings)
        if (settings.wanted and not settings.wanted & {t.lower() for t in session.trace_ids}) or (
                settings.flagged_only and not session.flagged):
            report.skipped += 1
            return
        slug = unique_slug(scenario_name(session), session.key, self.taken)
        try:
            report.written.append(self.sink.write(session, slug))  # type: ignore[attr-defined]
        except DirectoryExists as e:
            report.errors.append(str(e))
        except Exception as e:  # noqa: BLE001 - one bad session must not sink the others (nor the report)
            report.errors.append(f"session {session.key}: not written: {type(e).__name__}: {e}")
        if self.progress:
            self.progress("sessions", len(report.written))

    def _place(self, r: GroupResult, errors: bool) -> None:
        report, sink = self.report, self.sink
        report.empty += r.empty
        if r.reason is not None and len(self.reasons) < MAX_REASONS:
            self.reasons.append(r.reason)
        if r.unnamed is not None:
            self.unnamed.append(r.unnamed)
        if errors and r.error is not None:
            report.errors.append(r.error)
        for number, item in enumerate(r.sessions):
            report.sessions += 1
            report.warnings.extend(f"{item.name}: {w}" for w in item.warnings)
            if not item.selected:
                report.skipped += 1
                continue
            slug = unique_slug(item.slug_text, item.key, self.taken)
            if slug != item.slug and item.error is None:  # another session took its slug: render it again
                group = self.by_index[r.index]
                again = run_batch([group], {f: self.frames[f] for f in group.frames}, self.settings,
                                  {(r.index, number): slug})
                item = again[0].sessions[number]
            if item.error is not None:
                report.errors.append(item.error)
            else:
                dest = sink.out / slug
                try:
                    staged = cast(str, item.staged)
                    target = os.path.join(self.out, slug)
                    if os.path.exists(target):  # replace (--force) or refuse
                        place_directory(Path(staged), dest, force=sink.force)
                    else:  # the common case, without place_directory's Path calls
                        self._rename(staged, target, dest)
                    report.written.append(dest)
                except DirectoryExists as e:
                    report.errors.append(str(e))
                except Exception as e:  # noqa: BLE001 - one bad session must not sink the others
                    report.errors.append(f"session {item.key}: not written: {type(e).__name__}: {e}")
            if self.progress:
                self.progress("sessions", len(report.written))

    def _rename(self, staged: str, target: str, dest: Path) -> None:
        """Move a staged directory to a free place in OUT; OUT itself is checked only when the move fails
        (an OUT removed or replaced during the import is made again, by `place_directory`, as before)."""
        try:
            os.rename(staged, target)
        except OSError:
            if os.path.isdir(self.out):
                raise
            place_directory(Path(staged), dest, force=self.sink.force)


def _import_serial(
    paths: list[Path],
    writer: SessionWriter,
    fmt: str = "auto",
    trace_ids: tuple[str, ...] = (),
    flagged_only: bool = False,
    strict: bool = False,
    progress: Callable[[str, int], None] | None = None,
    flag_rules: FlagRules | None = None,
) -> ImportReport:
    """`import_dumps` in one process, through `SessionGrouper`'s spill: for sinks that only `write()`."""
    report = ImportReport()
    wanted = {t.lower() for t in trace_ids}
    ready: list[Session] = []
    with SessionGrouper() as grouper:
        for path in paths:
            kind = detect_format(path) if fmt == "auto" else fmt
            if kind == "wtin":
                before = len(report.errors)
                ready.extend(_envelope_sessions(path, report))
                if strict and len(report.errors) > before:
                    raise ImportAborted(report.errors[before])
                continue
            for item in read_dump(path, kind):
                if isinstance(item, LineError):
                    msg = f"{item.path}:{item.line}: {item.message}"
                    if strict:
                        raise ImportAborted(msg)
                    report.errors.append(msg)
                    continue
                grouper.add(item)
                report.records += 1
                if progress and report.records % 10000 == 0:
                    progress("records", report.records)
        taken: set[str] = set()
        reasons: list[tuple[int, str]] = []  # (how telling, why) for groups that yielded no session

        def sessions() -> Iterator[Session]:
            yield from ready
            unnamed: list[Session] = []  # no conversation id: may continue one another (held to the end)
            for group in grouper.groups():
                try:
                    session = build_session(group, flag_rules=flag_rules)
                except Exception as e:  # noqa: BLE001 - a hostile trace costs its own session only
                    traces = sorted({r.trace_id for r in group if r.trace_id})
                    report.errors.append(f"trace {', '.join(traces[:3])}: session not built: {type(e).__name__}: {e}")
                    continue
                if session is not None and (session.messages or any(map(witnessed, session.witnessed_calls))):
                    if session.conversation_id:
                        yield session
                    else:
                        unnamed.append(session)
                    continue
                if session is not None:
                    report.empty += 1
                if len(reasons) < 50:
                    try:
                        reasons.append(explain_group(attach_logs(group)))
                    except Exception:  # noqa: BLE001, S112 - an explanation must not cost the import
                        continue
            yield from merge_continuations(unnamed)

        found: Iterator[Session] | list[Session] = (x for s in sessions() for x in (s, *later_incidents(s)))
        if strict:  # every warning is fatal: judge all sessions before writing any
            found = list(found)
            warned = [f"session {s.key}: {w}" for s in found for w in s.warnings]
            if warned:
                raise ImportAborted(f"{len(warned)} warning(s), e.g. {warned[0]}")
        for session in found:
            report.sessions += 1
            report.warnings.extend(f"{session.flag_ref or session.conversation_id or session.key}: {w}"
                                   for w in session.warnings)
            if (wanted and not wanted & {t.lower() for t in session.trace_ids}) or (
                    flagged_only and not session.flagged):
                report.skipped += 1
                continue
            slug = unique_slug(scenario_name(session), session.key, taken)
            try:
                report.written.append(writer.write(session, slug))
            except DirectoryExists as e:
                report.errors.append(str(e))
            except Exception as e:  # noqa: BLE001 - one bad session must not sink the others (nor the report)
                report.errors.append(f"session {session.key}: not written: {type(e).__name__}: {e}")
            if progress:
                progress("sessions", len(report.written))
        if report.found_nothing and not ready:
            report.why_none = (max(reasons)[1] if reasons else "the input holds no spans")
    return report
