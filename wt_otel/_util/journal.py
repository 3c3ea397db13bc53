"""One append-only NDJSON journal: the data-dir index, the replay queue and the run ledger all use it.

Why one implementation: the three files share one failure mode (a writer
killed or a disk filled mid-line) and must agree on what a reader does about
it. The rules:

- append: a batch of lines is one `write(2)` on an `O_APPEND` descriptor
  (under an advisory `flock`, best-effort), so lines from several writers
  never interleave and a batch stays together; it is fsynced before `append`
  returns, so a line that was reported written survives a crash.
- a torn tail (the file does not end with a newline) never poisons later
  lines: the next append starts on a fresh line, and `repair()` (for an owner
  that holds the file alone, at start-up) truncates it.
- read: blank lines are skipped; a line that does not parse, or that the
  caller's `parse` rejects, is a problem (`name:LINE: why`), never fatal; an
  unterminated last line is reported as torn (kept if it parses whole).

Standard library only (`_util` imports nothing of ours).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["Journal", "JournalRead", "encode_line"]


def encode_line(record: Any) -> bytes:
    """Compact JSON, UTF-8, one line (JSON escapes control characters, so no raw newline is possible)."""
    return json.dumps(record, ensure_ascii=False, default=str).encode("utf-8") + b"\n"


@dataclass
class JournalRead(Generic[T]):
    """What reading found: the records in file order, the bad lines, and whether the last line was torn."""

    records: list[T] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "NAME:LINE: why"
    torn: bool = False  # the file does not end with a newline: a write cut short


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:199] + "…"


class Journal:
    """`Journal(path).append([...])`, `.read(parse)`, `.repair()`; `close()` releases a held descriptor.

    `label` names the file in problem lines (default: the file name). The descriptor is opened on the
    first append and held until `close()` (cheap for the long-lived owners, harmless for one-shot ones).
    """

    def __init__(self, path: Path | str, label: str | None = None) -> None:
        self.path = Path(path)
        self.label = label or self.path.name
        self._fd: int | None = None

    # ---------------------------------------------------------------- writing

    def append(self, records: Iterable[Any] | Any, *, encoded: bool = False) -> int:
        """Append one line per record (a dict, or a list/iterable of them); returns how many were written.

        With `encoded=True` the records are already lines (`bytes` ending in a newline).
        """
        items: list[Any] = [records] if isinstance(records, dict | bytes) else list(records)
        if not items:
            return 0
        fd = self._open()
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            lines = items if encoded else [encode_line(record) for record in items]
            if not self._ends_with_newline(fd):
                lines = [b"\n", *lines]  # a torn tail: start ours on a line of its own
            self._write_all(fd, b"".join(lines))  # one write for the batch (under the lock); fsync once
            os.fsync(fd)
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
        return len(items)

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def _ends_with_newline(fd: int) -> bool:
        size = os.fstat(fd).st_size
        return size == 0 or os.pread(fd, 1, size - 1) == b"\n"

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        """One write for the whole batch (O_APPEND, under the lock); a short write (a full disk) is finished
        with further writes rather than dropped, and a reader treats what is left as a torn line."""
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def repair(self) -> int:
        """Truncate a torn tail (for the one process that owns the file, at start-up); returns bytes dropped.
        Reads only the tail: the file may be large."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return 0
        try:
            size = os.fstat(fd).st_size
            if self._ends_with_newline(fd):
                return 0
            keep, end = 0, size
            while end > 0:  # back to the last newline, 64 KiB at a time
                start = max(0, end - 65536)
                newline = os.pread(fd, end - start, start).rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                end = start
            os.ftruncate(fd, keep)
            os.fsync(fd)
            return size - keep
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- reading

    def read(self, parse: Callable[[Any], T] | None = None, *, keep_torn: bool = True,
             what: str = "not a journal line", into: Callable[[T, int], object] | None = None,
             loads: Callable[[bytes], Any] = json.loads) -> JournalRead[T]:
        """Every record, in file order; `parse(obj)` validates or converts one (raise ValueError to reject).

        `what` opens the problem note of a bad line ("not a ledger row").
        A missing file is empty. An unterminated last line is torn: reported, and kept only when it
        parses whole and `keep_torn` (a record without its newline is complete; one cut short is not JSON).
        With `into`, each record is handed to it with its line's byte offset instead of kept (a large file,
        read in bounded memory; the offset lets a reader come back to that one line). `loads` parses a line
        (a faster parser for a journal whose writer is known; it raises ValueError as json.loads does).
        """
        out: JournalRead[T] = JournalRead()
        keep = into or (lambda record, _offset: out.records.append(record))
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below; a missing file is an empty journal
        except FileNotFoundError:
            return out
        offset = 0
        with f:
            for number, raw in enumerate(f, 1):
                last = not raw.endswith(b"\n")  # only the last line can lack its newline
                out.torn = out.torn or last
                self._read_line(raw, number, offset, last, parse, keep_torn, what, keep, out, loads)
                offset += len(raw)
        return out

    def _read_line(self, raw: bytes, number: int, offset: int, torn: bool, parse: Callable[[Any], T] | None,
                   keep_torn: bool, what: str, keep: Callable[[T, int], object], out: JournalRead[T],
                   loads: Callable[[bytes], Any]) -> None:
        if not raw.strip():
            return
        try:
            obj = loads(raw)
            record: T = parse(obj) if parse is not None else obj
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, pydantic's ValidationError
            if torn:
                out.problems.append(f"{self.label}:{number}: torn last line ({len(raw)} bytes) skipped: "
                                    "the writer was cut short (killed, or a full disk)")
            else:
                out.problems.append(f"{self.label}:{number}: {what}, skipped: {_short(exc)}")
            return
        if torn:
            if not keep_torn:
                out.problems.append(f"{self.label}:{number}: torn last line (no newline) dropped")
                return
            out.problems.append(f"{self.label}:{number}: last line has no newline (kept, it parses)")
        keep(record, offset)
