"""The span index: one walk over a serialized OTLP traces request that says, per span, what serve needs
to know before decoding it, without decoding it.

Decoding a request (upb parse, then every span into a `SpanRecord` with attribute dicts) costs ~25 µs
per span; a span the GenAI filter then drops has paid all of it. The index reads the protobuf wire
format of an `ExportTraceServiceRequest` (or `TracesData`, same layout) directly and yields, per span
in wire order, a `SpanEntry`:

* `trace_id`, `span_id` (lowercase hex, "" when absent), `parent_span_id` (hex, None when empty);
* `genai`: the genai-filter stage's rule (`processors/genai_filter.is_genai`) on this span: a GenAI
  attribute key, span name or span event name (the tables in `wt_otel.ingest.keys`);
* `conversation`: what `dialects.common.conversation_id(span.attributes)` would return;
* `operation`: for a parentless span, what `dialects.common.operation(span)` would return (the
  assembler ends a session on an agent root); None for spans with a parent;
* `marks`: the incident and feedback attributes (the keys of the default flag rules, `ingest.flags`)
  as `(key, value)` pairs: the span's, then each event's, each in the order of the decoder's
  attribute dicts (a repeated key keeps its first place and its last value).

Values are what `ingest.otlp` would make of them: a lone scalar AnyValue is read here; anything
else (arrays, kvlists, several or unknown fields) goes through the protobuf decoder, so a value is
never read two ways.

Two implementations with identical results: the native scanner (`_spanindex.c`, an optional C
extension built by `pip install`) and the pure-Python fallback (`scan_python`, when no compiler was
available): upb parses the request on a lean schema built at start-up (ids, names, attribute keys
and raw values; everything else is an unknown field upb skips) and Python reads the few fields the
index needs. The wire walk in Python (`scan_wire`, which the C scanner mirrors) is the reference
for hostile input: the fallback hands the bytes to it when upb refuses them or a value read is bad,
so every implementation refuses with the same message. `WT_OTEL_SPANINDEX=python|native|auto`
(default auto: native when built) chooses one at start-up; `implementation()` says which runs.
`off` is the kill switch: serve then decodes every request in full, as before the index (`scan`
still works, on the fallback).

Hostile input (truncated varints, varints over 10 bytes, lengths past the end, an unclosed group or
an end-group tag outside one, wire types 6 and 7, a field number 0 on the levels walked) raises
`SpanIndexError`: the caller then decodes the request the usual way, which reports it as malformed.
A field read with an unexpected wire type, and a group, are skipped as protobuf skips unknown
fields (so upb, the decoder and the walks agree). The walks are iterative over a fixed depth
(request > resource > scope > span > attribute/event > value) and skip what they do not read by
its length (a group by counting its nesting), so nesting cannot recurse and memory is bounded by the
number of spans (at most one per two input bytes; upb's arena for the lean parse is bounded by the
input's length, and it aliases the bytes values rather than copying them). They
check the structure of the levels they walk, not everything protobuf checks (e.g. UTF-8 in values
they skip).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import FieldDescriptor as _FIELD
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from wt_otel.ingest.dialects.common import INFERENCE_OPERATIONS
from wt_otel.ingest.flags import FEEDBACK_KEYS
from wt_otel.ingest.keys import (
    CONVERSATION_KEYS,
    FLAG_KEYS,
    GENAI_EVENT_PREFIX,
    GENAI_KEY_PREFIXES,
    GENAI_KEYS,
    GENAI_SPAN_NAME_PREFIXES,
    MODEL_CALL,
    model_call_bits,
)
from wt_otel.ingest.otlp import _pb_value

__all__ = ["ENV_VAR", "SpanEntry", "SpanIndexError", "SpanIndexUnavailable", "implementation", "native_available",
           "runs_python", "scan", "scan_native", "scan_python", "scan_runs", "scan_runs_native", "scan_runs_python",
           "scan_wire", "valid_ids"]

ENV_VAR = "WT_OTEL_SPANINDEX"


class SpanIndexError(ValueError):
    """The bytes are not a well-formed OTLP traces request (as far as the index reads); `str()` says where."""


class SpanIndexUnavailable(RuntimeError):
    """`WT_OTEL_SPANINDEX=native` but the extension is not built (or the variable has a bad value)."""


class SpanEntry(NamedTuple):
    trace_id: str
    span_id: str
    parent_span_id: str | None
    genai: bool
    conversation: str | None
    operation: str | None
    marks: tuple[tuple[str, Any], ...]


# --------------------------------------------------------------------------- the tables, as bytes

MARK_KEYS = frozenset({*FLAG_KEYS, *FEEDBACK_KEYS})
"""The keys (fnmatch patterns, as the default flag rules write them) whose attributes become `SpanEntry.marks`."""


def _mark_tables() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """FLAG_KEYS and FEEDBACK_KEYS (fnmatch patterns) as exact keys and key prefixes."""
    exact, prefixes = list(FLAG_KEYS), []
    for pattern in FEEDBACK_KEYS:
        if pattern.endswith(".*") and not any(c in pattern[:-1] for c in "*?["):
            prefixes.append(pattern[:-1])
        elif not any(c in pattern for c in "*?["):
            exact.append(pattern)
        else:  # pragma: no cover - a new kind of pattern needs a new table
            raise ValueError(f"the span index cannot match the feedback key pattern {pattern!r}")
    return tuple(k.encode() for k in exact), tuple(p.encode() for p in prefixes)


_OP_KEY = "gen_ai.operation.name"
# Attribute values the index reads: the conversation keys (in their order of precedence), then the operation.
_WANTED = (*CONVERSATION_KEYS, _OP_KEY)
_WANTED_B = {k.encode(): i for i, k in enumerate(_WANTED)}
_OP_SLOT = len(_WANTED) - 1
_GENAI_PREFIXES_B = tuple(p.encode() for p in GENAI_KEY_PREFIXES)
_GENAI_KEYS_B = frozenset(k.encode() for k in GENAI_KEYS)
_NAME_PREFIXES_B = tuple(p.encode() for p in GENAI_SPAN_NAME_PREFIXES)
_EVENT_PREFIX_B = GENAI_EVENT_PREFIX.encode()
_MARK_KEYS_B, _MARK_PREFIXES_B = _mark_tables()
_MARK_KEYS_SET = frozenset(_MARK_KEYS_B)
_OPERATIONS_B = {op.encode(): op for op in (*INFERENCE_OPERATIONS, "execute_tool", "invoke_agent")}
_NO_MARKS: tuple[tuple[str, Any], ...] = ()
_DOUBLE = struct.Struct("<d")


def _resolve(raw: bytes) -> Any:
    """Any AnyValue the walk does not read itself, as `ingest.otlp` reads it."""
    try:
        return _pb_value(AnyValue.FromString(raw))
    except DecodeError as e:
        raise SpanIndexError(f"an attribute value is not a valid AnyValue ({e})") from None


# --------------------------------------------------------------------------- the wire walk

def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise SpanIndexError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift >= 70:
            raise SpanIndexError(f"varint longer than 10 bytes at byte {pos}")


def _skip(buf: bytes, pos: int, end: int, wire: int, field: int) -> int:
    """Past the value of a field the walk does not read (or a read field with an unexpected wire type,
    which protobuf keeps as an unknown field: so does the index)."""
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 2:
        n, pos = _varint(buf, pos, end)
        pos += n
    elif wire == 1:
        pos += 8
    elif wire == 5:
        pos += 4
    elif wire == 3:
        return _skip_group(buf, pos, end, field)
    elif wire == 4:
        raise SpanIndexError(f"field {field} ends a group that was not started (wire type 4) at byte {pos}")
    else:
        raise SpanIndexError(f"field {field} has wire type {wire} (not a protobuf wire type) at byte {pos}")
    if pos > end:
        raise SpanIndexError(f"field {field} runs past the end of its message (byte {end})")
    return pos


def _skip_group(buf: bytes, pos: int, end: int, field: int) -> int:
    """Past an (unknown, deprecated) group: to the end-group tag of `field`, counting nested groups
    instead of recursing. Protobuf also checks the numbers of nested groups; the index does not."""
    depth = 0
    while True:
        if pos >= end:
            raise SpanIndexError(f"group field {field} is not closed before byte {end}")
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 3:
            depth += 1
        elif wire == 4:
            if depth == 0:
                if number != field:
                    raise SpanIndexError(f"group field {field} is closed by field {number} at byte {pos}")
                return pos
            depth -= 1
        else:
            pos = _skip(buf, pos, end, wire, number)


def _fields(buf: bytes, pos: int, end: int, want: int, what: str) -> list[tuple[int, int]]:
    """(start, end) of each length-delimited field `want` in buf[pos:end]; other fields are skipped."""
    out = []
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise SpanIndexError(f"field number 0 in {what} at byte {pos}")
        if field == want and wire == 2:
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise SpanIndexError(f"{what} field {want} of {n} bytes runs past the end (byte {end})")
            out.append((pos, pos + n))
            pos += n
        else:
            pos = _skip(buf, pos, end, wire, field)
    return out


def _value(buf: bytes, pos: int, end: int) -> Any:
    """An AnyValue: a lone well-typed scalar field is read here, anything else by protobuf (`_resolve`)."""
    start = pos
    if pos == end:
        return None
    if buf[pos] == 0x0A and pos + 1 < end and buf[pos + 1] < 0x80 and pos + 2 + buf[pos + 1] == end:
        try:  # the usual value: a lone string with a one-byte length
            return buf[pos + 2:end].decode()
        except UnicodeDecodeError:
            raise SpanIndexError("a string attribute value is not valid UTF-8") from None
    tag, pos = _varint(buf, pos, end)
    field, wire = tag >> 3, tag & 7
    if wire == 2 and field in (1, 7):
        n, pos = _varint(buf, pos, end)
        stop = pos + n
        if stop == end:
            if field == 7:
                return buf[pos:stop]
            try:
                return buf[pos:stop].decode()
            except UnicodeDecodeError:
                raise SpanIndexError("a string attribute value is not valid UTF-8") from None
    elif wire == 0 and field in (2, 3):
        n, pos = _varint(buf, pos, end)
        if pos == end:
            if field == 2:
                return n != 0
            return n - (1 << 64) if n >= 1 << 63 else n
    elif wire == 1 and field == 4 and pos + 8 == end:
        return _DOUBLE.unpack_from(buf, pos)[0]
    return _resolve(bytes(buf[start:end]))


def _key_value(buf: bytes, pos: int, end: int) -> tuple[bytes, int, int, int]:
    """A KeyValue: its key, the (start, end) of its value, how many value fields it had."""
    key = b""
    vstart = vend = count = 0
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise SpanIndexError(f"field number 0 in an attribute at byte {pos}")
        if (field == 1 or field == 2) and wire == 2:
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise SpanIndexError(f"attribute field {field} of {n} bytes runs past the end (byte {end})")
            if field == 1:
                key = buf[pos:pos + n]
            else:
                vstart, vend, count = pos, pos + n, count + 1
            pos += n
        else:
            pos = _skip(buf, pos, end, wire, field)
    return key, vstart, vend, count


def _mark(buf: bytes, key: bytes, vstart: int, vend: int, count: int, marks: dict[str, Any]) -> None:
    if count > 1:
        raise SpanIndexError("an attribute read by the index has its value field more than once")
    try:
        name = key.decode()
    except UnicodeDecodeError:
        raise SpanIndexError("an attribute key is not valid UTF-8") from None
    marks[name] = _value(buf, vstart, vend) if count else None


def _event(buf: bytes, pos: int, end: int, marks: list[tuple[str, Any]]) -> bool:
    """A span event: whether its name is a GenAI event name; its mark attributes go into `marks`."""
    name = b""
    own: dict[str, Any] = {}
    while pos < end:
        tag = buf[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise SpanIndexError(f"field number 0 in a span event at byte {pos}")
        if (field == 2 or field == 3) and wire == 2:
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = _varint(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise SpanIndexError(f"span event field {field} of {n} bytes runs past the end (byte {end})")
            if field == 2:
                name = buf[pos:stop]
            else:
                key, vstart, vend, count = _key_value(buf, pos, stop)
                if key in _MARK_KEYS_SET or key.startswith(_MARK_PREFIXES_B):
                    _mark(buf, key, vstart, vend, count, own)
            pos = stop
        else:
            pos = _skip(buf, pos, end, wire, field)
    if own:
        marks.extend(own.items())
    return name.startswith(_EVENT_PREFIX_B)


_KEY_CLASSES: dict[bytes, tuple[bool, int | None, bool, int]] = {}  # attribute keys repeat: classify each once


_PLAIN: tuple[bool, int | None, bool, int] = (False, None, False, 0)
_GENAI_ONLY: tuple[bool, int | None, bool, int] = (True, None, False, 0)


def _classify(key: bytes) -> tuple[bool, int | None, bool, int]:
    """(a GenAI key?, its slot among the values read, a mark?, `keys.model_call_bits`) for an attribute key;
    the two usual classes are the constants `_PLAIN` and `_GENAI_ONLY`, so a walk can test them by identity."""
    genai = key.startswith(_GENAI_PREFIXES_B) or key in _GENAI_KEYS_B
    cls = (genai, _WANTED_B.get(key), key in _MARK_KEYS_SET or key.startswith(_MARK_PREFIXES_B),
           0 if genai else model_call_bits(key))
    cls = _PLAIN if cls == _PLAIN else _GENAI_ONLY if cls == _GENAI_ONLY else cls
    if len(_KEY_CLASSES) < 20_000:  # bounded: hostile traffic with ever new keys only loses the cache
        _KEY_CLASSES[key] = cls
    return cls


def _span(buf: bytes, pos: int, end: int) -> SpanEntry:
    trace = span = parent = name = b""
    genai = event_genai = False
    model_bits = 0
    wanted: dict[int, tuple[int, int, int]] | None = None
    marks: dict[str, Any] | None = None  # the span's own
    event_marks: list[tuple[str, Any]] | None = None
    classes = _KEY_CLASSES
    while pos < end:
        tag = buf[pos]
        if tag == 0x4A:  # an attribute (field 9): when its key and value have one-byte lengths, read it here
            key = None
            k = pos + 2
            if k < end and buf[pos + 1] < 0x80:
                stop = k + buf[pos + 1]
                if stop <= end and k + 1 < stop and buf[k] == 0x0A and buf[k + 1] < 0x80:
                    kend = k + 2 + buf[k + 1]
                    if kend == stop:
                        key, vstart, vend, count = buf[k + 2:kend], 0, 0, 0
                    elif kend + 1 < stop and buf[kend] == 0x12 and kend + 2 + buf[kend + 1] == stop:
                        key, vstart, vend, count = buf[k + 2:kend], kend + 2, stop, 1
            if key is not None:
                pos = stop
                cls = classes.get(key) or _classify(key)
                if cls[0]:
                    genai = True
                elif cls[3]:
                    model_bits |= cls[3]
                if cls[1] is not None:
                    if wanted is None:
                        wanted = {}
                    wanted[cls[1]] = (vstart, vend, count)
                if cls[2]:
                    if marks is None:
                        marks = {}
                    _mark(buf, key, vstart, vend, count, marks)
                continue
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise SpanIndexError(f"field number 0 in a span at byte {pos}")
        if wire == 2 and field in (1, 2, 4, 5, 9, 11):
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = _varint(buf, pos, end)
            stop = pos + n
            if stop > end:
                raise SpanIndexError(f"span field {field} of {n} bytes runs past the end (byte {end})")
            if field == 9:  # an attribute the fast path above did not take (long, or unusual)
                key, vstart, vend, count = _key_value(buf, pos, stop)
                cls = classes.get(key) or _classify(key)
                if cls[0]:
                    genai = True
                elif cls[3]:
                    model_bits |= cls[3]
                if cls[1] is not None:
                    if wanted is None:
                        wanted = {}
                    wanted[cls[1]] = (vstart, vend, count)
                if cls[2]:
                    if marks is None:
                        marks = {}
                    _mark(buf, key, vstart, vend, count, marks)
            elif field == 11:
                if event_marks is None:
                    event_marks = []
                if _event(buf, pos, stop, event_marks):
                    event_genai = True
            elif field == 1:
                trace = buf[pos:stop]
            elif field == 2:
                span = buf[pos:stop]
            elif field == 4:
                parent = buf[pos:stop]
            else:
                name = buf[pos:stop]
            pos = stop
        else:
            pos = _skip(buf, pos, end, wire, field)
    values: dict[int, Any] = {}
    if wanted is not None:
        for slot, (vstart, vend, count) in sorted(wanted.items()):
            if count > 1:
                raise SpanIndexError("an attribute read by the index has its value field more than once")
            values[slot] = _value(buf, vstart, vend) if count else None
    return _entry(trace, span, parent, name, genai or event_genai or model_bits == MODEL_CALL, values, marks,
                  event_marks)


def _entry(trace: bytes, span: bytes, parent: bytes, name: bytes, genai: bool, values: dict[int, Any],
           marks: dict[str, Any] | None, event_marks: list[tuple[str, Any]] | None) -> SpanEntry:
    """A span's entry from what both walks collect: the values read (by slot, in slot order), the span's
    own marks and its events' marks."""
    conversation = None
    for slot, v in values.items():
        if slot < _OP_SLOT and v is not None and v != "":
            conversation = str(v)
            break
    operation = None
    if not parent:
        op = values.get(_OP_SLOT)
        operation = op if isinstance(op, str) else _OPERATIONS_B.get(name.split(b" ", 1)[0])
    return _new_entry(SpanEntry, (trace.hex(), span.hex(), parent.hex() if parent else None,
                                  genai or name.startswith(_NAME_PREFIXES_B), conversation, operation,
                                  ((*marks.items(), *(event_marks or ())) if marks else
                                   tuple(event_marks) if event_marks else _NO_MARKS)))


_new_entry = tuple.__new__  # a SpanEntry from a 7-tuple, without the NamedTuple's Python-level __new__


def scan_wire(body: bytes | bytearray | memoryview) -> list[SpanEntry]:
    """The walk over wire bytes, the reference for hostile input: what `scan_python` answers when upb
    refuses the bytes or a value it reads is bad (the first error in wire order); raises `SpanIndexError`."""
    buf = body if type(body) is bytes else bytes(body)
    entries = []
    for rs_start, rs_end in _fields(buf, 0, len(buf), 1, "the request"):
        for ss_start, ss_end in _fields(buf, rs_start, rs_end, 2, "a resource_spans"):
            for sp_start, sp_end in _fields(buf, ss_start, ss_end, 2, "a scope_spans"):
                entries.append(_span(buf, sp_start, sp_end))
    return entries


# --------------------------------------------------------------------------- the fallback: upb on a lean schema

# The fields the index reads, by message; the numbers come from opentelemetry-proto's own descriptors.
# Ids, names and keys are declared `bytes` (no UTF-8 check, no str built), and an attribute's value is
# `repeated bytes`: upb builds no AnyValue, and the list says how often the field occurred (the walk
# refuses a value it reads that occurs twice). Every other field is unknown to upb, which skips it.
_LEAN: dict[str, tuple[Any, tuple[tuple[str, str | None], ...]]] = {
    "Request": (ExportTraceServiceRequest, (("resource_spans", "ResourceSpans"),)),
    "ResourceSpans": (ResourceSpans, (("scope_spans", "ScopeSpans"),)),
    "ScopeSpans": (ScopeSpans, (("spans", "Span"),)),
    "Span": (Span, (("trace_id", None), ("span_id", None), ("parent_span_id", None), ("name", None),
                    ("attributes", "KeyValue"), ("events", "Event"))),
    "Event": (Span.Event, (("name", None), ("attributes", "KeyValue"))),
    "KeyValue": (KeyValue, (("key", None), ("value", None))),
}


def _lean_request_class() -> Any:
    """The lean `ExportTraceServiceRequest` class, built at start-up in a private descriptor pool.

    Same field numbers and wire types as OTLP on the levels the index walks, so upb accepts and skips
    what the wire walk accepts and skips (wrong wire types and groups become unknown fields; what upb
    refuses beyond that, say a tag over 32 bits, goes to the wire walk)."""
    file = descriptor_pb2.FileDescriptorProto(name="wt_otel/ingest/spanindex_lean.proto",
                                              package="wt_otel.spanindex", syntax="proto2")
    for name, (otlp, fields) in _LEAN.items():
        message = file.message_type.add(name=name)
        for field_name, type_name in fields:
            real = otlp.DESCRIPTOR.fields_by_name[field_name]
            # `is_repeated` since protobuf 6.31 (where `label` went away); `label` before
            repeated = (real.is_repeated if hasattr(real, "is_repeated") else real.label == _FIELD.LABEL_REPEATED
                        ) or (otlp is KeyValue and field_name == "value")
            field = message.field.add(name=field_name, number=real.number,
                                      label=_FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL,
                                      type=_FIELD.TYPE_MESSAGE if type_name else _FIELD.TYPE_BYTES)
            if type_name:
                field.type_name = f".wt_otel.spanindex.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("wt_otel.spanindex.Request"))


_LeanRequest = _lean_request_class()


def _lean_value(raws: Any) -> Any:
    """A value read by the index, from the occurrences of KeyValue.value that upb kept."""
    if len(raws) == 1:
        raw = raws[0]
        return _value(raw, 0, len(raw))
    if raws:
        raise SpanIndexError("an attribute read by the index has its value field more than once")
    return None


def _lean_key(key: bytes) -> str:
    try:
        return key.decode()
    except UnicodeDecodeError:
        raise SpanIndexError("an attribute key is not valid UTF-8") from None


def _lean_span(sp: Any) -> SpanEntry:
    genai = False
    model_bits = 0
    wanted: dict[int, Any] | None = None
    marks: dict[str, Any] | None = None
    classes = _KEY_CLASSES
    for kv in sp.attributes:
        key = kv.key
        cls = classes.get(key) or _classify(key)
        if cls is _PLAIN:
            continue
        if cls[0]:
            genai = True
            if cls is _GENAI_ONLY:
                continue
        elif cls[3]:
            model_bits |= cls[3]
        if cls[1] is not None:
            if wanted is None:
                wanted = {}
            wanted[cls[1]] = kv.value
        if cls[2]:
            if marks is None:
                marks = {}
            marks[_lean_key(key)] = _lean_value(kv.value)
    event_marks: list[tuple[str, Any]] | None = None
    events = sp.events
    if events:
        for event in events:
            own: dict[str, Any] = {}
            for kv in event.attributes:
                key = kv.key
                if key in _MARK_KEYS_SET or key.startswith(_MARK_PREFIXES_B):
                    own[_lean_key(key)] = _lean_value(kv.value)
            if own:
                if event_marks is None:
                    event_marks = []
                event_marks.extend(own.items())
            if not genai and event.name.startswith(_EVENT_PREFIX_B):
                genai = True
    values: dict[int, Any] = {}
    if wanted is not None:
        for slot, raws in sorted(wanted.items()) if len(wanted) > 1 else wanted.items():
            values[slot] = _lean_value(raws)
    return _entry(sp.trace_id, sp.span_id, sp.parent_span_id, sp.name, genai or model_bits == MODEL_CALL, values,
                  marks, event_marks)


def scan_python(body: bytes | bytearray | memoryview) -> list[SpanEntry]:
    """The pure-Python fallback: upb parses the lean schema, Python reads the few fields; raises
    `SpanIndexError`.

    The wire walk (`scan_wire`) answers instead whenever upb refuses the bytes or a value read is bad:
    it names the first problem in wire order, as the native scanner does, and accepts the few things
    the index accepts but upb does not (tags over 32 bits, mismatched nested group numbers)."""
    buf = body if type(body) is bytes else bytes(body)
    try:
        request = _LeanRequest.FromString(buf)
    except DecodeError:
        return scan_wire(buf)
    try:
        return [_lean_span(sp) for rs in request.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    except SpanIndexError:
        return scan_wire(buf)


# --------------------------------------------------------------------------- runs: spans grouped for serve

Run = tuple[str, str | None, list[int], tuple[tuple[int, str | None], ...], tuple[tuple[str, Any], ...], bool]
"""(trace_id, conversation, ordinals, roots, marks, genai): the spans of one trace and conversation id
(see `runs_python` for the spans that carry no conversation id)."""

_ZERO_TRACE_ID, _ZERO_SPAN_ID = "0" * 32, "0" * 16


def valid_ids(e: SpanEntry) -> bool:
    """Whether the entry's ids are W3C ids (16 and 8 bytes, not all zero; a parent of 8 bytes or none):
    serve keys sessions on them, and its decoder refuses a span without them (and says why)."""
    return not (len(e.trace_id) != 32 or len(e.span_id) != 16 or e.trace_id == _ZERO_TRACE_ID
                or e.span_id == _ZERO_SPAN_ID or (e.parent_span_id is not None and len(e.parent_span_id) != 16))


def runs_python(entries: list[SpanEntry]) -> list[Run] | None:
    """The spans of a request by trace and conversation id, in order of first appearance: per run its span
    numbers (wire order), `(number, operation)` of its parentless spans, its spans' marks (in order) and
    whether any is GenAI. None when a span's ids are not `valid_ids` (serve then decodes the request, and
    its decoder says which span). What serve keeps by reference, one object per run (`SpanRefs`).

    A span without a conversation id (an HTTP or database span under an agent) runs with its trace's
    conversation when the request carries exactly one for that trace: the assembler would put it in that
    session anyway (by trace id), and one run per session instead of two halves its per-run work. With
    several conversations in the trace, such spans keep a run of their own, as before."""
    grouped: dict[tuple[str, str | None], list[Any]] = {}
    convs: dict[str, str | None] = {}  # trace id -> its one conversation id in the request (None: several)
    for e in entries:
        if e.conversation is not None and convs.setdefault(e.trace_id, e.conversation) != e.conversation:
            convs[e.trace_id] = None
    for n, e in enumerate(entries):
        if not valid_ids(e):
            return None
        conv = e.conversation if e.conversation is not None else convs.get(e.trace_id)
        run = grouped.get((e.trace_id, conv))
        if run is None:
            run = grouped[(e.trace_id, conv)] = [e.trace_id, conv, [], [], [], False]
        run[2].append(n)
        if e.parent_span_id is None:
            run[3].append((n, e.operation))
        if e.marks:
            run[4].extend(e.marks)
        if e.genai:
            run[5] = True
    return [(t, c, ordinals, tuple(roots), tuple(marks), genai) for t, c, ordinals, roots, marks, genai
            in grouped.values()]


def scan_runs(body: bytes | bytearray | memoryview) -> tuple[int, list[Run] | None]:
    """(spans in the request, `runs_python` of its entries): what serve keeps by reference, without the
    entries. Raises `SpanIndexError` on bad input, as `scan`."""
    return _runs_native(body) if implementation() == "native" else scan_runs_python(body)


def scan_runs_python(body: bytes | bytearray | memoryview) -> tuple[int, list[Run] | None]:
    """`scan_runs` on the pure-Python fallback."""
    entries = scan_python(body)
    return len(entries), runs_python(entries)


def scan_runs_native(body: bytes | bytearray | memoryview) -> tuple[int, list[Run] | None]:
    """`scan_runs` in C whatever `WT_OTEL_SPANINDEX` chose; raises `SpanIndexUnavailable` when not built."""
    if _native_scan_runs is None:
        scan_native(b"")  # raises with the reason when nothing is built
        raise SpanIndexUnavailable("the native span index was built before scan_runs(): reinstall to rebuild it")
    return _runs_native(body)


def _runs_native(body: bytes | bytearray | memoryview) -> tuple[int, list[Run] | None]:
    """The C `scan_runs`: the wire walk without the GIL, then the runs, with no object made per span (the
    GIL-held part of `runs_python(scan_native(body))` was ~1 ms of a 500-span request, for serve's
    receivers). A malformed request, or an extension built before `scan_runs`, takes the GIL-held `scan`
    (which says what is wrong) and `runs_python`."""
    got = NotImplemented if _native_scan_runs is None else _native_scan_runs(body)
    if got is NotImplemented:
        entries = scan_native(body)
        return len(entries), runs_python(entries)
    return got


# --------------------------------------------------------------------------- the native scanner

def _load_native() -> Callable[[Any], list[SpanEntry]] | None:
    try:
        from wt_otel.ingest import _spanindex  # type: ignore[attr-defined]
    except ImportError:
        return None
    _spanindex.configure(
        genai_prefixes=_GENAI_PREFIXES_B, genai_keys=tuple(sorted(_GENAI_KEYS_B)), name_prefixes=_NAME_PREFIXES_B,
        event_prefix=_EVENT_PREFIX_B, wanted=tuple(k.encode() for k in _WANTED), mark_keys=_MARK_KEYS_B,
        mark_prefixes=_MARK_PREFIXES_B, operations=tuple(_OPERATIONS_B), entry_type=SpanEntry,
        error=SpanIndexError, resolve=_resolve)
    scan_fn: Callable[[Any], list[SpanEntry]] = _spanindex.scan
    return scan_fn


_native = _load_native()
_native_scan_runs: Callable[[Any], Any] | None = None
if _native is not None:
    from wt_otel.ingest import _spanindex as _ext  # type: ignore[attr-defined]

    _native_scan_runs = getattr(_ext, "scan_runs", None)  # None: an older build (rebuild with pip install)


def native_available() -> bool:
    """Whether the C extension was built and loads."""
    return _native is not None


def scan_native(body: bytes | bytearray | memoryview) -> list[SpanEntry]:
    """The C scanner; raises `SpanIndexUnavailable` when it is not built, `SpanIndexError` on bad input."""
    if _native is None:
        raise SpanIndexUnavailable("the native span index (wt_otel/ingest/_spanindex.c) is not built: "
                                   "install with a C compiler and the Python headers (python3-dev)")
    return _native(body)


# --------------------------------------------------------------------------- the choice

_chosen: tuple[str, Callable[[Any], list[SpanEntry]]] | None = None


def _choose() -> tuple[str, Callable[[Any], list[SpanEntry]]]:
    wanted = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if wanted not in ("auto", "native", "python", "off"):
        raise SpanIndexUnavailable(f"{ENV_VAR}={wanted!r}: use python, native, auto or off")
    if wanted == "off":
        return "off", scan_python
    if wanted == "python" or (wanted == "auto" and _native is None):
        return "python", scan_python
    if _native is None:
        scan_native(b"")  # raises with the reason
    return "native", scan_native


def implementation() -> str:
    """"native" or "python": the implementation `scan` uses (chosen once, from WT_OTEL_SPANINDEX);
    "off" when serve is not to use the index at all.

    Raises `SpanIndexUnavailable` when native is forced but not built, or the variable is not understood."""
    global _chosen
    if _chosen is None:
        _chosen = _choose()
    return _chosen[0]


def scan(body: bytes | bytearray | memoryview) -> list[SpanEntry]:
    """Every span of a serialized traces request, in wire order; raises `SpanIndexError` on bad input."""
    if _chosen is None:
        implementation()
    assert _chosen is not None
    return _chosen[1](body)
