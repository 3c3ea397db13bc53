"""A cheap estimate of the memory a decoded record holds, for byte budgets.

`sys.getsizeof` walks nothing and a deep walk costs as much as decoding; this
sums the sizes of the strings, bytes and containers a record's attributes,
events and body hold, plus a fixed overhead per object, iteratively (hostile
nesting cannot overflow the stack). It over-estimates small records a little
and tracks large ones closely: a 30 MB attribute counts as 30 MB.
"""

from __future__ import annotations

from typing import Any

_OBJECT = 64  # per container / scalar
_RECORD = 600  # a record's own slots, ids and names


def value_bytes(value: Any) -> int:
    total = 0
    stack = [value]
    while stack:
        x = stack.pop()
        if isinstance(x, str | bytes | bytearray):
            total += _OBJECT + len(x)
        elif isinstance(x, dict):
            total += _OBJECT + 16 * len(x)
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list | tuple | set):
            total += _OBJECT + 8 * len(x)
            stack.extend(x)
        else:
            total += 32
    return total


def _attrs_bytes(attrs: dict[str, Any]) -> int:
    """`value_bytes(attrs)`, with the common case (string values) summed without the walk."""
    total = _OBJECT + 16 * len(attrs)
    for key, value in attrs.items():
        total += _OBJECT + len(key)
        total += _OBJECT + len(value) if type(value) is str else value_bytes(value)
    return total


_REFS, _ORDINAL = 240, 40  # a SpanRefs: its slots, trace id and lists; per span an ordinal and its list slot


def record_bytes(record: Any) -> int:
    """Estimated bytes held by one SpanRecord, LogRecord or SpanRefs (duck-typed: any of their fields)."""
    if hasattr(record, "ordinals"):  # a SpanRefs (wt_otel.model.spans): ids and positions, not attributes
        return (_REFS + _ORDINAL * len(record.ordinals) + 64 * len(record.roots) + len(record.conversation or "")
                + (value_bytes(record.marks) if record.marks else 0))
    total = _RECORD + len(getattr(record, "name", "") or "") + len(getattr(record, "status_message", "") or "")
    total += _attrs_bytes(getattr(record, "attributes", None) or {})
    for event in getattr(record, "events", None) or ():
        total += _RECORD // 2 + len(event.name) + _attrs_bytes(event.attributes) + value_bytes(event.body)
    for link in getattr(record, "links", None) or ():
        total += _RECORD // 2 + value_bytes(link.attributes)
    body = getattr(record, "body", None)
    if body is not None:
        total += value_bytes(body)
    return total
