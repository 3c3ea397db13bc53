"""Dump files into records: OTLP/JSON lines, OTLP protobuf, Agents SDK and generic JSONL.

`read_dump` streams: one line (or one protobuf message) is decoded at a time, a
bad line becomes a `LineError` in the output and reading goes on, so the caller
decides whether one corrupt line is fatal. Gzip is detected by its magic bytes
and decompressed as a stream; no single line or message may exceed
`max_record_bytes`, and an over-long one is skipped in chunks, so a gzip bomb
costs time, not memory.
"""

from __future__ import annotations

import calendar
import codecs
import gzip
import hashlib
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any, TypeVar, cast

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from wt_otel.ingest.dialects.common import conversation_id
from wt_otel.ingest.keys import CONVERSATION_KEYS
from wt_otel.ingest.otlp import logs_from_json, logs_from_request, pb_attrs, spans_from_json, spans_from_request
from wt_otel.model.spans import STATUS_ERROR, Event, LogRecord, SpanRecord

__all__ = [
    "FORMATS",
    "MAX_RECORD_BYTES",
    "DumpFormatError",
    "DumpReadError",
    "LineError",
    "detect_format",
    "iso_to_ns",
    "otlp_document",
    "proto_frames",
    "read_dump",
    "read_frame",
    "read_proto_frames",
    "scan_message",
    "sdk_span_id",
    "sdk_trace_id",
]

FORMATS = ("otlp-json", "otlp-proto", "agents-jsonl", "generic-jsonl", "jaeger-json", "wtin")
MAX_RECORD_BYTES = 64 * 1024 * 1024
_SNIFF_BYTES = 64 * 1024
_SNIFF_LINES = 20
_SKIP_CHUNK = 1024 * 1024
_PROTO_SUFFIXES = (".pb", ".binpb", ".proto")
# Contract A's file suffix and version key (`contracts.envelope.SUFFIX`, `VERSION_KEY`; a test keeps them
# equal): written here so that reading a dump does not import the envelope's models (~30 ms of every
# `wt-otel import`'s start, before pass 1; a `.wtin.json` input imports them to validate it)
WTIN_SUFFIX = ".wtin.json"
_WTIN_KEY = b'"windtunnel_interchange"'

_Request = TypeVar("_Request", ExportTraceServiceRequest, ExportLogsServiceRequest)


class DumpFormatError(ValueError):
    """The format is unknown or could not be recognised."""


class DumpReadError(Exception):
    """The file cannot be opened or read (missing, unreadable, broken gzip)."""


@dataclass(frozen=True, slots=True)
class LineError:
    """One line (JSONL: 1-based line number; proto stream: 1-based message index) that failed."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


Item = SpanRecord | LogRecord | LineError


# --------------------------------------------------------------------------- opening, lines


def _open(path: str) -> IO[bytes]:
    """The file as a binary stream, gunzipped on the fly when it starts with 1f 8b."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError as e:
        raise DumpReadError(f"cannot open {path}: {e.strerror or e}") from e
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError as e:
        raw.close()
        raise DumpReadError(f"cannot read {path}: {e}") from e
    if magic == b"\x1f\x8b":
        # a binary stream like `raw` (typeshed types GzipFile as BufferedIOBase, not IO[bytes])
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))  # closing it does not close `raw`...
    return raw


def _close(fh: IO[bytes]) -> None:
    fh.close()
    inner = getattr(fh, "fileobj", None)  # ...so close the file under a GzipFile too
    if inner is not None:
        inner.close()


_BOM = codecs.BOM_UTF8


def _lines(fh: IO[bytes], max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(1-based line number, bytes) per line; bytes is None for a line over `max_bytes`.

    An over-long line is read past in chunks and never held whole.
    """
    lineno = 0
    while True:
        line = fh.readline(max_bytes + 1)
        if not line:
            return
        lineno += 1
        if lineno == 1 and line.startswith(_BOM):  # Windows tools (PowerShell's Out-File, Notepad) write one
            line = line[len(_BOM):]
        if len(line) > max_bytes and not line.endswith(b"\n"):
            del line
            while True:
                chunk = fh.readline(_SKIP_CHUNK)
                if not chunk or chunk.endswith(b"\n"):
                    break
            yield lineno, None
        else:
            yield lineno, line


# --------------------------------------------------------------------------- detection


_OTLP_KEYS = ("resourceSpans", "resource_spans", "resourceLogs", "resource_logs")


def otlp_document(obj: Any) -> dict[str, Any] | None:
    """The OTLP/JSON request inside what a backend exports, or None: a request itself (the Collector's file
    exporter, Jaeger v2's OTLP API), Tempo's `{"batches": [ResourceSpans...]}`, and the `{"result": …}` /
    `{"trace": …}` wrappers (Jaeger's api/v3, Tempo's api/v2)."""
    if not isinstance(obj, dict):
        return None
    if any(k in obj for k in _OTLP_KEYS):
        return obj
    if isinstance(obj.get("batches"), list):
        return {"resourceSpans": obj["batches"]}
    for key in ("result", "trace"):
        inner = obj.get(key)
        if isinstance(inner, dict) and any(k in inner for k in _OTLP_KEYS):
            return inner
    return None


def _is_jaeger(obj: Any) -> bool:
    """Jaeger's JSON model (query API /api/traces, the UI's "Download JSON"): data[].spans[] + processes."""
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        return False
    first = obj["data"][0] if obj["data"] else None
    return isinstance(first, dict) and isinstance(first.get("spans"), list) and ("processes" in first
                                                                                 or "traceID" in first)


def _classify_json_line(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    if otlp_document(obj) is not None:
        return "otlp-json"
    if _is_jaeger(obj):
        return "jaeger-json"
    if obj.get("object") in ("trace", "trace.span"):
        return "agents-jsonl"
    if all(k in obj for k in ("trace_id", "span_id", "type", "workflow_name")):
        return "generic-jsonl"
    return None


def _looks_like_proto(head: bytes) -> bool:
    """An OTLP request starts with tag 0x0a (field 1, length-delimited); a framed stream
    with a 4-byte big-endian length, then that tag."""
    if head[:1] == b"\x0a":
        return True
    return len(head) >= 5 and head[0] == 0 and head[4] == 0x0A


def _hint(path: str) -> str:
    name = os.path.basename(path).lower()
    return name.removesuffix(".gz").removesuffix(".gzip")


def detect_format(path: str | os.PathLike[str]) -> str:
    """One of FORMATS, from the content (gzip-transparent), the file name breaking ties.

    `*.wtin.json` is always "wtin". JSON content is classified by its first
    recognisable line (up to 20 are tried, so one corrupt first line does not
    hide the format); binary content is OTLP protobuf when it starts like an
    OTLP request or the name ends in .pb/.binpb/.proto.
    """
    path = os.fspath(path)
    name = _hint(path)
    if name.endswith(WTIN_SUFFIX):
        return "wtin"
    proto_hint = name.endswith(_PROTO_SUFFIXES)
    fh = _open(path)
    try:
        head = fh.read(_SNIFF_BYTES).removeprefix(_BOM)
        if head.lstrip().startswith(b"{"):
            if _WTIN_KEY in head:
                return "wtin"
            fh.seek(0)
            tried = 0
            for _, raw in _lines(fh, MAX_RECORD_BYTES):
                if raw is None or not raw.strip():
                    continue
                try:
                    found = _classify_json_line(json.loads(raw))
                except ValueError:
                    found = None
                if found:
                    return found
                tried += 1
                if tried >= _SNIFF_LINES:
                    break
            fh.seek(0)  # not one JSON value per line: maybe one pretty-printed document (a backend's download)
            text = fh.read(MAX_RECORD_BYTES + 1)
            if len(text) <= MAX_RECORD_BYTES:
                try:
                    found = _classify_json_line(json.loads(text))
                except (ValueError, RecursionError):
                    found = None
                if found:
                    return found
    except (OSError, EOFError, zlib.error) as e:
        raise DumpReadError(f"cannot read {path}: {e}") from e
    finally:
        _close(fh)
    if proto_hint and (not head or not head.lstrip().startswith(b"{")):
        return "otlp-proto"
    if head and _looks_like_proto(head):
        return "otlp-proto"
    if not head:  # the usual cause is upstream: the listing of formats would only distract from it
        raise DumpFormatError(
            f"{path}: an empty file: no telemetry was written to it. Check that the producer exports to this "
            "file and is flushed before its process exits (force_flush / shutdown of the provider), and that "
            "its telemetry is switched on at all")
    raise DumpFormatError(
        f"{path}: cannot detect the dump format (no recognisable content). Supported: "
        "otlp-json (collector file exporter, one request per line: resourceSpans/resourceLogs; or one "
        "pretty-printed document, Tempo's {\"batches\": ...}, a {\"result\": ...} wrapper), "
        "jaeger-json (Jaeger UI / query API: {\"data\": [{\"spans\": ..., \"processes\": ...}]}), "
        "otlp-proto (.pb/.binpb: one ExportTraceServiceRequest, or 4-byte length-prefixed messages), "
        'agents-jsonl (OpenAI Agents SDK: "object": "trace" / "trace.span" per line), '
        "generic-jsonl (trace_id, span_id, type, workflow_name per line), "
        "wtin (*.wtin.json envelopes); any of them may be gzip-compressed. "
        "Pass the format explicitly if detection guesses wrong."
    )


# --------------------------------------------------------------------------- entry point


def read_dump(
    path: str | os.PathLike[str], fmt: str = "auto", *, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[Item]:
    """Records of a dump file, with a `LineError` in place of each bad line or message.

    Format detection and opening happen now (raising `DumpFormatError` /
    `DumpReadError`); decoding happens as the result is iterated. A read failure
    part-way (truncated gzip) raises `DumpReadError` during iteration.
    """
    path = os.fspath(path)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "wtin":
        raise ValueError(f"{path}: a wtin envelope is not a span dump; import it as an envelope")
    readers = {
        "otlp-json": lambda fh: _read_jsonl(path, fh, max_record_bytes, _OtlpJsonLines(path)),
        "agents-jsonl": lambda fh: _read_jsonl(path, fh, max_record_bytes, _AgentsLines(path)),
        "generic-jsonl": lambda fh: _read_jsonl(path, fh, max_record_bytes, _GenericLines(path)),
        "jaeger-json": lambda fh: _read_jsonl(path, fh, max_record_bytes, _JaegerLines(path)),
        "otlp-proto": lambda fh: _read_proto(path, fh, max_record_bytes),
    }
    if fmt not in readers:
        raise DumpFormatError(f"unknown dump format {fmt!r}; supported: auto, {', '.join(FORMATS)}")
    _close(_open(path))  # fail now, not at the first next(), when the file is unreadable
    return _guarded(path, readers[fmt])


def _guarded(path: str, reader: Any) -> Iterator[Any]:
    fh = _open(path)
    try:
        yield from reader(fh)
    except (OSError, EOFError, zlib.error) as e:
        raise DumpReadError(f"cannot read {path}: {e}") from e
    finally:
        _close(fh)


# --------------------------------------------------------------------------- JSON lines


def _read_jsonl(path: str, fh: IO[bytes], max_bytes: int, handler: Any) -> Iterator[Item]:
    """One JSON value per line; or, when the first line is not a JSON value by itself (`{` of a
    pretty-printed document, as a tracing UI downloads it), the whole file as one value (at most `max_bytes`)."""
    first = True
    for lineno, raw in _lines(fh, max_bytes):
        if raw is None:
            yield LineError(path, lineno, f"line longer than {max_bytes} bytes; skipped")
            continue
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            if first and raw.lstrip()[:1] in (b"{", b"["):
                yield from _read_document(path, lineno, raw, fh, max_bytes, handler)
                return
            yield LineError(path, lineno, f"invalid JSON: {e}")
            continue
        first = False
        yield from handler.line(lineno, obj)
    yield from handler.finish()


def _read_document(path: str, lineno: int, head: bytes, fh: IO[bytes], max_bytes: int,
                   handler: Any) -> Iterator[Item]:
    text = head + fh.read(max_bytes + 1 - len(head))
    if len(text) > max_bytes:
        yield LineError(path, lineno, f"a JSON document larger than {max_bytes} bytes; not read")
        return
    try:
        obj = json.loads(text)
    except RecursionError:
        yield LineError(path, lineno, "invalid JSON document: nested too deeply")
        return
    except ValueError as e:
        yield LineError(path, lineno, f"invalid JSON (neither one value per line nor one document): {e}")
        return
    yield from handler.line(lineno, obj)
    yield from handler.finish()


class _OtlpJsonLines:
    """Each line is one traces and/or logs request (the collector `file` exporter)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def line(self, lineno: int, obj: Any) -> list[Item]:
        request = otlp_document(obj)
        if request is None:
            what = "an object" if isinstance(obj, dict) else type(obj).__name__
            return [LineError(self.path, lineno, f"expected resourceSpans or resourceLogs (or Tempo's batches), "
                                                 f"got {what}")]
        obj = request
        try:  # list(): a line is all-or-nothing
            items: list[Item] = list(spans_from_json(obj))
            items.extend(logs_from_json(obj))
        except ValueError as e:
            return [LineError(self.path, lineno, str(e))]
        return items

    def finish(self) -> list[Item]:
        return []


# --------------------------------------------------------------------------- Jaeger JSON

_JAEGER_KINDS = {"client": "CLIENT", "server": "SERVER", "producer": "PRODUCER", "consumer": "CONSUMER",
                 "internal": "INTERNAL"}
# tags Jaeger derives from OTLP fields (its OTLP -> Jaeger translator); they go back into those fields
_JAEGER_FIELD_TAGS = ("span.kind", "otel.status_code", "otel.status_description", "otel.scope.name",
                      "otel.scope.version", "otel.library.name", "otel.library.version", "error")


def _jaeger_id(value: Any, width: int, where: str) -> str:
    if not isinstance(value, str) or not value or not re.fullmatch(r"[0-9a-fA-F]+", value) or len(value) > width:
        raise ValueError(f"{where}: not a hex id of at most {width} digits: {value!r}")
    return value.lower().rjust(width, "0")  # Jaeger drops leading zeros and keeps 64-bit trace ids


def _jaeger_tags(tags: Any, where: str) -> dict[str, Any]:
    """Jaeger's typed key/value list (`type`: string, bool, int64, float64, binary) to plain values."""
    if tags is None:
        return {}
    if not isinstance(tags, list):
        raise ValueError(f"{where}: must be a list of {{key, type, value}}")
    out: dict[str, Any] = {}
    for i, tag in enumerate(tags):
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
            raise ValueError(f"{where}[{i}]: must be an object with a string key")
        value, kind = tag.get("value"), str(tag.get("type") or "string").lower()
        if kind == "int64" and isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            value = int(value)
        elif kind == "float64" and isinstance(value, str) and re.fullmatch(r"-?[\d.]+(e-?\d+)?", value):
            value = float(value)
        elif kind == "bool" and isinstance(value, str):
            value = value.lower() == "true"
        out[tag["key"]] = value
    return out


class _JaegerLines:
    """A Jaeger JSON document (`{"data": [trace...]}`): each trace's spans, with their process as the resource."""

    def __init__(self, path: str) -> None:
        self.path = path

    def line(self, lineno: int, obj: Any) -> list[Item]:
        if not _is_jaeger(obj):
            return [LineError(self.path, lineno, 'expected Jaeger JSON: {"data": [{"traceID", "spans", '
                                                 '"processes"}]}')]
        items: list[Item] = []
        for t, trace in enumerate(obj["data"]):
            try:
                items.extend(self._trace(trace, f"data[{t}]"))
            except (ValueError, TypeError, AttributeError) as e:
                items.append(LineError(self.path, lineno, str(e)))
        return items

    def _trace(self, trace: Any, where: str) -> list[SpanRecord]:
        if not isinstance(trace, dict) or not isinstance(trace.get("spans"), list):
            raise ValueError(f"{where}: a trace needs a spans list")
        processes = trace.get("processes") or {}
        if not isinstance(processes, dict):
            raise ValueError(f"{where}.processes: must be an object")
        resources: dict[str, dict[str, Any]] = {}
        for pid, process in processes.items():
            if not isinstance(process, dict):
                raise ValueError(f"{where}.processes.{pid}: must be an object")
            resource = _jaeger_tags(process.get("tags"), f"{where}.processes.{pid}.tags")
            if isinstance(process.get("serviceName"), str):
                resource["service.name"] = process["serviceName"]
            resources[pid] = resource
        return [self._span(span, resources, f"{where}.spans[{i}]") for i, span in enumerate(trace["spans"])]

    def _span(self, span: Any, resources: dict[str, dict[str, Any]], where: str) -> SpanRecord:
        if not isinstance(span, dict):
            raise ValueError(f"{where}: must be an object")
        trace_id = _jaeger_id(span.get("traceID"), 32, f"{where}.traceID")
        parent = None
        for ref in span.get("references") or []:
            if isinstance(ref, dict) and ref.get("refType", "CHILD_OF") == "CHILD_OF" and ref.get("spanID"):
                parent = _jaeger_id(ref["spanID"], 16, f"{where}.references.spanID")
                break
        if parent is None and span.get("parentSpanID"):  # older Jaeger JSON
            parent = _jaeger_id(span["parentSpanID"], 16, f"{where}.parentSpanID")
        tags = _jaeger_tags(span.get("tags"), f"{where}.tags")
        start_us, duration_us = span.get("startTime", 0), span.get("duration", 0)
        if not isinstance(start_us, int) or not isinstance(duration_us, int):
            raise ValueError(f"{where}: startTime and duration must be integers (microseconds)")
        events = []
        for j, entry in enumerate(span.get("logs") or []):
            if not isinstance(entry, dict):
                raise ValueError(f"{where}.logs[{j}]: must be an object")
            fields = _jaeger_tags(entry.get("fields"), f"{where}.logs[{j}].fields")
            name = fields.pop("event", "") or ""
            events.append(Event(name=str(name), time_ns=int(entry.get("timestamp") or 0) * 1000, attributes=fields))
        status = str(tags.get("otel.status_code", "")).upper()
        if status not in ("OK", "ERROR"):
            status = STATUS_ERROR if tags.get("error") is True else "UNSET"
        return SpanRecord(
            trace_id=trace_id, span_id=_jaeger_id(span.get("spanID"), 16, f"{where}.spanID"),
            name=str(span.get("operationName") or ""), parent_span_id=parent,
            kind=_JAEGER_KINDS.get(str(tags.get("span.kind", "")).lower(), "INTERNAL"),
            start_ns=start_us * 1000, end_ns=(start_us + duration_us) * 1000,
            attributes={k: v for k, v in tags.items() if k not in _JAEGER_FIELD_TAGS},
            events=events, status_code=status, status_message=str(tags.get("otel.status_description") or ""),
            resource=dict(resources.get(str(span.get("processID")), {})),
            scope_name=str(tags.get("otel.scope.name") or tags.get("otel.library.name") or ""),
            scope_version=str(tags.get("otel.scope.version") or tags.get("otel.library.version") or ""),
        )

    def finish(self) -> list[Item]:
        return []


# --------------------------------------------------------------------------- Agents SDK / generic

_HEX32 = re.compile(r"[0-9a-fA-F]{32}")
_HEX16 = re.compile(r"[0-9a-fA-F]{16}")
_ISO = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d+))?\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?")


def sdk_trace_id(sdk_id: str) -> str:
    """An SDK trace id as 32 hex: `trace_<32 hex>` keeps its hex, others are hashed."""
    rest = sdk_id.removeprefix("trace_")
    if _HEX32.fullmatch(rest):
        return rest.lower()
    return hashlib.sha256(sdk_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def sdk_span_id(sdk_id: str, sdk_trace: str) -> str:
    """An SDK span id as 16 hex: `span_<16 hex>` keeps its hex, others are hashed
    with their trace id (generic ids like "s1" are only unique within a trace)."""
    rest = sdk_id.removeprefix("span_")
    if _HEX16.fullmatch(rest):
        return rest.lower()
    return hashlib.sha256(f"{sdk_trace}\x00{sdk_id}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def iso_to_ns(value: Any, field: str) -> int:
    """ISO 8601 -> Unix ns, keeping sub-microsecond digits; no offset means UTC; null -> 0."""
    if value is None:
        return 0
    m = _ISO.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"{field}: not an ISO 8601 timestamp: {value!r}")
    date, clock, frac, tz = m.groups()
    offset = "+00:00" if tz in (None, "Z", "z") else tz
    try:
        dt = datetime.fromisoformat(f"{date}T{clock}{offset}")
    except ValueError as e:
        raise ValueError(f"{field}: not an ISO 8601 timestamp: {value!r} ({e})") from None
    seconds = calendar.timegm(dt.utctimetuple())
    return seconds * 1_000_000_000 + int((frac or "0")[:9].ljust(9, "0"))


def _req_str(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}: must be a non-empty string, got {value!r}")
    return value


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key}: must be a string or null, got {value!r}")
    return value


def _obj_field(obj: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"{key}: must be a JSON object or null, got {type(value).__name__}")
    return value


def _span(obj: dict[str, Any], trace_raw: str, span_raw: str, name: str, attributes: dict[str, Any]) -> SpanRecord:
    """The SpanRecord for an Agents SDK or generic record (shared fields and error handling)."""
    parent = _opt_str(obj, "parent_id")
    error = _obj_field(obj, "error")
    if error is not None and not isinstance(error.get("message", ""), str):
        raise ValueError("error.message: must be a string")
    return SpanRecord(
        trace_id=sdk_trace_id(trace_raw),
        span_id=sdk_span_id(span_raw, trace_raw),
        name=name,
        parent_span_id=sdk_span_id(parent, trace_raw) if parent else None,
        start_ns=iso_to_ns(obj.get("started_at"), "started_at"),
        end_ns=iso_to_ns(obj.get("ended_at"), "ended_at"),
        attributes=attributes,
        status_code=STATUS_ERROR if error is not None else "UNSET",
        status_message=str(error.get("message") or "") if error is not None else "",
    )


_AGENTS_TRACE_KEYS = ("openai_agents.workflow_name", "openai_agents.group_id", "openai_agents.trace_metadata")


class _AgentsLines:
    """OpenAI Agents SDK export JSONL: `trace` records and their `trace.span` records.

    Trace-level fields are copied onto each span. A span that arrives before its
    trace record waits for it; spans whose trace never shows up are emitted at
    the end without trace-level fields.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.traces: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, list[SpanRecord]] = {}

    def line(self, lineno: int, obj: Any) -> list[Item]:
        try:
            if not isinstance(obj, dict):
                raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
            kind = obj.get("object")
            if kind == "trace":
                return self._trace(obj)
            if kind == "trace.span":
                return self._span(obj)
            raise ValueError(f'object: expected "trace" or "trace.span", got {kind!r}')
        except ValueError as e:
            return [LineError(self.path, lineno, str(e))]

    def _trace(self, obj: dict[str, Any]) -> list[Item]:
        trace_id = _req_str(obj, "id")
        info = {
            "openai_agents.workflow_name": obj.get("workflow_name"),
            "openai_agents.group_id": obj.get("group_id"),
            "openai_agents.trace_metadata": _obj_field(obj, "metadata"),
        }
        self.traces.setdefault(trace_id, info)
        waiting = self.pending.pop(trace_id, [])
        for span in waiting:
            span.attributes.update(self.traces[trace_id])
        return list(waiting)

    def _span(self, obj: dict[str, Any]) -> list[Item]:
        span_raw, trace_raw = _req_str(obj, "id"), _req_str(obj, "trace_id")
        data = obj.get("span_data")
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            raise ValueError('span_data: must be an object with a string "type"')
        attributes: dict[str, Any] = {
            "openai_agents.span_data": data,
            "openai_agents.trace_id": trace_raw,
            "openai_agents.span_id": span_raw,
            **dict.fromkeys(_AGENTS_TRACE_KEYS),  # filled in from the trace record
        }
        if obj.get("error") is not None:
            attributes["openai_agents.error"] = obj["error"]
        record = _span(obj, trace_raw, span_raw, data["type"], attributes)
        info = self.traces.get(trace_raw)
        if info is None:
            self.pending.setdefault(trace_raw, []).append(record)
            return []
        attributes.update(info)
        return [record]

    def finish(self) -> list[Item]:
        orphans: list[Item] = [span for spans in self.pending.values() for span in spans]
        self.pending.clear()
        return orphans


_GENERIC_TYPES = frozenset({"agent", "generation", "tool", "function", "guardrail", "handoff", "custom"})


class _GenericLines:
    """Generic JSONL (trace2test-core): one span per line, trace fields repeated on each.

    `workflow_name` and `group_id` must agree within a trace; `trace_metadata` is
    taken from the first record of the trace.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.traces: dict[str, dict[str, Any]] = {}  # trace_id -> first values + their line

    def line(self, lineno: int, obj: Any) -> list[Item]:
        try:
            return [self._record(lineno, obj)]
        except ValueError as e:
            return [LineError(self.path, lineno, str(e))]

    def _record(self, lineno: int, obj: Any) -> SpanRecord:
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        trace_raw, span_raw = _req_str(obj, "trace_id"), _req_str(obj, "span_id")
        workflow, kind = _req_str(obj, "workflow_name"), _req_str(obj, "type")
        group = _opt_str(obj, "group_id")
        if kind not in _GENERIC_TYPES:
            raise ValueError(f"type: {kind!r} is not one of {', '.join(sorted(_GENERIC_TYPES))}")
        if kind in ("guardrail", "custom"):
            _req_str(obj, "name")
        if kind == "guardrail" and not isinstance(obj.get("triggered"), bool):
            raise ValueError("triggered: a guardrail record needs a boolean triggered")
        _obj_field(obj, "metadata")
        metadata = _obj_field(obj, "trace_metadata")
        trace = self.traces.get(trace_raw)
        if trace is None:
            trace = self.traces[trace_raw] = {
                "workflow_name": workflow,
                "group_id": group,
                "trace_metadata": metadata,
                "line": lineno,
            }
        else:
            if workflow != trace["workflow_name"]:
                raise ValueError(
                    f"workflow_name: {workflow!r} differs from {trace['workflow_name']!r} on line "
                    f"{trace['line']} of trace {trace_raw!r}; a trace has one workflow_name"
                )
            if group is not None:
                if trace["group_id"] is None:
                    trace["group_id"] = group
                elif group != trace["group_id"]:
                    raise ValueError(
                        f"group_id: {group!r} differs from {trace['group_id']!r} given earlier "
                        f"in trace {trace_raw!r}; a trace has one group_id"
                    )
        attributes = {
            "generic.record": obj,
            "generic.workflow_name": workflow,
            "generic.group_id": trace["group_id"],
            "generic.trace_metadata": trace["trace_metadata"],
        }
        return _span(obj, trace_raw, span_raw, kind, attributes)

    def finish(self) -> list[Item]:
        return []


# --------------------------------------------------------------------------- OTLP protobuf


_NOT_OTLP = ("not an OTLP ExportTraceServiceRequest or ExportLogsServiceRequest "
             "(protobuf decoding failed or spans lack valid ids)")
_CONVERSATION_KEYS = frozenset(CONVERSATION_KEYS)


def _parse(request: _Request, data: bytes) -> _Request | None:
    """`request` filled from `data`, or None when the bytes are not that message."""
    try:
        request.ParseFromString(data)
    except DecodeError:
        return None
    return request


def _decode_message(data: bytes) -> list[SpanRecord] | list[LogRecord]:
    """One serialized OTLP request: traces if it looks like traces, else logs.

    Protobuf parsing is permissive (a logs request parses as a traces request,
    its records becoming id-less "spans", and vice versa), so the traces reading
    is kept only when it yields spans that all have 16/8-byte ids; otherwise the
    bytes are read as logs. An empty request yields nothing.
    """
    traces = _parse(ExportTraceServiceRequest(), data)
    if traces is not None:
        spans = list(spans_from_request(traces))
        if spans and all(len(s.trace_id) == 32 and len(s.span_id) == 16 for s in spans):
            return spans
    logs = _parse(ExportLogsServiceRequest(), data)
    if logs is not None:
        records = list(logs_from_request(logs))
        if records:
            return records
    if traces is not None and not traces.resource_spans:
        return []
    raise ValueError(_NOT_OTLP)


def scan_message(data: bytes) -> tuple[bool, int, list[tuple[str, str | None]]]:
    """What pass 1 of `wt-otel import` needs from one serialized OTLP request, without building records:
    (logs?, how many records `_decode_message` would return, (trace id, conversation id) of each record
    that has a trace id). Traces or logs are told apart by `_decode_message`'s rules, and a message it
    refuses raises its ValueError."""
    traces = _parse(ExportTraceServiceRequest(), data)
    if traces is not None:
        found = _native_scan_spans(traces, data)
        if found is None:
            found = _scan_spans(traces)
        if found:
            return False, len(found), found
    logs = _parse(ExportLogsServiceRequest(), data)
    if logs is not None:
        count, found = 0, []
        for rl in logs.resource_logs:
            for sl in rl.scope_logs:
                for rec in sl.log_records:
                    count += 1
                    if rec.trace_id:
                        found.append((rec.trace_id.hex(), _conversation(rec.attributes)))
        if count:
            return True, count, found
    if traces is not None and not traces.resource_spans:
        return False, 0, []
    raise ValueError(_NOT_OTLP)


def _scan_spans(req: ExportTraceServiceRequest) -> list[tuple[str, str | None]]:
    """(trace id, conversation id) per span; empty unless every span has 16/8-byte ids (as `_decode_message`)."""
    found = []
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                trace_id = span.trace_id
                if len(trace_id) != 16 or len(span.span_id) != 8:
                    return []
                found.append((trace_id.hex(), _conversation(span.attributes)))
    return found


_native_scan: Any = None  # spanindex.scan_native once looked up; False: not to be used


def _native_scan_spans(req: ExportTraceServiceRequest, data: bytes) -> list[tuple[str, str | None]] | None:
    """`_scan_spans` from the native span index (`spanindex`, the C scanner serve uses): the same trace ids and
    conversation ids (`SpanEntry.conversation` is `conversation_id` of the span's attributes) without a Python
    loop over every span and its attributes, ~3x less of pass 1's time. Only for bytes upb already parsed as
    traces; None (use `_scan_spans`) when the scanner is not built or not chosen (WT_OTEL_SPANINDEX), refuses
    the bytes, or counts other spans than upb did."""
    global _native_scan
    if _native_scan is None:
        from wt_otel.ingest import spanindex

        try:
            use = spanindex.implementation() == "native"
        except spanindex.SpanIndexUnavailable:
            use = False
        _native_scan = spanindex.scan_native if use else False
    if _native_scan is False:
        return None
    try:
        entries = _native_scan(data)
    except ValueError:  # SpanIndexError: the decoder's reading decides
        return None
    if len(entries) != sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans):
        return None
    found = []
    for e in entries:
        if len(e.trace_id) != 32 or len(e.span_id) != 16:
            return []
        found.append((e.trace_id, e.conversation))
    return found


def _conversation(attributes: Any) -> str | None:
    """`conversation_id` of the attributes, converting only the values of the keys it reads."""
    keys = _CONVERSATION_KEYS
    hits = [kv for kv in attributes if kv.key in keys]
    return conversation_id(pb_attrs(hits)) if hits else None


def read_proto_frames(path: str | os.PathLike[str], *, max_record_bytes: int = MAX_RECORD_BYTES
                      ) -> Iterator[tuple[int, int, bytes] | LineError] | None:
    """`proto_frames` of an uncompressed protobuf dump, read errors raised as `read_dump` raises them;
    None for a gzip file (its offsets cannot be read back)."""
    path = os.fspath(path)
    fh = _open(path)
    gz = isinstance(fh, gzip.GzipFile)
    _close(fh)
    if gz:
        return None
    return cast(Iterator[tuple[int, int, bytes] | LineError],
                _guarded(path, lambda f: proto_frames(path, f, max_record_bytes)))


def read_frame(path: str, offset: int, length: int) -> bytes:
    """The bytes of one message `proto_frames` found (pass 2 of an import reads them again)."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(length)
    if len(data) != length:
        raise DumpReadError(f"{path}: changed during the import (the message at byte {offset} is gone)")
    return data


def _is_framed(fh: IO[bytes], max_bytes: int) -> bool:
    """Collector `format: proto` stream (4-byte length prefixes) or one bare message?

    A bare OTLP request is empty or starts with byte 0x0a (field 1,
    length-delimited); read as a length prefix, 0x0a... would mean >= 160 MiB,
    beyond any sane `max_record_bytes`. So a file is framed when its first byte
    is not 0x0a and its first frame fits in the file (and under the cap). Checking
    that every frame tiles the file would add nothing: a file that is not a bare
    request either way is better read frame by frame, so a truncated stream (a
    collector killed mid-write) keeps its complete messages and reports the
    broken one. Gzip streams cannot be sized without decompressing; there only
    the first prefix is checked.
    """
    header = fh.read(4)
    fh.seek(0)  # for gzip: cheap, rewinds the decompressor at the very start
    if len(header) < 4 or header[0] == 0x0A:
        return False
    n = int.from_bytes(header, "big")
    if n > max_bytes:
        return False
    if isinstance(fh, gzip.GzipFile):
        return True
    size = os.fstat(fh.fileno()).st_size
    framed = 4 + n <= size
    fh.seek(0)
    return framed


def _read_proto(path: str, fh: IO[bytes], max_bytes: int) -> Iterator[Item]:
    for frame in proto_frames(path, fh, max_bytes):
        if isinstance(frame, LineError):
            yield frame
        else:
            yield from _decoded(path, frame[0], frame[2])


def proto_frames(path: str, fh: IO[bytes], max_bytes: int = MAX_RECORD_BYTES
                 ) -> Iterator[tuple[int, int, bytes] | LineError]:
    """(1-based message index, offset of its bytes in the stream, bytes) per OTLP message of a protobuf
    dump (one bare message, or the collector's length-prefixed stream), a `LineError` for a broken one.

    `wt-otel import` keeps only the offsets of uncompressed files and reads the bytes again later."""
    if not _is_framed(fh, max_bytes):
        data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            yield LineError(path, 1, f"protobuf message larger than {max_bytes} bytes; skipped")
            return
        yield 1, 0, data
        return
    index = offset = 0
    while True:
        header = fh.read(4)
        if not header:
            return
        index += 1
        if len(header) < 4:
            yield LineError(path, index, "truncated length prefix at end of stream")
            return
        n = int.from_bytes(header, "big")
        offset += 4
        if n > max_bytes:
            yield LineError(path, index, f"protobuf message of {n} bytes exceeds {max_bytes}; skipped")
            if not _skip(fh, n):
                return
            offset += n
            continue
        data = fh.read(n)
        if len(data) < n:
            yield LineError(path, index, f"truncated message: length prefix says {n} bytes, {len(data)} left")
            return
        yield index, offset, data
        offset += n


def _decoded(path: str, index: int, data: bytes) -> list[Item]:
    try:
        return list(_decode_message(data))
    except ValueError as e:
        return [LineError(path, index, str(e))]


def _skip(fh: IO[bytes], n: int) -> bool:
    """Read past n bytes in chunks; False if the stream ends first."""
    while n > 0:
        chunk = fh.read(min(n, _SKIP_CHUNK))
        if not chunk:
            return False
        n -= len(chunk)
    return True
