"""Whether a serialized protobuf message decodes, without decoding it.

serve keeps a traces request by reference (its bytes in the segment log, nothing decoded), and what it
acknowledges must render later: every byte must decode, UTF-8 in the strings the span index skips
included. upb's `FromString` answers that, but holds the GIL for a third of a millisecond per 0.5 MiB
request, a fifth of serve's GIL time at full load. The native check (`_wirecheck.c`) answers the same
question from a schema built here from the message's descriptors, without the GIL, so the receivers
check requests while the pipeline thread runs.

The promise is one-way: `problem(body)` None means the message decodes. A str names what stopped the
check, which is stricter than upb where upb is lenient (groups, wire types that do not match a known
field, very deep nesting): the caller decodes as usual then, and the decoder says what is wrong, if
anything. Without the extension (no compiler at install), or with `WT_OTEL_SPANINDEX=python`, the
check is upb's `FromString` itself.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from wt_otel.ingest import spanindex

__all__ = ["WireCheck", "schema_of"]

# the kinds of _wirecheck.c
VARINT, FIXED64, FIXED32, STRING, BYTES, MESSAGE, UNSUPPORTED = range(7)

_KIND = {
    FieldDescriptor.TYPE_DOUBLE: FIXED64, FieldDescriptor.TYPE_FIXED64: FIXED64, FieldDescriptor.TYPE_SFIXED64: FIXED64,
    FieldDescriptor.TYPE_FLOAT: FIXED32, FieldDescriptor.TYPE_FIXED32: FIXED32, FieldDescriptor.TYPE_SFIXED32: FIXED32,
    FieldDescriptor.TYPE_INT64: VARINT, FieldDescriptor.TYPE_UINT64: VARINT, FieldDescriptor.TYPE_INT32: VARINT,
    FieldDescriptor.TYPE_UINT32: VARINT, FieldDescriptor.TYPE_SINT32: VARINT, FieldDescriptor.TYPE_SINT64: VARINT,
    FieldDescriptor.TYPE_BOOL: VARINT, FieldDescriptor.TYPE_ENUM: VARINT,
    FieldDescriptor.TYPE_STRING: STRING, FieldDescriptor.TYPE_BYTES: BYTES, FieldDescriptor.TYPE_MESSAGE: MESSAGE,
}


def schema_of(root: Descriptor) -> list[list[tuple[int, int, int, int]]]:
    """The root message and every message it can hold, as the native check reads them: one list per message
    (the root first) of (field number, kind, repeated, index of the field's message or -1). Built from the
    descriptors of the installed protobuf package, so a newer OTLP version brings its new fields along."""
    index: dict[str, int] = {root.full_name: 0}
    order = [root]
    schema: list[list[tuple[int, int, int, int]]] = []
    for message in order:  # grows as new message types are found
        fields = []
        for f in message.fields:
            child = -1
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                sub = f.message_type
                if sub.full_name not in index:
                    index[sub.full_name] = len(order)
                    order.append(sub)
                child = index[sub.full_name]
            repeated = int(f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED)  # protobuf<6
            fields.append((f.number, _KIND.get(f.type, UNSUPPORTED), repeated, child))
        schema.append(fields)
    return schema


def _native() -> Any:
    try:
        from wt_otel.ingest import _wirecheck  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _wirecheck


class WireCheck:
    """`problem(body)` for one message class: natively when the span index runs natively, else upb.

    `native`: True to require the extension (raises `SpanIndexUnavailable` when it is not built), False
    for upb; None (the default) follows `WT_OTEL_SPANINDEX`, as `spanindex.implementation()` reads it."""

    def __init__(self, cls: type[Message], native: bool | None = None) -> None:
        self._cls = cls
        ext = _native()
        if native is None:
            native = ext is not None and spanindex.implementation() == "native"
        if native and ext is None:
            raise spanindex.SpanIndexUnavailable("the native wire check (wt_otel/ingest/_wirecheck.c) is not "
                                                 "built: install with a C compiler and the Python headers")
        self._check = ext.check if native else None
        self._schema = ext.compile(schema_of(cls.DESCRIPTOR)) if native else None

    @property
    def native(self) -> bool:
        return self._check is not None

    def problem(self, body: bytes) -> str | None:
        """None when `body` decodes as the message; else why that was not settled (see the module doc)."""
        if self._check is not None:
            result: str | None = self._check(body, self._schema)
            return result
        try:
            self._cls.FromString(body)
        except DecodeError as e:
            return str(e) or "does not decode"
        return None
