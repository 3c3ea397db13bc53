"""The session store: the one way a command lists, opens, renders and flags the sessions of a data dir.

serve keeps most sessions by reference (`datadir.render: flagged`, the default: an index line naming segment
entries) or as records (without the segment log), and renders only incidents. A reader that opened
`sessions/<slug>/incident.wtin.json` by itself saw only those, so `wt-otel surface drift` said "no sessions"
on a data dir full of them. Every reader goes through `SessionStore` instead:

    store = SessionStore(data_dir)          # NotADataDir without sessions.ndjsonl; never takes the lock
    store.list()                            # the latest revision of every session, in index order
    store.get("KEY|SLUG|DIR")               # one of them (ValueError naming a few known ones)
    store.session(stored)                   # the Session, built on demand from its envelope, records or segments
    store.envelope(stored)                  # its Contract A envelope: the file, or rendered in memory
    store.render([...]) / store.flag(...)   # write: through the data dir's writer (`DataDirStore`)
    SessionStore.merged([dir, ...])         # several data dirs read together (exporters/merged.py)

Reading never writes and never takes the data dir's lock, so it works while serve runs (the index is
append-only, a torn last line is skipped; segment entries an index line names were fsynced before it was
written). Writing needs the lock: `render` says serve holds it (`DataDirLocked`); `flag` then appends a
request to `flag-requests.ndjsonl`, which the running serve takes at its next tick (`DataDirStore.
take_flag_requests`), and `wait_flagged` watches the index for the revision serve writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wt_otel._util.clock import utc_now_iso
from wt_otel._util.journal import Journal
from wt_otel.exporters.datadir import (
    ENVELOPE,
    FLAG_REQUESTS,
    INDEX,
    SESSIONS,
    DataDirLocked,
    DataDirStore,
    Written,
    read_index,
    session_from_records,
    session_from_segments,
)
from wt_otel.exporters.envelope import envelope
from wt_otel.model.session import Session

if TYPE_CHECKING:
    from wt_otel.exporters.merged import MergedView

__all__ = ["DataDirLocked", "FlagOutcome", "NotADataDir", "SessionStore", "StoredSession"]

RENDERED, RECORDS, REFERENCE = "rendered", "records", "reference"


class NotADataDir(FileNotFoundError):
    """The directory holds no `sessions.ndjsonl`: not a data dir serve or the in-app processor wrote."""


@dataclass(frozen=True)
class StoredSession:
    """One session's latest revision, as its index line says: where it is and how it is kept."""

    key: str
    slug: str
    revision: int
    kept: str  # rendered (the six files) | records (records.otlp.pb) | reference (segment-log entries)
    flagged: bool
    flag_ref: str | None
    service: str | None
    started: str | None
    entry: dict[str, Any]

    @property
    def rendered(self) -> bool:
        return self.kept == RENDERED

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "slug": self.slug, "revision": self.revision, "kept": self.kept,
                "flagged": self.flagged, "flag_ref": self.flag_ref, "service": self.service,
                "started": self.started}


@dataclass(frozen=True)
class FlagOutcome:
    """What `flag` did: flagged here (`written`), or asked the serve that holds the data dir (`requested`)."""

    written: Written | None = None
    requested: StoredSession | None = None


def _stored(entry: dict[str, Any]) -> StoredSession:
    if entry.get("rendered") is False:
        kept = REFERENCE if isinstance(entry.get("segments"), list) else RECORDS
    else:
        kept = RENDERED
    return StoredSession(key=entry["key"], slug=entry["slug"], revision=int(entry.get("revision", 1)), kept=kept,
                         flagged=bool(entry.get("flagged")), flag_ref=entry.get("flag_ref"),
                         service=entry.get("service"), started=entry.get("started"), entry=entry)


class SessionStore:
    """A data dir's sessions, read from its index at open (`reload()` reads it again)."""

    def __init__(self, data_dir: Path | str) -> None:
        self.root = Path(data_dir)
        if not (self.root / INDEX).is_file():
            raise NotADataDir(f"{self.root} is not a wt-otel data dir (no {INDEX}: is it the --data-dir serve "
                              "writes?)")
        self.problems: list[str] = []
        self._latest: dict[str, StoredSession] = {}
        self.reload()

    @classmethod
    def merged(cls, data_dirs: Iterable[Path | str]) -> MergedView:
        """Several data dirs read together (serve instances behind a load balancer: exporters/merged.py):
        every session with its dir, and the conversations split across them. NotADataDir, or ValueError for
        a dir named twice."""
        from wt_otel.exporters.merged import MergedView

        return MergedView([cls(d) for d in data_dirs])

    def reload(self) -> None:
        read = read_index(self.root)
        self.problems = read.problems
        self._latest = {key: _stored(entry) for key, entry in read.latest().items()}

    # ---------------------------------------------------------------- reading (no lock)

    def list(self) -> list[StoredSession]:
        """The latest revision of every session, in the order the index first names them."""
        return list(self._latest.values())

    def get(self, name: str) -> StoredSession:
        """A session by key, slug or directory (`sessions/<slug>`); ValueError naming a few known ones."""
        found = self._latest.get(name)
        if found is None:
            slug = Path(name).name
            found = next((s for s in self._latest.values() if s.slug == slug), None)
        if found is None:
            known = ", ".join(s.slug for s in list(self._latest.values())[:10]) or "none"
            raise ValueError(f"no session {name!r} in {self.root / SESSIONS} (sessions: {known})")
        return found

    def directory(self, stored: StoredSession) -> Path:
        """`sessions/<slug>/` (it may not exist: a session kept by reference has none until rendered)."""
        return self.root / SESSIONS / stored.slug

    def session(self, stored: StoredSession) -> Session:
        """The session, built on demand: from the segment log or its records when kept, else from its envelope.
        ValueError when it cannot be read back (a segment retention removed, a damaged file)."""
        if stored.kept == REFERENCE:
            return session_from_segments(self.root, stored.entry, stored.key)
        if stored.kept == RECORDS:
            return session_from_records(self.directory(stored), stored.key)
        from wt_otel.ingest.importer import session_from_envelope

        return session_from_envelope(self.envelope(stored), stored.key)

    def envelope(self, stored: StoredSession) -> dict[str, Any]:
        """The session's Contract A envelope: its `incident.wtin.json` when rendered, else rendered in memory
        (nothing is written: a reader must not change the data dir, and serve may hold it)."""
        if stored.kept != RENDERED:
            return envelope(self.session(stored))
        path = self.directory(stored) / ENVELOPE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"session {stored.slug}: cannot read {path}: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"session {stored.slug}: {path} is not a JSON object")
        return data

    def envelopes(self) -> Iterable[tuple[StoredSession, dict[str, Any] | None, str | None]]:
        """(session, envelope, None) for each session, or (session, None, why) for one that cannot be read back."""
        for stored in self.list():
            try:
                yield stored, self.envelope(stored), None
            except ValueError as e:
                yield stored, None, str(e)

    # ---------------------------------------------------------------- writing (the data dir's writer)

    def writer(self) -> DataDirStore:
        """The data dir's writer (it takes the lock: `DataDirLocked` while serve runs on it). Close it."""
        return DataDirStore(self.root)

    def flag(self, name: str, ref: str | None = None) -> FlagOutcome:
        """Flag a session as an incident: here when the data dir is free, else by asking the serve that holds
        it (a line in `flag-requests.ndjsonl`; `wait_flagged` sees it done). ValueError: no such session."""
        stored = self.get(name)  # an unknown name is the caller's error, said now, not in serve's log
        try:
            writer = self.writer()
        except DataDirLocked:
            Journal(self.root / FLAG_REQUESTS).append({"session": stored.key, "ref": ref,
                                                       "requested_at": utc_now_iso()})
            return FlagOutcome(requested=stored)
        try:
            return FlagOutcome(written=writer.flag(stored.key, ref))
        finally:
            writer.close()

    def wait_flagged(self, stored: StoredSession, timeout: float, poll: float = 0.2) -> StoredSession | None:
        """The flagged revision serve wrote for a request about `stored`, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self.reload()
            now = self._latest.get(stored.key)
            if now is not None and now.revision > stored.revision and now.flagged:
                return now
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll)
