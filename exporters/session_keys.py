"""What the data-dir store knows of every session key it holds, in bounded memory.

Per key: its slug (chosen once, never changed), its latest revision, how that revision is kept
(rendered, raw records, or by reference to serve's segment log), which records it came from
(content digest, lowest segment position: restart dedupe) and the flag any revision had (a flag
holds for the later revisions: `wt-otel flag` is said once, and late spans do not undo it).

A serve that runs for months writes millions of keys; held in dicts they cost ~0.5 KiB each, forever. So
the most recently used keys live in memory (`hot` of them) and the rest in a private SQLite database
with a page cache of 8 MiB: a file beside the index (the data-dir store passes `path`: on the data dir's
own disk, sized with it, and never in a memory-backed /tmp), deleted when closed and replaced at the
next start; or, without a path, SQLite's own temporary file.

Keys are random (trace ids), so one B-tree over all of them costs a page read and write per insert
once it outgrows the cache (15 µs a key at 300,000 keys, growing). Keys leave memory instead into
generation tables of `rows_per_table` rows each, the newest of which fits the cache (~3 µs a key at any
count); a lookup asks every generation in one statement and takes the newest row. Lookups that reach
SQLite are rare: Bloom filters answer "never seen" for the new keys and slugs that make up nearly every
question, and grow with the count so that stays true (`_Bloom`). Keeping a session by reference costs
~18 µs at a million keys and ~32 µs at four (one fixed filter and a statement per generation: 100 µs at
two million, and climbing).

The table is derived state: the index (`sessions.ndjsonl`) is the truth, and the store rebuilds the
table from it at each start. So the database needs no durability (no fsync), and if it cannot be
written (a full disk) the keys simply stay in memory, with a warning, until it can.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("wt_otel.datadir")

RENDERED, RAW, INDEXED = "rendered", "raw", "indexed"  # how a key's latest revision is kept
NEW = "new"  # a key given its slug whose first revision is not written yet

_COLUMNS = "slug, revision, kept, content, pos, seq, line, flag_ref, flag_reason"
_UNION_MAX = 400  # generations one lookup statement asks (SQLite allows 500 terms in a compound SELECT)
_Row = tuple[str, int, str, str | None, int | None, int, int | None, str | None, str | None]


@dataclass(slots=True)
class KeyState:
    """One key's state; mutate it in place (the table writes it back when it leaves memory)."""

    slug: str
    revision: int = 0
    kept: str = NEW
    content: str | None = None  # digest of the records the latest revision was built from
    pos: int | None = None  # their lowest position in serve's segment log
    seq: int = 0  # first-seen order (index order)
    line: int | None = None  # byte offset of its latest index line, when kept by reference (read back on demand)
    flag_ref: str | None = None  # the flag of the latest flagged revision (ref, reason): flagged when the reason is set
    flag_reason: str | None = None

    @property
    def flagged(self) -> bool:
        return self.flag_reason is not None

    def note_flag(self, entry: dict[str, object]) -> None:
        """Remember the flag of a revision just indexed (an unflagged one leaves an earlier flag in place)."""
        if entry.get("flagged"):
            ref, reason = entry.get("flag_ref"), entry.get("flag_reason")
            self.flag_ref = ref if isinstance(ref, str) else None
            self.flag_reason = reason if isinstance(reason, str) else "flagged"


class SessionKeys:
    """key -> `KeyState`, and slug -> key: the `hot` most recently used in memory, the rest in SQLite.

    Not thread-safe: the store calls it under its lock. A state returned by `get`/`add` stays in memory
    until `hot // 4` other keys have been used after it, so a caller may hold it across a few calls.
    """

    def __init__(self, hot: int = 20_000, rows_per_table: int = 30_000, path: Path | None = None) -> None:
        self.hot = max(16, hot)
        self.rows_per_table = rows_per_table
        self._reserved: set[str] = set()  # names on disk that no key has (foreign directories): taken too
        self._seen_keys, self._seen_slugs = _Bloom(), _Bloom()
        self._mem: OrderedDict[str, KeyState] = OrderedDict()  # least recently used first
        self._by_slug: dict[str, str] = {}  # slug -> key, for the keys in memory
        self._seq = 0
        self._spill_at = self.hot  # past this many in memory, move the oldest quarter out
        self._tables: list[str] = []  # generation tables, oldest first; a key's newest row is its state
        self._rows = 0  # rows in the newest table
        self._path = path
        self._taken = _Taken(self)  # asked for every new key: one view, not one each time
        self._sql: dict[tuple[str, str, int], str] = {}  # `_newest`'s statements, by kind and tables
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a crash's leftover: derived state, rebuilt from the index
        self._db = sqlite3.connect(str(path) if path is not None else "",  # "": SQLite's private temp file
                                   check_same_thread=False, isolation_level=None)
        # no fsync (derived state); the rollback journal in memory, so a failed write (full) leaves the table whole
        self._db.executescript("PRAGMA journal_mode=MEMORY; PRAGMA synchronous=OFF; PRAGMA cache_size=-8192;")

    def __contains__(self, key: object) -> bool:
        return key in self._mem or (isinstance(key, str) and key in self._seen_keys and self._row(key) is not None)

    def get(self, key: str) -> KeyState | None:
        """The key's state (brought into memory), or None for a key never seen."""
        state = self._mem.get(key)
        if state is not None:
            self._mem.move_to_end(key)
            return state
        row = self._row(key) if key in self._seen_keys else None
        if row is None:
            return None
        return self._keep(key, KeyState(*row))

    def add(self, key: str, slug: str) -> KeyState:
        """A new key with its slug (see `taken` for choosing one), revision 0."""
        self._seq += 1
        self._seen_keys.add(key)
        self._seen_slugs.add(slug)
        return self._keep(key, KeyState(slug, seq=self._seq))

    def reserve(self, name: str) -> None:
        """A name on disk no key has (a directory start-up left alone): never given out as a slug."""
        self._reserved.add(name)

    def slug_taken(self, slug: str) -> bool:
        return slug in self._reserved or self.key_of(slug) is not None  # `key_of` asks `_by_slug` first

    def key_of(self, slug: str) -> str | None:
        """The key a slug was given to, or None."""
        key = self._by_slug.get(slug)
        if key is not None or slug not in self._seen_slugs:
            return key
        row = self._newest("key", slug)  # a key's slug never changes: any of its rows names it
        if row is None:
            return None
        return None if row[0] in self._mem else str(row[0])  # in memory: its slug is `_by_slug`'s

    @property
    def taken(self) -> _Taken:
        """For `unique_slug`: a slug is taken when a key has it or a directory bears it."""
        return self._taken

    def keys(self, kept: tuple[str, ...] | None = None) -> list[str]:
        """Every key (or those whose latest revision is kept one of these ways), in first-seen order."""
        self._spill(all_keys=True)
        latest: dict[str, tuple[int, str]] = {}  # key -> (seq, kept) of its newest row
        for table in reversed(self._tables):
            for key, seq, how in self._db.execute(f"SELECT key, seq, kept FROM {table}"):  # noqa: S608 - ours
                latest.setdefault(key, (seq, how))
        return [k for k, (_, how) in sorted(latest.items(), key=lambda kv: kv[1][0]) if kept is None or how in kept]

    def slugs(self, limit: int) -> list[str]:
        """A few slugs, sorted (error messages name some known sessions)."""
        self._spill(all_keys=True)
        found: set[str] = set()
        for table in self._tables:
            found.update(s for (s,) in self._db.execute(f"SELECT slug FROM {table} ORDER BY slug LIMIT ?",  # noqa: S608
                                                        (limit,)))
        return sorted(found)[:limit]

    def close(self) -> None:
        self._db.close()
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()

    # ------------------------------------------------------------------ memory <-> SQLite

    def _row(self, key: str) -> _Row | None:
        row: _Row | None = self._newest("row", key)
        return row

    def _newest(self, kind: str, value: str) -> Any:
        """The newest generation's row for a key (`kind` "row": its state) or a slug ("key": the key), or None.

        One statement for up to `_UNION_MAX` generations, newest first, not one per generation: a Bloom
        filter's false "maybe" asks every one of them (~70 at two million keys)."""
        tables = self._tables[::-1]
        for start in range(0, len(tables), _UNION_MAX):
            chunk = tables[start:start + _UNION_MAX]
            sql = self._sql.get((kind, chunk[0], len(chunk)))
            if sql is None:
                what, where = (_COLUMNS, "key") if kind == "row" else ("key", "slug")
                union = " UNION ALL ".join(f"SELECT {n} AS g, {what} FROM {t} WHERE {where} = ?1"
                                           for n, t in enumerate(chunk))
                sql = self._sql[(kind, chunk[0], len(chunk))] = f"SELECT {what} FROM ({union}) ORDER BY g LIMIT 1"
            row = self._db.execute(sql, (value,)).fetchone()
            if row is not None:
                return row
        return None

    def _keep(self, key: str, state: KeyState) -> KeyState:
        self._mem[key] = state
        self._by_slug[state.slug] = key
        if len(self._mem) > self._spill_at:
            self._spill()
        return state

    def _spill(self, all_keys: bool = False) -> None:
        """Write the least recently used quarter (or, for a query over all keys, every key) to SQLite."""
        n = len(self._mem) if all_keys else self.hot // 4
        rows = [(k, s.slug, s.revision, s.kept, s.content, s.pos, s.seq, s.line, s.flag_ref, s.flag_reason)
                for k, s in itertools.islice(self._mem.items(), n)]
        new = not self._tables or self._rows >= self.rows_per_table
        table = f"keys_{len(self._tables)}" if new else self._tables[-1]
        try:
            with self._db:  # one transaction (rolled back whole on an error, the new table too), not one per row
                self._db.execute("BEGIN")
                if new:
                    self._db.execute(f"CREATE TABLE {table} (key TEXT PRIMARY KEY, slug TEXT NOT NULL, "
                                     "revision INTEGER NOT NULL, kept TEXT NOT NULL, content TEXT, pos INTEGER, "
                                     "seq INTEGER NOT NULL, line INTEGER, flag_ref TEXT, flag_reason TEXT) "
                                     "WITHOUT ROWID")
                    self._db.execute(f"CREATE INDEX {table}_slug ON {table} (slug)")
                self._db.executemany(f"INSERT OR REPLACE INTO {table} (key, {_COLUMNS}) "  # noqa: S608 - ours
                                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.Error as e:  # its temporary directory is full, say: keep them in memory, try again later
            if self._spill_at == self.hot:
                log.warning("cannot move session keys out of memory (%s); keeping all %d in memory for now",
                            e, len(self._mem))
            self._spill_at = len(self._mem) + self.hot
            return
        if new:
            self._tables.append(table)
            self._sql.clear()  # the generations moved one along: every statement of `_newest` is another now
            self._rows = 0
        self._rows += len(rows)
        self._spill_at = self.hot
        if all_keys:
            return
        by_slug = self._by_slug
        for key, slug, *_ in rows:
            del self._mem[key]
            if by_slug.get(slug) == key:
                del by_slug[slug]


class _Bloom:
    """Bloom filters over strings: `in` False means never added. A chain of them, each twice the size of the
    one before, a new one begun when the newest holds `bits // 16` strings: each then answers ~0.5% false
    "maybe"s (each one a lookup in SQLite), the chain ~0.5% more per doubling of the count. One fixed filter
    let that climb with the count (3% at two million keys): keeping a session by reference cost 17 µs at a
    million keys and 100 µs at two. Memory: 2 MiB for the first million strings, then about 2 MiB a million.
    Probes by double hashing of Python's `hash` (this process only)."""

    def __init__(self, bits: int = 1 << 24) -> None:
        self._filters: list[tuple[bytearray, int]] = []  # (bits, mask), oldest first
        self._room = 0  # strings the newest filter takes before the next one begins
        self._begin(bits)

    def _begin(self, bits: int) -> None:
        self._filters.append((bytearray(bits // 8), bits - 1))
        self._room = bits // 16

    def add(self, text: str) -> None:  # unrolled, as `__contains__`: twice per new key
        if self._room <= 0:
            self._begin(2 * (self._filters[-1][1] + 1))
        self._room -= 1
        bits, mask = self._filters[-1]
        h = hash(text)
        step = (h >> 32) | 1
        a, b, c = h & mask, (h + step) & mask, (h + 2 * step) & mask
        bits[a >> 3] |= 1 << (a & 7)
        bits[b >> 3] |= 1 << (b & 7)
        bits[c >> 3] |= 1 << (c & 7)

    def __contains__(self, text: str) -> bool:  # inlined: it is asked for every new key and slug
        h = hash(text)
        step = (h >> 32) | 1
        for bits, mask in self._filters:
            # a probe at a time: nearly every question is a new string, answered by its first or second probe
            a = h & mask
            if bits[a >> 3] & (1 << (a & 7)):
                b = (h + step) & mask
                if bits[b >> 3] & (1 << (b & 7)):
                    c = (h + 2 * step) & mask
                    if bits[c >> 3] & (1 << (c & 7)):
                        return True
        return False


class _Taken:
    """The `in` / `add` view `unique_slug` asks; `add` is a no-op: the caller then `add`s the key."""

    def __init__(self, keys: SessionKeys) -> None:
        self._keys = keys

    def __contains__(self, slug: object) -> bool:
        return isinstance(slug, str) and self._keys.slug_taken(slug)

    def add(self, slug: str) -> None:
        pass
