"""Stand-ins for rotel's `rotel_sdk.open_telemetry.*` objects, built from wt-otel records.

rotel's own types exist only inside a running rotel; these have the shapes rotel documents
(mutable lists of KeyValue whose `value` holds an AnyValue), enough for the processor's hooks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from wt_otel.model.spans import LogRecord as WtLog
from wt_otel.model.spans import SpanRecord


@dataclass
class AnyValue:
    value: Any = None


@dataclass
class KeyValue:
    key: str
    value: AnyValue | None

    @staticmethod
    def new_string_value(key: str, value: str) -> KeyValue:
        return KeyValue(key, AnyValue(value))


class ArrayValue(list):
    pass


class KeyValueList(list):
    pass


SDK = SimpleNamespace(AnyValue=AnyValue, KeyValue=KeyValue, ArrayValue=ArrayValue, KeyValueList=KeyValueList)


@dataclass
class SpanEvent:
    name: str
    attributes: list = field(default_factory=list)


@dataclass
class Span:
    name: str
    trace_id: bytes
    attributes: list = field(default_factory=list)
    events: list = field(default_factory=list)
    span_id: bytes = b""


@dataclass
class ScopeSpans:
    spans: list


@dataclass
class Resource:
    attributes: list = field(default_factory=list)


@dataclass
class ResourceSpans:
    scope_spans: list
    resource: Resource | None = None


@dataclass
class LogRecord:
    trace_id: bytes = b""
    event_name: str = ""
    body: AnyValue | None = None
    attributes: list = field(default_factory=list)


@dataclass
class ScopeLogs:
    log_records: list


@dataclass
class ResourceLogs:
    scope_logs: list
    resource: Resource | None = None


def _attrs(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(k, AnyValue(v)) for k, v in attrs.items()]


def span(record: SpanRecord) -> Span:
    return Span(record.name, bytes.fromhex(record.trace_id), _attrs(record.attributes),
                [SpanEvent(e.name, _attrs(e.attributes)) for e in record.events], bytes.fromhex(record.span_id))


def log(record: WtLog) -> LogRecord:
    return LogRecord(bytes.fromhex(record.trace_id or ""), record.event_name, None, _attrs(record.attributes))
