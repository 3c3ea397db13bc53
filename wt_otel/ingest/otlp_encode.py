"""Records back into OTLP protobuf requests: the inverse of `otlp.spans_from_request` / `logs_from_request`.

serve's segment log holds protobuf only (the collector file exporter's
`format: proto`), so a request that arrived as OTLP/JSON, or one whose invalid
records were rejected, is stored as the protobuf of the records serve accepted.
Reading the result back with `spans_from_request` / `logs_from_request` gives
records equal to the ones encoded (a test checks the round trip); records are
grouped by resource and scope as an SDK exporter would send them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLogRecord
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from wt_otel.model.spans import LogRecord, SpanRecord

__all__ = ["logs_request", "traces_request"]

_KINDS = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUSES = {"UNSET": 0, "OK": 1, "ERROR": 2}
_INT64 = (-(2**63), 2**63 - 1)
_HAS_EVENT_NAME = "event_name" in PbLogRecord.DESCRIPTOR.fields_by_name


def any_value(value: Any) -> AnyValue:
    """Plain Python -> AnyValue, iteratively (hostile nesting cannot overflow the stack).

    An int beyond int64 (OTLP/JSON allows any number) is kept as its decimal string."""
    root = AnyValue()
    stack: list[tuple[AnyValue, Any]] = [(root, value)]
    while stack:
        out, v = stack.pop()
        if v is None:
            continue
        if isinstance(v, bool):
            out.bool_value = v
        elif isinstance(v, int):
            if _INT64[0] <= v <= _INT64[1]:
                out.int_value = v
            else:
                out.string_value = str(v)
        elif isinstance(v, float):
            out.double_value = v
        elif isinstance(v, str):
            out.string_value = v
        elif isinstance(v, bytes | bytearray):
            out.bytes_value = bytes(v)
        elif isinstance(v, dict):
            kvlist = out.kvlist_value
            kvlist.SetInParent()
            for k, item in v.items():
                kv = kvlist.values.add(key=str(k))
                stack.append((kv.value, item))
        elif isinstance(v, list | tuple):
            array = out.array_value
            array.SetInParent()
            for item in v:
                stack.append((array.values.add(), item))
        else:
            out.string_value = str(v)
    return root


def _attrs(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def _resource_key(resource: dict[str, Any]) -> int:
    return id(resource)


def _grouped(records: Iterable[Any], scope_of) -> dict[tuple[int, tuple[str, ...]], tuple[dict[str, Any], list[Any]]]:
    """Records by (resource, scope); decoded records of one resource share its dict, so `id` groups them."""
    groups: dict[tuple[int, tuple[str, ...]], tuple[dict[str, Any], list[Any]]] = {}
    for record in records:
        key = (_resource_key(record.resource), scope_of(record))
        if key not in groups:
            groups[key] = (record.resource, [])
        groups[key][1].append(record)
    return groups


def _span(s: SpanRecord) -> Span:
    span = Span(trace_id=bytes.fromhex(s.trace_id), span_id=bytes.fromhex(s.span_id), name=s.name,
                parent_span_id=bytes.fromhex(s.parent_span_id) if s.parent_span_id else b"",
                kind=_KINDS.get(s.kind, 1),  # type: ignore[arg-type]  # an int is a valid enum value
                start_time_unix_nano=s.start_ns, end_time_unix_nano=s.end_ns,
                attributes=_attrs(s.attributes),
                status=Status(code=_STATUSES.get(s.status_code, 0),  # type: ignore[arg-type]
                              message=s.status_message))
    for e in s.events:
        span.events.add(name=e.name, time_unix_nano=e.time_ns, attributes=_attrs(e.attributes))
    for link in s.links:
        span.links.add(trace_id=bytes.fromhex(link.trace_id), span_id=bytes.fromhex(link.span_id),
                       attributes=_attrs(link.attributes))
    return span


def traces_request(spans: Sequence[SpanRecord]) -> ExportTraceServiceRequest:
    """The spans as one request; ids must be valid hex (serve validates them before)."""
    request = ExportTraceServiceRequest()
    for (_, scope), (resource, group) in _grouped(spans, lambda s: (s.scope_name, s.scope_version)).items():
        request.resource_spans.append(ResourceSpans(
            resource=Resource(attributes=_attrs(resource)),
            scope_spans=[ScopeSpans(scope=InstrumentationScope(name=scope[0], version=scope[1]),
                                    spans=[_span(s) for s in group])]))
    return request


def _log(r: LogRecord) -> PbLogRecord:
    out = PbLogRecord(time_unix_nano=r.time_ns, severity_text=r.severity_text, attributes=_attrs(r.attributes),
                      trace_id=bytes.fromhex(r.trace_id) if r.trace_id else b"",
                      span_id=bytes.fromhex(r.span_id) if r.span_id else b"")
    if r.body is not None:
        out.body.CopyFrom(any_value(r.body))
    if r.event_name and _HAS_EVENT_NAME:
        out.event_name = r.event_name
    return out


def logs_request(logs: Sequence[LogRecord]) -> ExportLogsServiceRequest:
    """The log records as one request."""
    request = ExportLogsServiceRequest()
    for (_, scope), (resource, group) in _grouped(logs, lambda r: (r.scope_name,)).items():
        request.resource_logs.append(ResourceLogs(
            resource=Resource(attributes=_attrs(resource)),
            scope_logs=[ScopeLogs(scope=InstrumentationScope(name=scope[0]), log_records=[_log(r) for r in group])]))
    return request
