"""A session's records as one compact file: OTLP protobuf in the collector `file` exporter's `format: proto`
framing (4-byte big-endian length, then one message), which `wt-otel import` reads as it is.

Why: with `datadir.render: flagged` an unflagged session is not rendered; its records are kept so that it can
be rendered later (`wt-otel sessions render`, `wt-otel flag`) into exactly the files an inline render writes.
So the encoding must give back the same records: spans (their own events included) go into one
`ExportTraceServiceRequest`; the events that `attach_logs` appended from log records (every event from the
first one with a body on; native span events never have one) go into one `ExportLogsServiceRequest`, each a log
record of its span, so that reading the file and `attach_logs` again rebuild the same spans in the same order.
The stand-in spans `attach_logs` invents for logs without a span are written as those logs, not as spans.

`Unencodable` (a value OTLP cannot carry: an int beyond 64 bits, an unknown type, hostile nesting) tells the
caller to render the session instead.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLog
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from wt_otel.ingest.otlp import logs_from_request, spans_from_request
from wt_otel.ingest.sessions import attach_logs
from wt_otel.model.spans import LogRecord, SpanRecord

RAW_FILE = "records.otlp.pb"
_KINDS = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUSES = {"UNSET": 0, "OK": 1, "ERROR": 2}
_FRAME = struct.Struct(">I")
_HEX = frozenset("0123456789abcdef")


class Unencodable(ValueError):
    """The records hold a value OTLP protobuf cannot carry."""


def _set_value(out: AnyValue, v: Any) -> None:
    if isinstance(v, str):
        out.string_value = v
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, int):
        out.int_value = v  # ValueError beyond int64
    elif isinstance(v, float):
        out.double_value = v
    elif isinstance(v, bytes):
        out.bytes_value = v
    elif isinstance(v, list):
        arr = out.array_value
        arr.SetInParent()
        for x in v:
            _set_value(arr.values.add(), x)
    elif isinstance(v, dict):
        kvl = out.kvlist_value
        kvl.SetInParent()
        _set_attrs(kvl.values, v)
    elif v is not None:  # None stays an empty AnyValue, which reads back as None
        raise Unencodable(f"attribute value of type {type(v).__name__}")


def _set_attrs(out: Any, attrs: dict[str, Any]) -> None:
    for k, v in attrs.items():
        if not isinstance(k, str):
            raise Unencodable(f"attribute key of type {type(k).__name__}")
        kv: KeyValue = out.add()
        kv.key = k
        _set_value(kv.value, v)


def _id(hex_id: str | None, n: int) -> bytes:
    if not hex_id:
        return b""
    if len(hex_id) != 2 * n or not set(hex_id) <= _HEX:
        raise Unencodable(f"id {hex_id[:40]!r} is not {n} bytes of lowercase hex")
    return bytes.fromhex(hex_id)


def _is_real(span: SpanRecord) -> bool:
    """False for the stand-in `attach_logs` makes for logs without a span (its id is not an OTLP span id)."""
    return len(span.span_id) == 16 and set(span.span_id) <= _HEX


def encode_records(spans: Iterable[SpanRecord]) -> bytes:
    """The framed file: a traces request (when there are spans), then a logs request (when there are logs)."""
    try:
        return _encode(list(spans))
    except Unencodable:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        raise Unencodable(f"{type(e).__name__}: {e}") from None


def _encode(spans: list[SpanRecord]) -> bytes:
    traces, logs = ExportTraceServiceRequest(), ExportLogsServiceRequest()
    last_span_key: tuple[int, str, str] | None = None
    last_log_key: int | None = None
    scope_spans: Any = None
    scope_logs: Any = None
    for span in spans:
        real = _is_real(span)
        events = span.events
        cut = next((i for i, e in enumerate(events) if e.body is not None), len(events)) if real else 0
        if real:
            key = (id(span.resource), span.scope_name, span.scope_version)
            if key != last_span_key:
                rs = traces.resource_spans.add()
                _set_attrs(rs.resource.attributes, span.resource)
                scope_spans = rs.scope_spans.add()
                scope_spans.scope.name, scope_spans.scope.version = span.scope_name, span.scope_version
                last_span_key = key
            pb: PbSpan = scope_spans.spans.add()
            pb.trace_id, pb.span_id = _id(span.trace_id, 16), _id(span.span_id, 8)
            pb.parent_span_id = _id(span.parent_span_id, 8)
            pb.name, pb.kind = span.name, _KINDS.get(span.kind, 1)  # type: ignore[assignment]
            pb.start_time_unix_nano, pb.end_time_unix_nano = span.start_ns, span.end_ns
            _set_attrs(pb.attributes, span.attributes)
            for e in events[:cut]:
                pe = pb.events.add()
                pe.name, pe.time_unix_nano = e.name, e.time_ns
                _set_attrs(pe.attributes, e.attributes)
            for link in span.links:
                pl = pb.links.add()
                pl.trace_id, pl.span_id = _id(link.trace_id, 16), _id(link.span_id, 8)
                _set_attrs(pl.attributes, link.attributes)
            pb.status.code, pb.status.message = _STATUSES.get(span.status_code, 0), span.status_message  # type: ignore[assignment]
        for e in events[cut:]:  # log records attached to this span (or to a stand-in)
            if id(span.resource) != last_log_key:
                rl = logs.resource_logs.add()
                _set_attrs(rl.resource.attributes, span.resource)
                scope_logs = rl.scope_logs.add()
                last_log_key = id(span.resource)
            rec: PbLog = scope_logs.log_records.add()
            rec.time_unix_nano = e.time_ns
            rec.event_name = e.name
            rec.trace_id = _id(span.trace_id, 16)
            if real:
                rec.span_id = _id(span.span_id, 8)
            _set_attrs(rec.attributes, e.attributes)
            if e.body is not None:
                _set_value(rec.body, e.body)
    out = bytearray()
    for data in (traces.SerializeToString() if traces.resource_spans else b"",
                 logs.SerializeToString() if logs.resource_logs else b""):
        if data:
            out += _FRAME.pack(len(data)) + data
    return bytes(out)


def decode_records(data: bytes) -> list[SpanRecord]:
    """The spans of a file `encode_records` wrote, with their logs attached (what the store was given)."""
    records: list[SpanRecord | LogRecord] = []
    logs: list[LogRecord] = []
    at = 0
    while at < len(data):
        if at + 4 > len(data):
            raise ValueError(f"{RAW_FILE}: truncated length prefix at byte {at}")
        (n,) = _FRAME.unpack_from(data, at)
        body = data[at + 4:at + 4 + n]
        if len(body) < n:
            raise ValueError(f"{RAW_FILE}: truncated message at byte {at}: {n} bytes announced, {len(body)} left")
        at += 4 + n
        try:  # a logs request may or may not parse as traces (protobuf is permissive): judged by the ids
            spans = list(spans_from_request(ExportTraceServiceRequest.FromString(body)))
        except DecodeError:
            spans = []
        if spans and all(len(s.trace_id) == 32 and len(s.span_id) == 16 for s in spans):
            records.extend(spans)
            continue
        try:
            logs.extend(logs_from_request(ExportLogsServiceRequest.FromString(body)))
        except DecodeError as e:
            raise ValueError(f"{RAW_FILE}: message at byte {at - 4 - n} is not OTLP: {e}") from None
    for log in logs:
        if not log.trace_id:
            log.trace_id = None
    return attach_logs([*records, *logs])


def read_records(path: Path) -> list[SpanRecord]:
    return decode_records(Path(path).read_bytes())
