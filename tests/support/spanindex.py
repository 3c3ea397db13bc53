"""The span index's two implementations for tests, and what the decoder says an index entry must be.

`IMPLEMENTATIONS` is what every comparison is parametrized with: the pure-Python fallback (upb on the
lean schema) and the wire walk (its reference on hostile input) always, the native scanner when it was
built; a missing native scanner is a skip, or a failure when `WT_OTEL_REQUIRE_NATIVE=1` (CI sets it:
there the extension must have been built).

`truth(body)` derives each span's entry from today's decode path instead (upb parse,
`spans_from_request`, the genai-filter's `is_genai`, the dialects' `conversation_id` and
`operation`), so the index is checked against the code it stands in for, not only against itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from wt_otel.ingest import spanindex
from wt_otel.ingest.dialects.common import conversation_id, operation
from wt_otel.ingest.flags import FEEDBACK_KEYS
from wt_otel.ingest.keys import FLAG_KEYS
from wt_otel.ingest.otlp import spans_from_request
from wt_otel.ingest.spanindex import SpanEntry, SpanIndexError
from wt_otel.processors.genai_filter import is_genai

Scan = Callable[[bytes], list[SpanEntry]]
NATIVE_REQUIRED = os.environ.get("WT_OTEL_REQUIRE_NATIVE") == "1"


def native_or_skip() -> Scan:
    """The native scanner; skips the test when it is not built, fails instead under WT_OTEL_REQUIRE_NATIVE=1."""
    if not spanindex.native_available():
        message = "the native span index (wt_otel/ingest/_spanindex.c) is not built: no C compiler at install?"
        if NATIVE_REQUIRED:
            pytest.fail(f"WT_OTEL_REQUIRE_NATIVE=1 but {message}")
        pytest.skip(message)
    return spanindex.scan_native


IMPLEMENTATIONS = ["python", "wire", "native"]


def implementation(name: str) -> Scan:
    if name == "wire":
        return spanindex.scan_wire
    return spanindex.scan_python if name == "python" else native_or_skip()


def outcome(scan: Scan, body: bytes) -> tuple[str, str]:
    """What a scanner makes of `body`, comparable across implementations (repr: NaN != NaN)."""
    try:
        return "entries", repr(scan(body))
    except SpanIndexError as e:
        return "error", str(e)


def decodes(body: bytes) -> bool:
    """Whether upb's full decoder accepts `body` as a traces request (what the wire check promises)."""
    try:
        ExportTraceServiceRequest.FromString(body)
    except DecodeError:
        return False
    return True


def _is_mark(key: str) -> bool:
    return any(fnmatchcase(key, pattern) for pattern in (*FLAG_KEYS, *FEEDBACK_KEYS))


def view(entries: list[SpanEntry]) -> list[tuple[Any, ...]]:
    """Entries as comparable tuples (reprs of the marks: NaN != NaN), GenAI as the receivers judge it from an
    entry: its own evidence, or a usable conversation id with a mark (`genai_filter.is_genai`'s rule)."""
    return [(e[0], e[1], e[2], e.genai or (e.conversation is not None and bool(e.marks)), *e[4:6], repr(e.marks))
            for e in entries]


def truth(body: bytes) -> list[tuple[Any, ...]]:
    """Each span's entry as today's decode path and stages compute it, in `view` form."""
    rows = []
    for r in spans_from_request(ExportTraceServiceRequest.FromString(body)):
        marks = repr(tuple((k, v) for attrs in (r.attributes, *(e.attributes for e in r.events))
                           for k, v in attrs.items() if _is_mark(k)))
        rows.append((r.trace_id, r.span_id, r.parent_span_id, is_genai(r), conversation_id(r.attributes),
                     None if r.parent_span_id else operation(r), marks))
    return rows


def text(value: Any) -> str:
    """`value` as text protobuf can hold (lone surrogates replaced)."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def any_value(value: Any) -> AnyValue:
    """A Python value as an OTLP AnyValue (lists and dicts nested, None as the empty AnyValue; ints beyond
    int64 and text protobuf cannot hold become text)."""
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=text(k), value=any_value(v))
                                                          for k, v in value.items()]))
    return AnyValue(string_value=text(value))
