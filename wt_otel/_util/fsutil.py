"""Safe names and atomic writes: trace content names directories, so it is untrusted.

A slug is built only from `[a-z0-9-]`; whatever the trace says, it cannot
contain `/`, `..`, control characters or be empty. Files and whole scenario
directories appear atomically (temp + rename), so a crash or an error never
leaves a half-written scenario behind.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, Protocol

from wt_otel._util.hooks import crash_point

_UNSAFE = re.compile(r"[^a-z0-9]+")
MAX_SLUG = 48


def safe_slug(text: str, fallback: str = "session") -> str:
    """A lowercase `[a-z0-9-]` slug of at most 48 characters; never empty, never a dot name."""
    slug = str(text).lower()
    # ids (trace ids, `conv-<id>-<n>`) are slugs already but for case: serve names a session per key, and the
    # regex (which turns each run of other characters into one "-") costs 4x these checks
    if not (slug.isascii() and slug.replace("-", "").isalnum() and "--" not in slug):
        slug = _UNSAFE.sub("-", slug)
    slug = slug.strip("-")[:MAX_SLUG].strip("-")
    return slug or fallback


# an id that says nothing to a reader: a trace id, a UUID, `conv_<hex>`; its hex part gives the short id
_OPAQUE = re.compile(r"(?:[a-z]{1,8}[-_:])?([0-9a-f][0-9a-f-]{14,}[0-9a-f])")
_WORD = re.compile(r"[a-z0-9]+")
MAX_WORDS = 39  # characters of first-turn words in a name: with "-" and an 8-character short id, <= MAX_SLUG


def readable_name(ident: str, first_turn: str | None) -> str:
    """A scenario's or session's name: `ident` when it reads as one (`inc-2026-1129-8`, `conv-bluewing`);
    an opaque id (a trace id, a UUID) becomes the first user turn's words plus a short id taken from it
    (`where-is-order-a-1-55556666`), so a folder says what the conversation was about and still points
    at its trace. Deterministic; only `[a-z0-9-]`, at most MAX_SLUG characters (trace text is untrusted).
    """
    match = _OPAQUE.fullmatch(str(ident).strip().lower())
    if match is None:
        return safe_slug(ident)
    short = match.group(1).replace("-", "")[-8:]  # the tail: time-ordered ids (UUIDv7, X-Ray) differ there
    ascii_text = unicodedata.normalize("NFKD", first_turn or "").encode("ascii", "ignore").decode().lower()
    words = ""
    for word in _WORD.findall(ascii_text):
        candidate = f"{words}-{word}" if words else word[:MAX_WORDS]
        if len(candidate) > MAX_WORDS:
            break
        words = candidate
    return f"{words or 'session'}-{short}"


class Taken(Protocol):
    """The slugs already given out: a set, or a view over a larger table (exporters/session_keys.py)."""

    def __contains__(self, slug: object, /) -> bool: ...

    def add(self, slug: str, /) -> None: ...


def unique_slug(text: str, key: str, taken: Taken) -> str:
    """`safe_slug(text)`, or with a short hash of `key` appended when already taken (deterministic)."""
    slug = safe_slug(text)
    if slug in taken:
        slug = base = f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        n = 2
        while slug in taken:
            slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write a file so readers see the old content or the new, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class DirectoryExists(FileExistsError):
    pass


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename into it) durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_directory(dest: Path, files: dict[str, str | bytes], force: bool = False, durable: bool = False) -> None:
    """Create `dest` holding exactly `files`, atomically; replace an existing one only with `force`.

    `durable`: every file and the directory are fsynced before the rename and the parent after
    it, so whatever is written next (an index line naming `dest`) can only survive a power loss
    if `dest` does too. File names are our own constants, never trace text.
    """
    if dest.exists() and not force:
        raise DirectoryExists(f"{dest} already exists (use --force to replace it)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
        if durable:
            fsync_dir(tmp)
        crash_point("directory.built")
        _into_place(tmp, dest, durable)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def place_directory(src: Path, dest: Path, force: bool = False) -> None:
    """Move the finished directory `src` (on the same file system) to `dest` atomically, with
    `write_directory`'s rules: an existing `dest` is replaced only with `force`."""
    if dest.exists() and not force:
        raise DirectoryExists(f"{dest} already exists (use --force to replace it)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    _into_place(src, dest, durable=False)


def _into_place(tmp: Path, dest: Path, durable: bool) -> None:
    if dest.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".old", dir=dest.parent))
        os.rename(dest, old / "d")
        crash_point("directory.swapping")
        os.rename(tmp, dest)
        crash_point("directory.renamed")
        if durable:
            fsync_dir(dest.parent)
        crash_point("directory.placed")
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, dest)
        crash_point("directory.renamed")
        if durable:
            fsync_dir(dest.parent)
        crash_point("directory.placed")


_FALLOC_FL_KEEP_SIZE = 1


@functools.cache
def _fallocate() -> Any:
    """libc's `fallocate(2)`, typed, or None (not Linux/glibc)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        fn = getattr(ctypes.CDLL(name, use_errno=True), "fallocate", None) if name else None
    except OSError:
        return None
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        fn.restype = ctypes.c_int
    return fn


def reserve(fd: int, offset: int, length: int) -> bool:
    """Allocate `length` bytes of `fd` from `offset` without changing its size (`FALLOC_FL_KEEP_SIZE`), so appends
    land in space already allocated: appending 570 KB to a file cost ~1.5 ms of CPU in the kernel here (tmpfs
    and ext4 alike: new pages, the size on every write), ~0.12 ms into reserved space. False when the system
    cannot (not Linux, a filesystem without it, no space): the writes then allocate as they go, as before.
    `ftruncate(fd, size)` gives back what was reserved and not written."""
    fn = _fallocate()
    return fn is not None and fn(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0
