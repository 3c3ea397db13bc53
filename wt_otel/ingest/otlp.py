"""OTLP traces and logs, protobuf or JSON, into `SpanRecord`s and `LogRecord`s.

Two decoders with one output:

* protobuf messages (`ExportTraceServiceRequest`/`TracesData`, and the logs
  equivalents) as the receivers and `.pb` dumps give them. This path is hot: it
  touches every attribute of every span, so it is written flat (one
  `WhichOneof` per value, scalars read with `getattr`, no per-span helper
  calls where a loop body will do).
* OTLP/JSON dicts as the Collector `file` exporter writes them. They are decoded
  directly, not through `json_format`, because that is slow and rejects quirks
  real producers emit (snake_case keys, base64 ids, int64 as numbers, the
  pre-1.0 `instrumentationLibrary*` names). Wrong shapes raise `OtlpJsonError`
  naming the JSON path, e.g. `resourceSpans[0].scopeSpans[1].spans[3].traceId`.

The resource dict is shared by all records of one resource: treat it as
read-only (copy before changing it).

Text JSON can carry and UTF-8 cannot: a lone surrogate (`"\\ud83d"`, a JS SDK
cutting an emoji in half) decodes to a Python str that no protobuf, file or
socket accepts. The JSON decoders keep such text escaped (the surrogate becomes
its `\\udXXX` escape text) and name what was escaped in the record's
`wt_otel.escaped_text` attribute, which the session turns into a warning: one
producer's broken string never costs the batch it came in.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from google.protobuf.internal import api_implementation
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as _PbLogRecord
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from wt_otel.model.spans import Event, Link, LogRecord, SpanRecord

__all__ = [
    "ESCAPED_TEXT",
    "OtlpJsonError",
    "check_protobuf_backend",
    "escape_lone_surrogates",
    "logs_from_json",
    "may_hold_lone_surrogates",
    "logs_from_request",
    "pb_attrs",
    "spans_from_json",
    "span_record",
    "spans_from_request",
]

# SPAN_KIND_UNSPECIFIED (0) reads as INTERNAL, as the OTLP spec says to treat it.
_KINDS = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUSES = ("UNSET", "OK", "ERROR")
# `event_name` arrived in opentelemetry-proto 1.5; older builds lack the field.
_HAS_EVENT_NAME = "event_name" in _PbLogRecord.DESCRIPTOR.fields_by_name
_SCALARS = frozenset({"string_value", "bool_value", "int_value", "double_value", "bytes_value"})
# the attribute that says which of a record's fields held text UTF-8 cannot encode (kept escaped)
ESCAPED_TEXT = "wt_otel.escaped_text"
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # the only way JSON text can carry a lone surrogate


def check_protobuf_backend() -> str:
    """The protobuf runtime in use: "upb" is expected, "python" is ~200x slower."""
    return api_implementation.Type()


# --------------------------------------------------------------------------- protobuf


def _pb_value(v: Any) -> Any:
    """AnyValue -> plain Python; arrays and kvlists recurse."""
    kind = v.WhichOneof("value")
    if kind in _SCALARS:
        return getattr(v, kind)
    if kind == "kvlist_value":
        return _pb_attrs(v.kvlist_value.values)
    if kind == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    return None  # empty AnyValue, or string_value_strindex (profiles only)


def _pb_attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        v = kv.value
        text = v.string_value  # most attributes: a non-empty string_value is the oneof's (the others read "")
        if text:
            out[kv.key] = text
            continue
        kind = v.WhichOneof("value")
        out[kv.key] = text if kind == "string_value" else getattr(v, kind) if kind in _SCALARS else _pb_value(v)
    return out


pb_attrs = _pb_attrs  # KeyValues -> dict, for readers that convert only the keys they need


def _kind(code: int) -> str:
    return _KINDS[code] if 0 <= code < len(_KINDS) else "INTERNAL"


def _status(code: int) -> str:
    return _STATUSES[code] if 0 <= code < len(_STATUSES) else "UNSET"


def _pb_events(events: Any) -> list[Event]:
    return [Event(name=e.name, time_ns=e.time_unix_nano, attributes=_pb_attrs(e.attributes)) for e in events]


def _pb_links(links: Any) -> list[Link]:
    return [Link(trace_id=k.trace_id.hex(), span_id=k.span_id.hex(), attributes=_pb_attrs(k.attributes)) for k in links]


def spans_from_request(req: ExportTraceServiceRequest | TracesData,
                       keep: Sequence[bool] | None = None,
                       trace_ids: AbstractSet[bytes] | None = None) -> Iterator[SpanRecord]:
    """Every span of a traces request, ids as lowercase hex, enums as names.

    `keep` (one flag per span, in request order, as the span index gives them): convert only those
    spans; the others are skipped before any of their attributes is read. `trace_ids` (raw ids): only
    the spans of those traces (the importer's workers)."""
    n = -1
    for rs in req.resource_spans:
        resource = _pb_attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope = ss.scope
            scope_name, scope_version = scope.name, scope.version
            for span in ss.spans:
                if keep is not None:
                    n += 1
                    if not keep[n]:
                        continue
                if trace_ids is not None and span.trace_id not in trace_ids:
                    continue
                yield span_record(span, resource, scope_name, scope_version)


def span_record(span: Any, resource: dict[str, Any], scope_name: str, scope_version: str) -> SpanRecord:
    """One protobuf span as a `SpanRecord`, with its resource's attributes and its scope (`spans_from_request`
    converts each span with it; serve's session core converts only the spans a session holds)."""
    parent = span.parent_span_id
    attrs, events, links = span.attributes, span.events, span.links
    status = span.status
    return SpanRecord(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        name=span.name,
        parent_span_id=parent.hex() if parent else None,
        kind=_kind(span.kind),
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        attributes=_pb_attrs(attrs) if attrs else {},
        events=_pb_events(events) if events else [],
        links=_pb_links(links) if links else [],
        status_code=_status(status.code),
        status_message=status.message,
        resource=resource,
        scope_name=scope_name,
        scope_version=scope_version,
    )


def logs_from_request(req: ExportLogsServiceRequest | LogsData,
                      trace_ids: AbstractSet[bytes] | None = None) -> Iterator[LogRecord]:
    """Every log record of a logs request (only those of `trace_ids`, raw ids, when given); empty
    trace/span ids become None."""
    for rl in req.resource_logs:
        resource = _pb_attrs(rl.resource.attributes)
        for sl in rl.scope_logs:
            scope_name = sl.scope.name
            for rec in sl.log_records:
                trace_id, span_id = rec.trace_id, rec.span_id
                if trace_ids is not None and trace_id not in trace_ids:
                    continue
                yield LogRecord(
                    event_name=rec.event_name if _HAS_EVENT_NAME else "",
                    trace_id=trace_id.hex() if trace_id else None,
                    span_id=span_id.hex() if span_id else None,
                    time_ns=rec.time_unix_nano or rec.observed_time_unix_nano,
                    severity_text=rec.severity_text,
                    body=_pb_value(rec.body),
                    attributes=_pb_attrs(rec.attributes),
                    resource=resource,
                    scope_name=scope_name,
                )


# --------------------------------------------------------------------------- JSON


class OtlpJsonError(ValueError):
    """A wrong shape in OTLP/JSON; `str()` names the JSON path and the problem."""

    def __init__(self, problem: str, where: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.where: list[str] = [where] if where else []

    def at(self, part: str) -> OtlpJsonError:
        """Prefix the path with an outer location (called while unwinding)."""
        self.where.insert(0, part)
        return self

    def __str__(self) -> str:
        path = ".".join(self.where)
        return f"{path}: {self.problem}" if path else self.problem


_MISSING = object()
# Pre-1.0 OTLP (and old collectors' file exporter) used "instrumentationLibrary*".
_SCOPE_SPANS_KEYS = (
    "scopeSpans",
    "scope_spans",
    "instrumentationLibrarySpans",
    "instrumentation_library_spans",
)
_SCOPE_LOGS_KEYS = ("scopeLogs", "scope_logs", "instrumentationLibraryLogs", "instrumentation_library_logs")


def _get(d: dict[str, Any], *keys: str) -> tuple[str, Any]:
    """The first of `keys` present in `d` (camelCase, snake_case, legacy) and its value."""
    for key in keys:
        value = d.get(key, _MISSING)
        if value is not _MISSING:
            return key, value
    return keys[0], None


def _list(d: dict[str, Any], *keys: str) -> tuple[str, list[Any]]:
    key, value = _get(d, *keys)
    if value is None:
        return key, []
    if not isinstance(value, list):
        raise OtlpJsonError(f"must be an array, not {type(value).__name__}", key)
    return key, value


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OtlpJsonError(f"{what} must be an object, not {type(value).__name__}")
    return value


def _json_time(value: Any, where: str) -> int:
    """A fixed64 timestamp: what protobuf could carry (0 .. 2**64-1 ns), or an error naming the field."""
    n = _json_int(value, where)
    if not 0 <= n < 2**64:
        raise OtlpJsonError(f"timestamp {str(n)[:40]}{'...' if len(str(n)) > 40 else ''} is outside "
                            "0..2**64-1 nanoseconds", where)
    return n


def _json_int(value: Any, where: str) -> int:
    """int64/uint64 fields: JSON numbers or decimal strings (proto3 JSON writes strings)."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    elif isinstance(value, float) and value.is_integer():
        return int(value)
    raise OtlpJsonError(f"not an integer: {value!r}", where)


def _json_double(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):  # proto3 JSON writes "NaN", "Infinity", "-Infinity"
        try:
            return float(value)
        except ValueError:
            pass
    raise OtlpJsonError(f"not a number: {value!r}", where)


def _b64(value: str) -> bytes:
    """Standard or URL-safe base64, padding optional (proto3 JSON accepts all four)."""
    value = value.replace("-", "+").replace("_", "/")
    return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)


def _json_id(value: Any, nbytes: int, where: str) -> str | None:
    """A trace (16 bytes) or span (8 bytes) id, hex or base64 -> lowercase hex; empty -> None.

    Hex is tried first when the length fits (32/16 chars), so an all-hex string is
    never misread as base64; otherwise base64 must decode to exactly `nbytes`.
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        raw = None
        if len(value) == 2 * nbytes:
            try:
                raw = bytes.fromhex(value)
            except ValueError:
                raw = None
        if raw is None or len(raw) != nbytes:
            try:
                raw = _b64(value)
            except (binascii.Error, ValueError):
                raw = None
        if raw is not None and len(raw) == nbytes:
            return raw.hex()
    raise OtlpJsonError(f"not a hex or base64 id of {nbytes} bytes: {value!r}", where)


def _json_req_id(value: Any, nbytes: int, where: str) -> str:
    result = _json_id(value, nbytes, where)
    if result is None:
        raise OtlpJsonError(f"missing (a {2 * nbytes}-char hex id is required)", where)
    return result


def _json_enum(value: Any, names: tuple[str, ...], prefix: str, where: str) -> str:
    """An enum as its int or its proto name ("SPAN_KIND_CLIENT"), bare names too ("CLIENT")."""
    if value is None:
        return names[0]
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < len(names):
            return names[value]
    elif isinstance(value, str):
        bare = value.removeprefix(prefix)
        if bare == "UNSPECIFIED":
            return names[0]
        if bare in names:
            return bare
    raise OtlpJsonError(f"unknown value {value!r} (expected {prefix}{names[-1]} or its number)", where)


def _json_value(v: Any, where: str) -> Any:
    """OTLP/JSON AnyValue -> plain Python; `{}` (an empty AnyValue) -> None."""
    if not isinstance(v, dict):
        raise OtlpJsonError('an AnyValue must be an object like {"stringValue": "..."}', where)
    if not v:
        return None
    if len(v) != 1:
        raise OtlpJsonError(f"an AnyValue holds exactly one of its fields, got {sorted(v)}", where)
    ((key, x),) = v.items()
    try:
        if key in ("stringValue", "string_value"):
            if isinstance(x, str):
                return x
            raise OtlpJsonError(f"must be a string, not {type(x).__name__}")
        if key in ("intValue", "int_value"):
            n = _json_int(x, "")
            # beyond int64 no OTLP producer can mean it as a number, and no writer encodes it: kept as text
            return n if -(2**63) <= n < 2**64 else str(n)
        if key in ("boolValue", "bool_value"):
            if isinstance(x, bool):
                return x
            raise OtlpJsonError(f"must be true or false, not {x!r}")
        if key in ("doubleValue", "double_value"):
            return _json_double(x, "")
        if key in ("kvlistValue", "kvlist_value"):
            return _json_attrs(_list(_obj(x, "kvlistValue"), "values")[1], "values")
        if key in ("arrayValue", "array_value"):
            values_key, values = _list(_obj(x, "arrayValue"), "values")
            return [_json_value(item, f"{values_key}[{i}]") for i, item in enumerate(values)]
        if key in ("bytesValue", "bytes_value"):
            if isinstance(x, str):
                try:
                    return _b64(x)
                except (binascii.Error, ValueError):
                    pass
            raise OtlpJsonError("must be a base64 string")
    except OtlpJsonError as e:
        raise e.at(key).at(where) if where else e.at(key) from None
    raise OtlpJsonError(f"unknown AnyValue field {key!r}", where)


def _json_attrs(kvs: list[Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, kv in enumerate(kvs):
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise OtlpJsonError('an attribute must be an object {"key": "...", "value": {...}}', f"{where}[{i}]")
        value = kv.get("value")
        out[kv["key"]] = None if value is None else _json_value(value, f"{where}[{i}].value")
    return out


def _json_attrs_of(d: dict[str, Any]) -> dict[str, Any]:
    key, kvs = _list(d, "attributes")
    return _json_attrs(kvs, key) if kvs else {}


def _json_resource(d: dict[str, Any]) -> dict[str, Any]:
    key, resource = _get(d, "resource")
    if resource is None:
        return {}
    try:
        return _json_attrs_of(_obj(resource, "resource"))
    except OtlpJsonError as e:
        raise e.at(key) from None


def _json_scope(d: dict[str, Any]) -> tuple[str, str]:
    key, scope = _get(d, "scope", "instrumentationLibrary", "instrumentation_library")
    if scope is None:
        return "", ""
    if not isinstance(scope, dict):
        raise OtlpJsonError("must be an object", key)
    return str(scope.get("name") or ""), str(scope.get("version") or "")


def _json_span(s: Any, resource: dict[str, Any], scope: tuple[str, str]) -> SpanRecord:
    s = _obj(s, "a span")
    events = []
    events_key, raw_events = _list(s, "events")
    for i, e in enumerate(raw_events):
        try:
            e = _obj(e, "an event")
            events.append(
                Event(
                    name=str(e.get("name") or ""),
                    time_ns=_json_time(_get(e, "timeUnixNano", "time_unix_nano")[1], "timeUnixNano"),
                    attributes=_json_attrs_of(e),
                )
            )
        except OtlpJsonError as err:
            raise err.at(f"{events_key}[{i}]") from None
    links = []
    links_key, raw_links = _list(s, "links")
    for i, k in enumerate(raw_links):
        try:
            k = _obj(k, "a link")
            links.append(
                Link(
                    trace_id=_json_req_id(_get(k, "traceId", "trace_id")[1], 16, "traceId"),
                    span_id=_json_req_id(_get(k, "spanId", "span_id")[1], 8, "spanId"),
                    attributes=_json_attrs_of(k),
                )
            )
        except OtlpJsonError as err:
            raise err.at(f"{links_key}[{i}]") from None
    status = s.get("status") or {}
    if not isinstance(status, dict):
        raise OtlpJsonError("must be an object", "status")
    status_code = _json_enum(status.get("code"), _STATUSES, "STATUS_CODE_", "status.code")
    return SpanRecord(
        trace_id=_json_req_id(_get(s, "traceId", "trace_id")[1], 16, "traceId"),
        span_id=_json_req_id(_get(s, "spanId", "span_id")[1], 8, "spanId"),
        name=str(s.get("name") or ""),
        parent_span_id=_json_id(_get(s, "parentSpanId", "parent_span_id")[1], 8, "parentSpanId"),
        kind=_json_enum(s.get("kind"), _KINDS, "SPAN_KIND_", "kind"),
        start_ns=_json_time(_get(s, "startTimeUnixNano", "start_time_unix_nano")[1], "startTimeUnixNano"),
        end_ns=_json_time(_get(s, "endTimeUnixNano", "end_time_unix_nano")[1], "endTimeUnixNano"),
        attributes=_json_attrs_of(s),
        events=events,
        links=links,
        status_code=status_code,
        status_message=str(status.get("message") or ""),
        resource=resource,
        scope_name=scope[0],
        scope_version=scope[1],
    )


def _json_log(r: Any, resource: dict[str, Any], scope_name: str) -> LogRecord:
    r = _obj(r, "a log record")
    time_ns = _json_time(_get(r, "timeUnixNano", "time_unix_nano")[1], "timeUnixNano")
    if not time_ns:
        time_ns = _json_time(_get(r, "observedTimeUnixNano", "observed_time_unix_nano")[1], "observedTimeUnixNano")
    body = r.get("body")
    return LogRecord(
        event_name=str(_get(r, "eventName", "event_name")[1] or ""),
        trace_id=_json_id(_get(r, "traceId", "trace_id")[1], 16, "traceId"),
        span_id=_json_id(_get(r, "spanId", "span_id")[1], 8, "spanId"),
        time_ns=time_ns,
        severity_text=str(_get(r, "severityText", "severity_text")[1] or ""),
        body=None if body is None else _json_value(body, "body"),
        attributes=_json_attrs_of(r),
        resource=resource,
        scope_name=scope_name,
    )


# what a caller is told of a record that could not be converted for a reason no shape check foresaw:
# (the record's JSON, where it was, why); the record is skipped, the rest of the request is not
Quarantine = Callable[[Any, str, str], None]


def spans_from_json(obj: dict[str, Any], *, escape: bool = True,
                    quarantine: Quarantine | None = None) -> Iterator[SpanRecord]:
    """Spans of one OTLP/JSON traces request (`{"resourceSpans": [...]}`).

    Raises `OtlpJsonError` (a ValueError) naming the JSON path of a wrong shape;
    spans before the error have been yielded, so collect with `list()` to get
    all-or-nothing. Lone surrogates are kept escaped (`escape=False`: the caller
    knows there are none, `may_hold_lone_surrogates`). With `quarantine`, a span
    whose conversion raises anything else is handed to it and skipped.
    """
    return _json_records(obj, ("resourceSpans", "resource_spans"), _SCOPE_SPANS_KEYS, ("spans",), _json_span,
                         escape, quarantine)


def logs_from_json(obj: dict[str, Any], *, escape: bool = True,
                   quarantine: Quarantine | None = None) -> Iterator[LogRecord]:
    """Log records of one OTLP/JSON logs request (`{"resourceLogs": [...]}`).

    Errors, partial output, escaping and `quarantine` as in `spans_from_json`.
    """
    return _json_records(obj, ("resourceLogs", "resource_logs"), _SCOPE_LOGS_KEYS, ("logRecords", "log_records"),
                         lambda rec, resource, scope: _json_log(rec, resource, scope[0]), escape, quarantine)


def may_hold_lone_surrogates(data: bytes) -> bool:
    """False when JSON text `data` cannot decode to a lone surrogate (it has no `\\ud8xx`-`\\udfxx` escape):
    the decoders may then skip looking for them."""
    return _SURROGATE_ESCAPE.search(data) is not None


def _escape_text(s: str) -> str | None:
    """`s` with each lone surrogate as its escape text (`\\ud83d`); None when it has none."""
    if s.isascii() or _SURROGATE.search(s) is None:
        return None
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _escape_in_place(container: dict[Any, Any] | list[Any]) -> bool:
    """Escape every lone surrogate in the keys and strings of `container`, in place, iteratively (hostile
    nesting cannot overflow the stack); whether anything changed."""
    changed = False
    stack: list[dict[Any, Any] | list[Any]] = [container]
    while stack:
        c = stack.pop()
        items = list(c.items()) if isinstance(c, dict) else list(enumerate(c))
        for k, v in items:
            if isinstance(v, str):
                if (fixed := _escape_text(v)) is not None:
                    c[k] = fixed
                    changed = True
            elif isinstance(v, dict | list):
                stack.append(v)
            if isinstance(c, dict) and isinstance(k, str) and (key := _escape_text(k)) is not None:
                c[key] = c.pop(k)
                changed = True
    return changed


def _escape_attrs(attrs: dict[str, Any], prefix: str, where: list[str]) -> None:
    for key in list(attrs):
        holder = [attrs[key]]
        fixed_key = _escape_text(key)
        if _escape_in_place(holder) or fixed_key is not None:
            where.append(f"{prefix}.{fixed_key or key}")
            if fixed_key is not None:
                del attrs[key]
            attrs[fixed_key or key] = holder[0]


def escape_lone_surrogates(record: SpanRecord | LogRecord) -> list[str]:
    """Escape every lone surrogate in `record` (not its shared resource), in place; where they were."""
    where: list[str] = []
    for name in ("name", "status_message", "scope_name", "scope_version", "event_name", "severity_text"):
        value = getattr(record, name, None)
        if isinstance(value, str) and (fixed := _escape_text(value)) is not None:
            setattr(record, name, fixed)
            where.append(name)
    _escape_attrs(record.attributes, "attributes", where)
    if isinstance(record, LogRecord):
        body = [record.body]
        if _escape_in_place(body):
            record.body = body[0]
            where.append("body")
        return where
    for i, event in enumerate(record.events):
        if (fixed := _escape_text(event.name)) is not None:
            event.name = fixed
            where.append(f"events[{i}].name")
        _escape_attrs(event.attributes, f"events[{i}].attributes", where)
    for i, link in enumerate(record.links):
        _escape_attrs(link.attributes, f"links[{i}].attributes", where)
    return where


def _json_records(obj: Any, resource_keys: tuple[str, ...], scope_keys: tuple[str, ...], leaf_keys: tuple[str, ...],
                  make: Any, escape: bool = True, quarantine: Quarantine | None = None) -> Iterator[Any]:
    """Walk resource -> scope -> records for either signal; an error names its JSON path."""
    if not isinstance(obj, dict):
        raise OtlpJsonError(f"an OTLP/JSON request must be an object, not {type(obj).__name__}")
    r_key, resources = _list(obj, *resource_keys)
    for i, r in enumerate(resources):
        try:
            r = _obj(r, f"{resource_keys[0]} item")
            resource = _json_resource(r)
            # the resource is built here, not yet shared: escaped once, said on each of its records
            in_resource = ["resource"] if escape and _escape_in_place(resource) else []
            s_key, scopes = _list(r, *scope_keys)
            for j, sc in enumerate(scopes):
                try:
                    sc = _obj(sc, f"{scope_keys[0]} item")
                    scope = _json_scope(sc)
                    leaf_key, leaves = _list(sc, *leaf_keys)
                    for k, leaf in enumerate(leaves):
                        try:
                            record = make(leaf, resource, scope)
                            if escape and (escaped := escape_lone_surrogates(record) + in_resource):
                                record.attributes[ESCAPED_TEXT] = ", ".join(escaped)
                        except OtlpJsonError as e:
                            raise e.at(f"{leaf_key}[{k}]") from None
                        except RecursionError:
                            raise
                        except Exception as e:  # noqa: BLE001 - one record's unforeseen failure is that record's
                            if quarantine is None:
                                raise
                            quarantine(leaf, f"{r_key}[{i}].{s_key}[{j}].{leaf_key}[{k}]",
                                       f"{type(e).__name__}: {e}")
                            continue
                        yield record
                except OtlpJsonError as e:
                    raise e.at(f"{s_key}[{j}]") from None
        except OtlpJsonError as e:
            raise e.at(f"{r_key}[{i}]") from None
