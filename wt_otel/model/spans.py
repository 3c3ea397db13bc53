"""The one internal record type every receiver and reader produces.

OTLP (protobuf or JSON), Agents SDK JSONL and generic JSONL all become
`SpanRecord`s; OTLP log records become `LogRecord`s and are attached to their
span as `Event`s by the session builder, so dialects read span events and log
events the same way. Attribute values are plain Python: kvlist -> dict,
array -> list, bytes -> bytes, int64 -> int.
"""

from __future__ import annotations

from collections.abc import Sequence
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
class SpanRefs:
    """Spans serve keeps by reference: those of one trace and conversation id in one request (a span without
    one goes with its trace's, see `spanindex.runs_python`), as the span index read them without decoding
    (`wt_otel.ingest.spanindex`), and where their bytes are: span numbers
    `ordinals` (wire order) of the request at `segment_pos` in serve's segment log.

    Decoding every span into a `SpanRecord` on arrival was most of serve's cost; a session whose spans are
    all refs and carry no flag or feedback key is indexed, not decoded (rendered on demand). One object per
    run of spans, not per span: a request of 500 spans is ~50 of these, and grouping works per run."""

    trace_id: str
    conversation: str | None  # `dialects.common.conversation_id` of their attributes
    segment_pos: int
    ordinals: list[int]  # ascending
    roots: tuple[tuple[int, str | None], ...] = ()  # (ordinal, `dialects.common.operation`) of parentless spans
    marks: tuple[tuple[str, Any], ...] = ()  # their incident and feedback attributes (the flag rules' keys)

    def split(self, n: int) -> tuple[SpanRefs, SpanRefs]:
        """The first `n` spans and the rest (a session that reaches its record bound mid-run)."""
        head, tail = self.ordinals[:n], self.ordinals[n:]
        last = head[-1]
        return (SpanRefs(self.trace_id, self.conversation, self.segment_pos, head,
                         tuple(r for r in self.roots if r[0] <= last), self.marks),
                SpanRefs(self.trace_id, self.conversation, self.segment_pos, tail,
                         tuple(r for r in self.roots if r[0] > last), self.marks))


def count(records: Sequence[Record | SpanRefs]) -> int:
    """Spans and log records in `records` (a `SpanRefs` counts its spans)."""
    return sum(len(r.ordinals) if type(r) is SpanRefs else 1 for r in records)
