"""What a parsed matcher checks: `mismatches(matcher, value, where)` lists why `value` (at `where`) does not match."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from wt_otel.contracts.assertions import (
    ArrayMatcher,
    BooleanMatcher,
    LiteralMatcher,
    Matcher,
    NumberMatcher,
    ObjectMatcher,
    OptionalMatcher,
    StringMatcher,
    show,
)

__all__ = ["mismatches", "same"]


def same(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 equals 1.0, containers compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _at(where: str, key: str | int) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key


def _any(m: Matcher, value: Any, where: str) -> list[str]:
    return []


def _string(m: StringMatcher, value: Any, where: str) -> list[str]:
    if not isinstance(value, str):
        return [f"{where or 'value'}: expected a string, got {show(value)}"]
    out = []
    if m.equals is not None and value != m.equals:
        out.append(f"{where or 'value'}: expected {show(m.equals)}, got {show(value)}")
    if m.contains is not None and m.contains not in value:
        out.append(f"{where or 'value'}: expected a string containing {show(m.contains)}, got {show(value)}")
    if m.regex is not None and not m.regex.search(value):
        out.append(f"{where or 'value'}: expected a string matching /{m.regex.pattern}/, got {show(value)}")
    return out


def _number(m: NumberMatcher, value: Any, where: str) -> list[str]:
    w = where or "value"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return [f"{w}: expected a number, got {show(value)}"]
    out = []
    if m.equals is not None and value != m.equals:
        out.append(f"{w}: expected {m.equals}, got {value}")
    if m.min is not None and value < m.min:
        out.append(f"{w}: expected a number >= {m.min}, got {value}")
    if m.max is not None and value > m.max:
        out.append(f"{w}: expected a number <= {m.max}, got {value}")
    return out


def _boolean(m: BooleanMatcher, value: Any, where: str) -> list[str]:
    w = where or "value"
    if not isinstance(value, bool):
        return [f"{w}: expected a boolean, got {show(value)}"]
    if m.equals is not None and value is not m.equals:
        return [f"{w}: expected {json.dumps(m.equals)}, got {json.dumps(value)}"]
    return []


def _literal(m: LiteralMatcher, value: Any, where: str) -> list[str]:
    if same(value, m.value):
        return []
    return [f"{where or 'value'}: expected exactly {show(m.value)}, got {show(value)}"]


def _array(m: ArrayMatcher, value: Any, where: str) -> list[str]:
    w = where or "value"
    if not isinstance(value, list):
        return [f"{w}: expected an array, got {show(value)}"]
    out = []
    if m.length is not None and len(value) != m.length:
        out.append(f"{w}: expected {m.length} item(s), got {len(value)}")
    if m.items is not None:
        for i, item in enumerate(value):
            out += mismatches(m.items, item, _at(where, i))
    if m.contains is not None and not any(not mismatches(m.contains, v, "") for v in value):
        out.append(f"{w}: no item matches the `contains` matcher in {show(value)}")
    return out


def _optional(m: OptionalMatcher, value: Any, where: str) -> list[str]:
    return [] if value is None else mismatches(m.matcher, value, where)


def _object(m: ObjectMatcher, value: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where or 'value'}: expected an object, got {show(value)}"]
    out = []
    for key, matcher in m.shape.items():
        if key not in value:
            if key not in m.optional and not isinstance(matcher, OptionalMatcher):
                out.append(f"{_at(where, key)}: missing (present keys: {', '.join(map(str, value)) or 'none'})")
            continue
        out += mismatches(matcher, value[key], _at(where, key))
    return out


_CHECKS: dict[type[Matcher], Callable[[Any, Any, str], list[str]]] = {
    Matcher: _any, StringMatcher: _string, NumberMatcher: _number, BooleanMatcher: _boolean,
    LiteralMatcher: _literal, ArrayMatcher: _array, OptionalMatcher: _optional, ObjectMatcher: _object,
}


def mismatches(matcher: Matcher, value: Any, where: str) -> list[str]:
    """Why `value` (at `where`, a dotted path; "" for the value itself) does not match; empty when it does."""
    return _CHECKS[type(matcher)](matcher, value, where)
