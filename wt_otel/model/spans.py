"""The one internal record type every receiver and reader produces.

OTLP (protobuf or JSON), Agents SDK JSONL and generic JSONL all become
`SpanRecord`s; OTLP log records become `LogRecord`s and are attached to their
span as `Event`s by the session builder, so dialects read span events and log
events the same way. Attribute values are plain Python: kvlist -> dict,
array -> list, bytes -> bytes, int64 -> int.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUS_UNSET, STATUS_OK, STATUS_ERROR = "UNSET", "OK", "ERROR"


@dataclass(slots=True)
class Event:
    """A span event or a log record attached to a span (then `body` is set)."""

    name: str
    time_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    body: Any = None


@dataclass(slots=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SpanRecord:
    """One span, ids as lowercase hex (trace 32 chars, span 16 chars)."""

    trace_id: str
    span_id: str
    name: str
    parent_span_id: str | None = None
    kind: str = "INTERNAL"  # INTERNAL | SERVER | CLIENT | PRODUCER | CONSUMER
    start_ns: int = 0
    end_ns: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    status_code: str = STATUS_UNSET
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    scope_name: str = ""
    scope_version: str = ""
    # where serve's segment log holds the request this came from (wt_otel.serve.segments); -1: not logged.
    # Not part of the record's value: equal records compare equal wherever they were read from.
    segment_pos: int = field(default=-1, compare=False, repr=False)

    @property
    def service_name(self) -> str | None:
        value = self.resource.get("service.name")
        return value if isinstance(value, str) else None


@dataclass(slots=True)
class LogRecord:
    """One OTLP log record; GenAI events (1.28-1.36) arrive this way."""

    event_name: str = ""
    trace_id: str | None = None
    span_id: str | None = None
    time_ns: int = 0
    severity_text: str = ""
    body: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    resource: dict[str, Any] = field(default_factory=dict)
    scope_name: str = ""
    segment_pos: int = field(default=-1, compare=False, repr=False)  # as SpanRecord.segment_pos

    def as_event(self) -> Event:
        """The log as a span event; the name falls back to attr `event.name`."""
        name = self.event_name or str(self.attributes.get("event.name") or "")
        return Event(name=name, time_ns=self.time_ns, attributes=self.attributes, body=self.body)


Record = SpanRecord | LogRecord


@dataclass(slots=True)
class SpanRef:
    """A span serve keeps by reference: what grouping needs, read by the span index without decoding
    (`wt_otel.ingest.spanindex`), and where its bytes are: span number `ordinal` (wire order) of the
    request at `segment_pos` in serve's segment log.

    Decoding every span into a `SpanRecord` on arrival was most of serve's cost; a session whose spans
    are all refs and carry no flag or feedback key is indexed, not decoded (rendered on demand)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    conversation: str | None  # `dialects.common.conversation_id` of its attributes
    operation: str | None  # `dialects.common.operation` of a parentless span; None when it has a parent
    marks: tuple[tuple[str, Any], ...]  # its incident and feedback attributes (the flag rules' keys)
    segment_pos: int
    ordinal: int
