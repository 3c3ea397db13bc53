"""JSON for untrusted values: what orjson refuses is kept as text, with a note naming where.

Trace content reaches the writers as plain Python values, and some of them
no JSON encoder we use accepts: integers beyond 64 bits (orjson), lone UTF-16
surrogates (not UTF-8), nesting deeper than orjson's 254 levels, NaN and
infinities (orjson writes them as `null`, silently losing them). Refusing the
value at write time used to drop the whole session; here each such value is
replaced by its text, and every replacement is reported as
`"<file>: <json path>: <what> kept as text (span <id>)"` so the warning names the
span the value came from whenever the enclosing object carries a `span_id`.
"""

from __future__ import annotations

import json
import marshal
import math
from typing import Any

import orjson

MAX_DEPTH = 200  # below orjson's limit (254), with room for the envelope's own nesting
_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1


def dumps(data: Any, *, where: str = "", notes: list[str] | None = None, indent: bool = True) -> bytes:
    """`data` as JSON bytes; never raises for odd values (see the module docstring).

    `notes` receives one line per value that had to be kept as text."""
    option = _INDENTED if indent else 0
    out = _plain_dumps(data, option)
    # orjson writes NaN and infinities as null: without a null in the output there was none to look for
    if out is not None and (b"null" not in out or not _has_float_oddity(data)):
        return out
    found: list[str] = []
    clean = sanitize(data, where, found)
    if notes is not None:
        notes.extend(found)
    return orjson.dumps(clean, option=option, default=str)


def dumps_all(items: list[tuple[Any, str]], notes: list[str] | None = None) -> list[bytes]:
    """`dumps(data, where=where, notes=notes)` of each (data, where), in order, with one NaN walk for all of
    them instead of one per item (the files of one scenario share much of their text: marshal writes a
    value they share once). An item whose output needs a look gets its own `dumps` only when the walk over
    all of them finds an odd float, or when orjson refused it."""
    outs = [_plain_dumps(data, _INDENTED) for data, _ in items]
    nulls = [data for (data, _), out in zip(items, outs, strict=True) if out is not None and b"null" in out]
    odd = bool(nulls) and _has_float_oddity(nulls)
    return [dumps(data, where=where, notes=notes) if out is None or (odd and b"null" in out) else out
            for (data, where), out in zip(items, outs, strict=True)]


_INDENTED = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE


def _plain_dumps(data: Any, option: int) -> bytes | None:
    """orjson's own answer, or None where it refuses (a huge integer, a lone surrogate, deep nesting). NaN and
    infinities come out as null: the callers look for them when the output has one."""
    try:
        return orjson.dumps(data, option=option, default=str)
    except (orjson.JSONEncodeError, TypeError, RecursionError):
        return None


_PLAIN = frozenset({str, int, bool, type(None)})
# marshal writes a float as type byte "g" (0xe7 with its reference flag) + 8 bytes little-endian IEEE 754:
# NaN and infinities have all exponent bits set, so the last byte is 0x7f/0xff and the one before >= 0xf0.
_FLOAT_CODES = (0x67, 0xE7)
_TOP_BYTES = (0x7F, 0xFF)


def _has_float_oddity(data: Any) -> bool:
    """Whether a NaN/inf float is anywhere in `data` (orjson would write null). marshal's C walk finds out
    whether there can be one (a false alarm, those bytes inside a string or a length, only costs the walk);
    the walk, iterative and depth-safe, decides. marshal, not pickle: no memo of every container, and the
    bytes to look for are found with `bytes.find`, not a regex over every byte (a third less per rendered
    file on the import bench's sessions)."""
    try:
        blob = marshal.dumps(data, 4)
    except Exception:  # noqa: BLE001 - a type marshal refuses (float subclasses too) or too deep: the walk decides
        return _walk_for_odd_floats(data)
    for top in _TOP_BYTES:
        i = blob.find(top, 8)
        while i != -1:
            if blob[i - 1] >= 0xF0 and blob[i - 8] in _FLOAT_CODES:
                return _walk_for_odd_floats(data)
            i = blob.find(top, i + 1)
    return False


def _walk_for_odd_floats(data: Any) -> bool:
    """Exact types first (trace values are plain JSON types), subclasses as isinstance sees them."""
    stack = [data]
    while stack:
        x = stack.pop()
        kind = type(x)
        if kind is dict:
            values: Any = x.values()
        elif kind is list or kind is tuple:
            values = x
        elif isinstance(x, float):
            if not math.isfinite(x):
                return True
            continue
        elif isinstance(x, dict):
            values = x.values()
        elif isinstance(x, list | tuple):
            values = x
        else:
            continue
        for v in values:
            kind = type(v)
            if kind in _PLAIN:
                continue
            if kind is float:
                if not math.isfinite(v):
                    return True
            else:
                stack.append(v)
    return False


def sanitize(data: Any, where: str = "", notes: list[str] | None = None) -> Any:
    """A copy of `data` every JSON encoder accepts; what had to change is kept as text and noted."""
    found: list[str] = []
    clean = _clean(data, "", None, 0, found)
    if notes is not None:
        notes.extend(f"{where}: {n.lstrip('.')}" if where else n.lstrip(".") for n in found)
    return clean


def _clean(x: Any, path: str, span: str | None, depth: int, notes: list[str]) -> Any:
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, int):
        if _INT_MIN <= x <= _UINT_MAX:
            return x
        return _note(notes, path, span, "integer beyond 64 bits", _int_text(x))
    if isinstance(x, float):
        return x if math.isfinite(x) else _note(notes, path, span, "non-finite number", repr(x))
    if isinstance(x, str):
        return _text(x, path, span, notes)
    if isinstance(x, dict | list | tuple):
        if depth >= MAX_DEPTH:
            return _note(notes, path, span, f"value nested deeper than {MAX_DEPTH} levels", _deep_text(x))
        if isinstance(x, dict):
            sid = x.get("span_id")
            span = sid if isinstance(sid, str) and sid else span
            out = {}
            for k, v in x.items():
                key = _text(k if isinstance(k, str) else str(k), f"{path}.<key>", span, notes)
                out[key] = _clean(v, f"{path}.{key}", span, depth + 1, notes)
            return out
        return [_clean(v, f"{path}[{i}]", span, depth + 1, notes) for i, v in enumerate(x)]
    return str(x)


def _text(s: str, path: str, span: str | None, notes: list[str]) -> str:
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return _note(notes, path, span, "text with lone surrogates",
                     s.encode("utf-8", "backslashreplace").decode("utf-8"))


def _int_text(x: int) -> str:
    try:
        return str(x)
    except ValueError:  # beyond sys.int_info.str_digits_check_threshold (4300 digits)
        return hex(x)


def _deep_text(x: Any) -> str:
    try:
        return json.dumps(x, ensure_ascii=True, default=repr)
    except (RecursionError, ValueError, TypeError):
        try:
            return repr(x)
        except RecursionError:
            return "<nested too deeply to keep>"


def _note(notes: list[str], path: str, span: str | None, what: str, text: str) -> str:
    notes.append(f"{path or '$'}: {what} kept as text" + (f" (span {span})" if span else ""))
    return text
