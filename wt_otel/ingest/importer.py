"""`wt-otel import`: dump files in, one scenario directory per session out.

Reading comes first and completely (records spill to disk, see
`SessionGrouper`), writing second: with `strict`, a corrupt input aborts
before anything is written. Each scenario directory appears atomically, so a
failure leaves whole scenarios or none.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wt_otel._util.fsutil import DirectoryExists, unique_slug
from wt_otel.ingest.diagnostics import explain_group
from wt_otel.ingest.dumps import LineError, detect_format, read_dump
from wt_otel.ingest.flags import FlagRules
from wt_otel.ingest.sessions import SessionGrouper, attach_logs, build_session, merge_continuations, witnessed
from wt_otel.model.session import Session, ToolExecution

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


def later_incidents(session: Session) -> Iterator[Session]:
    """One conversation flagged several times (each trace with its own incident id): every id after the first
    is a session of its own (key `<key>+<id>`), so each incident becomes its own scenario."""
    for ref in session.flag_refs:
        if ref != session.flag_ref:
            yield dataclasses.replace(session, key=f"{session.key}+{ref}", flag_ref=ref, flag_refs=[ref],
                                      flag_reason=f"{session.flag_reason} (a later incident, {ref}, in the "
                                                  f"conversation of {session.flag_ref})")


def import_dumps(
    paths: list[Path],
    writer: SessionWriter,
    fmt: str = "auto",
    trace_ids: tuple[str, ...] = (),
    flagged_only: bool = False,
    strict: bool = False,
    progress: Callable[[str, int], None] | None = None,
    flag_rules: FlagRules | None = None,
) -> ImportReport:
    """Read every dump, assemble sessions, write the selected ones. Never raises on bad input
    unless `strict` (then `ImportAborted`, before any write). Incidents are what `flag_rules` say
    (serve's `flagger:` section; default: its default rules), exactly as in `wt-otel serve`."""
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
            slug = unique_slug(session.flag_ref or session.conversation_id or session.key, session.key, taken)
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
