"""What both OTLP transports share, so gRPC and HTTP answer a given request the same way.

`export()` is the one path from a request body to the pipeline: decode
(protobuf or OTLP/JSON), reject records the pipeline could not key on (bad
trace/span ids -> partial success, as the OTLP spec asks), offer the rest to
the bounded `Pipeline`, count everything. The transports only translate its
`Outcome` into status codes. When the GenAI filter heads the pipeline, a
protobuf traces request is screened by the span index before it is decoded
(`screened`): spans the filter would drop are never converted.

Also here: bounded decompression of gzip, deflate (zlib) and zstd bodies (the
decompressed size is checked while inflating, so a bomb never allocates more
than the cap), bearer-token
checks (constant time), and the hand-written wire encoding of
`google.rpc.Status`/`RetryInfo` -- those messages live in
googleapis-common-protos, which is not in our dependency set, and each is one
or two fields.

Metrics are accepted and dropped (`drop_metrics`): an app pointed at serve with
`OTEL_EXPORTER_OTLP_ENDPOINT` exports metrics too, and a 404/UNIMPLEMENTED
would have it log export failures forever. They are parsed (a malformed body
is still a 400) and counted in `wt_otel_metric_points_dropped_total`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hmac
import json
import logging
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import zstandard
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from wt_otel._util import safejson
from wt_otel._util.fsutil import write_directory
from wt_otel._util.tuning import memory_return
from wt_otel.ingest import spanindex
from wt_otel.ingest.otlp import (
    OtlpJsonError,
    logs_from_json,
    logs_from_request,
    may_hold_lone_surrogates,
    spans_from_json,
    spans_from_request,
)
from wt_otel.ingest.otlp_encode import logs_request, traces_request
from wt_otel.ingest.spanindex import SpanEntry, SpanIndexError
from wt_otel.ingest.wirecheck import WireCheck
from wt_otel.model.spans import LogRecord, Record, SpanRecord, SpanRefs, count
from wt_otel.serve.budget import DECODED_PER_WIRE_BYTE
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline, PipelineAdmission
from wt_otel.serve.segments import SegmentFull, SegmentLog, SegmentUnavailable

log = logging.getLogger("wt_otel.serve.receivers")

# Told to clients in Retry-After / RetryInfo when the queue is full or we are shutting down.
RETRY_AFTER_SECONDS = 1
RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo"

_ZERO_TRACE_ID = "0" * 32
_ZERO_SPAN_ID = "0" * 16


class Signal(enum.Enum):
    TRACES = "traces"
    LOGS = "logs"
    METRICS = "metrics"  # accepted and dropped


class Encoding(enum.Enum):
    PROTOBUF = "protobuf"
    JSON = "json"


class Outcome(enum.Enum):
    OK = "ok"  # accepted (possibly with some records rejected: see ExportResult.rejected)
    MALFORMED = "malformed"  # HTTP 400 / INVALID_ARGUMENT
    FULL = "full"  # HTTP 429 / RESOURCE_EXHAUSTED, retry later
    CLOSED = "closed"  # HTTP 503 / UNAVAILABLE, shutting down
    TOO_LARGE = "too_large"  # HTTP 413 / RESOURCE_EXHAUSTED without retry info: split the batch
    UNAVAILABLE = "unavailable"  # HTTP 503 / UNAVAILABLE + retry info: the data dir cannot be written
    ERROR = "error"  # a bug on our side: HTTP 500 / INTERNAL


class MalformedRequest(ValueError):
    """The body cannot be read as an OTLP request; `str()` says what is wrong."""


class TooLarge(ValueError):
    """A body (or its decompressed form) exceeds a configured limit."""


# --------------------------------------------------------------------------- decoding


@dataclass(slots=True)
class Decoded:
    """A request's records that passed validation, and what was rejected and why."""

    records: list[Record]
    received: int
    rejected: int
    error_message: str
    dropped: int = 0  # spans the GenAI filter dropped at receive time, never converted (`screened`)
    # records set aside (counted in `rejected`): (the record as received or as decoded, where, why)
    quarantined: list[tuple[object, str, str]] = field(default_factory=list)


def decode(signal: Signal, body: bytes | Message, encoding: Encoding) -> Decoded:
    """Parse and validate one export request; raises `MalformedRequest`.

    `body` may already be a parsed request message (when a servicer is
    registered with grpc's generated deserializer).
    """
    quarantined: list[tuple[object, str, str]] = []
    if signal is Signal.TRACES:
        spans = _parse_spans(body, encoding, quarantined)
        return _validated(spans, _span_problem, "spans", quarantined)
    logs = _parse_logs(body, encoding, quarantined)
    return _validated(logs, _log_problem, "log records", quarantined)


def _parse_spans(body: bytes | Message, encoding: Encoding,
                 quarantined: list[tuple[object, str, str]]) -> list[SpanRecord]:
    if encoding is Encoding.JSON:
        return _from_json(body, spans_from_json, quarantined)
    request = body if isinstance(body, Message) else _parse_pb(ExportTraceServiceRequest, body)
    return list(spans_from_request(request))


def _parse_logs(body: bytes | Message, encoding: Encoding,
                quarantined: list[tuple[object, str, str]]) -> list[LogRecord]:
    if encoding is Encoding.JSON:
        return _from_json(body, logs_from_json, quarantined)
    request = body if isinstance(body, Message) else _parse_pb(ExportLogsServiceRequest, body)
    return list(logs_from_request(request))


def _parse_pb(cls: type[Message], body: bytes) -> Message:
    try:
        return cls.FromString(body)
    except DecodeError as e:
        raise MalformedRequest(f"body is not a valid {cls.__name__} protobuf ({e}); "
                               f"{len(body)} bytes received — truncated, or not OTLP protobuf?") from None


def _from_json(body: bytes | Message, decoder, quarantined: list[tuple[object, str, str]]) -> list:
    """Records of an OTLP/JSON body; lone surrogates kept escaped, a record that fails for an unforeseen
    reason appended to `quarantined` (never the request's failure)."""
    if isinstance(body, Message):
        raise TypeError("OTLP/JSON bodies are bytes")
    try:
        obj = json.loads(body)
    except RecursionError:
        raise MalformedRequest("invalid JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise MalformedRequest(f"invalid JSON: {e}") from None
    try:
        return list(decoder(obj, escape=may_hold_lone_surrogates(body),
                            quarantine=lambda raw, where, why: quarantined.append((raw, where, why))))
    except OtlpJsonError as e:
        raise MalformedRequest(f"not an OTLP/JSON request: {e}") from None
    except RecursionError:
        raise MalformedRequest("OTLP/JSON AnyValue nested too deeply") from None


class ReceiveScreen(Protocol):
    """The GenAI filter's receive-time half (processors/genai_filter.py), when it heads the pipeline."""

    def keep_traces(self, traces: dict[str, bool]) -> set[str] | None: ...

    def note_decoded(self, records: Sequence[Record]) -> None: ...


def screen_of(pipeline: object) -> ReceiveScreen | None:
    """The pipeline's head stage when it can screen requests before they are decoded (the GenAI filter);
    None when it cannot, or WT_OTEL_SPANINDEX=off."""
    if spanindex.implementation() == "off":
        return None
    head = getattr(pipeline, "consumer", None)
    if callable(getattr(head, "keep_traces", None)) and callable(getattr(head, "note_decoded", None)):
        return head
    return None


def screened(signal: Signal, body: bytes | Message, encoding: Encoding, screen: ReceiveScreen | None) -> Decoded:
    """`decode()`, with the GenAI filter in front where it can save work.

    A protobuf traces request is walked by the span index (`wt_otel.ingest.spanindex`) first: with no
    span the filter would keep it is acknowledged unparsed, otherwise only the kept spans are converted
    (`Decoded.dropped` counts the rest). What the index refuses or cannot settle (malformed bytes,
    invalid ids) and every other request is decoded as usual, and the filter notes its GenAI traces."""
    if screen is None:
        return decode(signal, body, encoding)
    if signal is Signal.TRACES and encoding is Encoding.PROTOBUF and not isinstance(body, Message):
        lean = _lean_spans(body, screen)
        if lean is not None:
            return lean
    decoded = decode(signal, body, encoding)
    screen.note_decoded(decoded.records)
    return decoded


def _lean_spans(body: bytes, screen: ReceiveScreen) -> Decoded | None:
    try:
        entries = spanindex.scan(body)
    except SpanIndexError:
        return None  # decode() says what is wrong, as before
    if any(_entry_problem(e) for e in entries):
        return None  # decode() rejects those spans, with its messages
    traces: dict[str, bool] = {}
    for e in entries:  # feedback that names a conversation is GenAI too (`genai_filter.is_genai`)
        traces[e.trace_id] = traces.get(e.trace_id, False) or e.genai or (e.conversation is not None and bool(e.marks))
    keep_traces = screen.keep_traces(traces)
    if keep_traces is None:
        return None
    keep = [e.trace_id in keep_traces for e in entries]
    kept = sum(keep)
    if not kept:
        return Decoded([], len(entries), 0, "", dropped=len(entries))
    request = _parse_pb(ExportTraceServiceRequest, body)
    if kept == len(entries):
        return Decoded(list(spans_from_request(request)), len(entries), 0, "")
    if sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans) != len(entries):
        log.error("span index and protobuf disagree on a request's span count (a bug): decoding it all")
        return None
    return Decoded(list(spans_from_request(request, keep)), len(entries), 0, "", dropped=len(entries) - kept)


def _entry_problem(e: SpanEntry) -> bool:
    """`_span_problem` on an index entry (the ids are the same hex strings)."""
    return not spanindex.valid_ids(e)


def _id_problem(what: str, hex_id: str, nbytes: int) -> str | None:
    if len(hex_id) != 2 * nbytes:
        return f"{what} is {len(hex_id) // 2} bytes, must be {nbytes}"
    return None


def _span_problem(span: SpanRecord) -> str | None:
    """Why a span cannot be accepted (the session assembler keys on its ids), or None."""
    problem = _id_problem("trace_id", span.trace_id, 16) or _id_problem("span_id", span.span_id, 8)
    if problem is None and span.trace_id == _ZERO_TRACE_ID:
        problem = "trace_id is all zeros (invalid per the W3C trace context)"
    if problem is None and span.span_id == _ZERO_SPAN_ID:
        problem = "span_id is all zeros (invalid per the W3C trace context)"
    if problem is None and span.parent_span_id is not None:
        problem = _id_problem("parent_span_id", span.parent_span_id, 8)
    return problem


def _log_problem(log: LogRecord) -> str | None:
    """Log ids are optional; present ones must have the right length. All-zero ids mean
    "no trace context" (SDKs send them for logs outside a span), so they become None
    rather than grouping unrelated logs under trace 000…0."""
    if log.trace_id == _ZERO_TRACE_ID:
        log.trace_id = None
    if log.span_id == _ZERO_SPAN_ID:
        log.span_id = None
    if log.trace_id is not None and (problem := _id_problem("trace_id", log.trace_id, 16)):
        return problem
    if log.span_id is not None and (problem := _id_problem("span_id", log.span_id, 8)):
        return problem
    return None


def _validated(records: Sequence[Record], problem_of, noun: str,
               quarantined: list[tuple[object, str, str]] | None = None) -> Decoded:
    kept: list[Record] = []
    first = f"{quarantined[0][1]}: set aside ({quarantined[0][2]})" if quarantined else ""
    for record in records:
        problem = problem_of(record)
        if problem is None:
            kept.append(record)
        elif not first:
            name = getattr(record, "name", None) or getattr(record, "event_name", "")
            first = f"{_short(name)}: {problem}" if name else problem
    aside = len(quarantined or ())
    rejected = len(records) - len(kept) + aside
    message = f"rejected {rejected} of {len(records) + aside} {noun}; first: {first}" if rejected else ""
    return Decoded(kept, len(records) + aside, rejected, message, quarantined=list(quarantined or ()))


def _short(name: str, limit: int = 80) -> str:
    return repr(name if len(name) <= limit else name[:limit] + "…")


# --------------------------------------------------------------------------- export


@dataclass(slots=True)
class ExportResult:
    outcome: Outcome
    message: str = ""  # what went wrong (not OK), or the partial-success message
    rejected: int = 0  # records of an OK request that were rejected

    def response(self, signal: Signal) -> ExportTraceServiceResponse | ExportLogsServiceResponse | \
            ExportMetricsServiceResponse:
        """The OTLP success response; `partial_success` only when something was rejected."""
        if signal is Signal.METRICS:
            return ExportMetricsServiceResponse()
        if signal is Signal.TRACES:
            if not self.rejected:
                return ExportTraceServiceResponse()
            return ExportTraceServiceResponse(partial_success=ExportTracePartialSuccess(
                rejected_spans=self.rejected, error_message=self.message))
        if not self.rejected:
            return ExportLogsServiceResponse()
        return ExportLogsServiceResponse(partial_success=ExportLogsPartialSuccess(
            rejected_log_records=self.rejected, error_message=self.message))


def export(signal: Signal, body: bytes | Message, encoding: Encoding, pipeline: Pipeline,
           metrics: Metrics, client: str | None = None) -> ExportResult:
    """Decode, validate, offer to the pipeline, count. Never blocks on the pipeline.

    `client` (the peer's address) keys the per-client session quota (`wt_otel.serve.budget`)."""
    if isinstance(body, bytes):
        memory_return.note(len(body))  # serve's tick gives freed heap pages back after large requests
    if signal is Signal.METRICS:
        return drop_metrics(body, encoding, metrics)
    if (refused := precheck(body, encoding, pipeline, metrics, client)) is not None:
        return refused
    screen = screen_of(pipeline)
    if signal is Signal.TRACES and encoding is Encoding.PROTOBUF and isinstance(body, bytes) and \
            (by_ref := _export_by_reference(body, pipeline, screen, metrics, client)) is not None:
        return by_ref
    try:
        decoded = screened(signal, body, encoding, screen)
    except MalformedRequest as e:
        return ExportResult(Outcome.MALFORMED, str(e))
    received = "wt_otel_spans_received_total" if signal is Signal.TRACES else "wt_otel_log_records_received_total"
    metrics.inc(received, decoded.received)
    _set_aside(signal, decoded.quarantined, pipeline, metrics)
    if decoded.dropped:
        metrics.inc("wt_otel_records_dropped_total", decoded.dropped, reason="not_genai")
    if decoded.rejected:
        metrics.inc("wt_otel_records_rejected_total", decoded.rejected, reason="invalid_id")
    if not decoded.records:
        return ExportResult(Outcome.OK, decoded.error_message, decoded.rejected)
    segments = getattr(pipeline, "segments", None)
    if segments is not None:  # durable ingest: acknowledged only once in the segment log
        return _durable_export(signal, body, encoding, decoded, pipeline, segments, metrics, client)
    admit = getattr(pipeline, "admit", None)  # a bare `offer(records)` sink (the demo's) still works
    admission, reason = admit(decoded.records, client) if admit else (pipeline.offer(decoded.records), "")
    n = len(decoded.records)
    if admission is PipelineAdmission.ACCEPTED:
        metrics.inc("wt_otel_records_accepted_total", n)
        return ExportResult(Outcome.OK, decoded.error_message, decoded.rejected)
    return _counted_refusal(admission, reason, n, metrics)


# Why records were refused, by admission verdict (the `reason` label of wt_otel_records_rejected_total).
_REJECTED_REASON = {PipelineAdmission.FULL: "queue_full", PipelineAdmission.TOO_LARGE: "batch_too_large",
                    PipelineAdmission.UNAVAILABLE: "store_unavailable", PipelineAdmission.CLOSED: "shutting_down"}


def _refused(admission: PipelineAdmission, reason: str, what: str) -> ExportResult:
    """The answer to a refused request, `what` saying how much was refused."""
    if admission is PipelineAdmission.FULL:
        return ExportResult(Outcome.FULL, f"{reason or 'the pipeline queue is full'} ({what}); "
                                          f"retry after {RETRY_AFTER_SECONDS}s")
    if admission is PipelineAdmission.TOO_LARGE:
        return ExportResult(Outcome.TOO_LARGE, f"{reason} ({what})")
    if admission is PipelineAdmission.UNAVAILABLE:
        return ExportResult(Outcome.UNAVAILABLE, f"wt-otel cannot write its data dir ({reason}); nothing was "
                                                 f"accepted, retry after {RETRY_AFTER_SECONDS}s")
    return ExportResult(Outcome.CLOSED, "wt-otel is shutting down; retry against a running instance")


def precheck(body: bytes | Message, encoding: Encoding, pipeline: Pipeline, metrics: Metrics,
             client: str | None = None) -> ExportResult | None:
    """Refuse a request before decoding it when the pipeline could not take it anyway (the writer is
    behind, the memory budget is spent, the store cannot write, shutting down); None: go on and decode.

    Decoding is the receivers' main cost and holds the GIL; refusing after it, at overload, starved
    the writer. Counted in `wt_otel_requests_shed_total` (the records are not known yet)."""
    check = getattr(pipeline, "precheck", None)
    if check is None:
        return None
    size = body.ByteSize() if isinstance(body, Message) else len(body)
    admission, reason = check(int(size * DECODED_PER_WIRE_BYTE[encoding.value]), client)
    if admission is PipelineAdmission.ACCEPTED:
        return None
    metrics.inc("wt_otel_requests_shed_total", reason=_REJECTED_REASON[admission])
    return _refused(admission, reason, "refused before decoding")


def _durable_export(signal: Signal, body: bytes | Message, encoding: Encoding, decoded: Decoded, pipeline: Pipeline,
                    segments: SegmentLog, metrics: Metrics, client: str | None) -> ExportResult:
    """`export` with a segment log: admission check, append, wait for the group commit, then queue.

    Refused before the append (budget) or when the append or fsync fails: nothing is acknowledged. Once
    the bytes are fsynced the request is acknowledged even if serve is stopping: it is replayed next start."""
    records, n = decoded.records, len(decoded.records)
    admission, reason = pipeline.check(records, client)
    if admission is not PipelineAdmission.ACCEPTED:
        return _counted_refusal(admission, reason, n, metrics)
    if encoding is Encoding.PROTOBUF and not decoded.rejected and not decoded.dropped:
        data = body if isinstance(body, bytes) else body.SerializeToString()
    else:  # OTLP/JSON, rejected or screened-out records: store what was kept, as protobuf (one format in the log)
        data, kept, aside = _encoded(signal, records)
        if aside:  # a record protobuf refuses is set aside; the rest of the request is written
            _set_aside(signal, aside, pipeline, metrics)
            first = decoded.error_message or f"first: {aside[0][1]}: set aside ({aside[0][2]})"
            decoded = dataclasses.replace(decoded, records=kept, rejected=decoded.rejected + len(aside),
                                          error_message=f"rejected {decoded.rejected + len(aside)} of "
                                                        f"{decoded.received} records; {first}")
            records = kept
            if not kept:
                return ExportResult(Outcome.OK, decoded.error_message, decoded.rejected)
    return _append_and_queue(signal, data, records, pipeline, segments, metrics, decoded)


def _encoded(signal: Signal, records: Sequence[Record]) -> tuple[bytes, list[Record], list[tuple[object, str, str]]]:
    """(the protobuf of the records that encode, those records, the others with why): one record the
    encoder refuses (a bug, or a value no check foresaw) costs that record, never the request."""
    encode = traces_request if signal is Signal.TRACES else logs_request
    try:
        return encode(records).SerializeToString(), list(records), []  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - found record by record below
        pass
    kept: list[Record] = []
    aside: list[tuple[object, str, str]] = []
    for record in records:
        try:
            encode([record]).SerializeToString()  # type: ignore[list-item]
        except Exception as e:  # noqa: BLE001 - that record is set aside, with the reason
            what = f"{'span' if isinstance(record, SpanRecord) else 'log record of span'} {record.span_id}"
            aside.append((record, what, f"cannot encode it for the segment log: {type(e).__name__}: {e}"))
        else:
            kept.append(record)
    return (encode(kept).SerializeToString() if kept else b""), kept, aside  # type: ignore[arg-type]


def _set_aside(signal: Signal, items: Sequence[tuple[object, str, str]], pipeline: Pipeline,
               metrics: Metrics) -> None:
    """Keep records no stage could take in `<data-dir>/quarantine/<signal>-records-<ns>/` (reason.txt,
    records.ndjson), log and count them (`wt_otel_records_rejected_total{reason="quarantined"}`); never raises."""
    if not items:
        return
    metrics.inc("wt_otel_records_rejected_total", len(items), reason="quarantined")
    segments = getattr(pipeline, "segments", None)
    kept_in = "(no data dir to keep them in)"
    if segments is not None:
        dest = Path(segments.dir).parent / "quarantine" / f"{signal.value}-records-{time.time_ns()}"
        try:
            reasons = "".join(f"{where}: {why}\n" for _, where, why in items)
            lines = b"".join(safejson.dumps(dataclasses.asdict(r) if dataclasses.is_dataclass(r) and
                                            not isinstance(r, type) else r, indent=False) + b"\n"
                             for r, _, _ in items)
            write_directory(dest, {"reason.txt": reasons.encode("utf-8", "backslashreplace"),
                                   "records.ndjson": lines}, durable=True)
            kept_in = f"in {dest}"
        except Exception as e:  # noqa: BLE001 - setting aside is the last resort: it must not raise
            kept_in = f"(cannot write {dest}: {e})"
    log.error("%d %s record(s) set aside %s; the rest of the request was taken. First: %s: %s", len(items),
              signal.value, kept_in, items[0][1], items[0][2])


def _export_by_reference(body: bytes, pipeline: Pipeline, screen: ReceiveScreen | None, metrics: Metrics,
                         client: str | None) -> ExportResult | None:
    """A protobuf traces request kept by reference: the span index's entries of the spans the GenAI filter
    keeps become `SpanRefs`, the request's bytes go to the segment log as received, and nothing is decoded.
    None: serve does not keep spans by reference, or the index cannot settle this request (malformed,
    invalid ids): the caller decodes it as usual."""
    segments = getattr(pipeline, "segments", None)
    if segments is None or screen is None or not getattr(pipeline, "by_reference", False):
        return None
    indexed = index_refs(body, screen)
    if indexed is None:
        return None
    # what the index does not read must decode too (UTF-8 in skipped strings...): acknowledged = renderable.
    # The native check runs without the GIL; a problem (or a case it leaves to upb) goes to decode(), which
    # says what is wrong, as before
    if _traces_check().problem(body) is not None:
        return None
    refs, received = indexed
    kept = count(refs)
    metrics.inc("wt_otel_spans_received_total", received)
    if kept < received:
        metrics.inc("wt_otel_records_dropped_total", received - kept, reason="not_genai")
    if not refs:
        return ExportResult(Outcome.OK)
    admission, reason = pipeline.check(refs, client)
    if admission is not PipelineAdmission.ACCEPTED:
        return _counted_refusal(admission, reason, kept, metrics)
    # the request as received (ordinals count its every span), not only the kept spans
    return _append_and_queue(Signal.TRACES, body, refs, pipeline, segments, metrics, Decoded([], received, 0, ""))


@functools.cache
def _traces_check() -> WireCheck:
    return WireCheck(ExportTraceServiceRequest)


def index_refs(body: bytes, screen: ReceiveScreen, pos: int = -1) -> tuple[list[SpanRefs], int] | None:
    """(the spans the GenAI filter keeps as `SpanRefs` at segment position `pos`, one per trace and conversation
    id in order of first appearance; spans in the request) from the span index, without decoding; None when
    the index cannot settle the request (malformed, invalid ids)."""
    try:
        received, grouped = spanindex.scan_runs(body)
    except SpanIndexError:
        return None
    if grouped is None:
        return None  # an invalid id: decode() rejects that span, with its message
    genai: dict[str, bool] = {}  # trace id -> a GenAI span seen (the filter keeps or drops whole traces)
    for run in grouped:  # feedback that names a conversation is GenAI too (`genai_filter.is_genai`)
        genai[run[0]] = genai.get(run[0], False) or run[5] or (run[1] is not None and bool(run[4]))
    keep = screen.keep_traces(genai)
    kept = [SpanRefs(trace_id, conv, pos, ordinals, roots, marks)
            for trace_id, conv, ordinals, roots, marks, _ in grouped if keep is None or trace_id in keep]
    return kept, received


def _append_and_queue(signal: Signal, data: bytes, records: Sequence[Record | SpanRefs], pipeline: Pipeline,
                      segments: SegmentLog, metrics: Metrics, decoded: Decoded) -> ExportResult:
    """Append to the segment log, wait for the group commit, queue the records: then acknowledge."""
    n = count(records)
    try:
        ticket = segments.append(signal.value, data)
    except SegmentFull as e:
        return _counted_refusal(PipelineAdmission.FULL, str(e), n, metrics, "segment_log_full")
    except SegmentUnavailable as e:
        return _counted_refusal(PipelineAdmission.UNAVAILABLE, str(e), n, metrics)
    try:
        segments.wait(ticket)
    except SegmentUnavailable as e:
        segments.release(ticket.pos)
        return _counted_refusal(PipelineAdmission.UNAVAILABLE, str(e), n, metrics)
    for record in records:
        record.segment_pos = ticket.pos
    if not pipeline.put(records, ticket.pos):  # stopping: it stays pinned, past the last checkpoint
        metrics.inc("wt_otel_records_deferred_to_restart_total", n)
    metrics.inc("wt_otel_records_accepted_total", n)
    return ExportResult(Outcome.OK, decoded.error_message, decoded.rejected)


def _counted_refusal(admission: PipelineAdmission, reason: str, n: int, metrics: Metrics,
                     label: str | None = None) -> ExportResult:
    """`_refused` for `n` decoded records, counted in wt_otel_records_rejected_total by reason."""
    metrics.inc("wt_otel_records_rejected_total", n, reason=label or _REJECTED_REASON[admission])
    return _refused(admission, reason, f"{n} records refused")


_POINT_FIELDS = {"gauge": "data_points", "sum": "data_points", "histogram": "data_points",
                 "exponential_histogram": "data_points", "summary": "data_points"}
_JSON_KINDS = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")


def drop_metrics(body: bytes | Message, encoding: Encoding, metrics: Metrics) -> ExportResult:
    """Parse an OTLP metrics request, count its data points, and drop them (wt-otel keeps traces and logs)."""
    points = 0
    if encoding is Encoding.JSON:
        if isinstance(body, Message):
            raise TypeError("OTLP/JSON bodies are bytes")
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as e:
            return ExportResult(Outcome.MALFORMED, f"invalid JSON: {e}")
        if not isinstance(obj, dict):
            return ExportResult(Outcome.MALFORMED, "not an OTLP/JSON metrics request: not a JSON object")
        for rm in _dicts(obj.get("resourceMetrics")):
            for sm in _dicts(rm.get("scopeMetrics")):
                for metric in _dicts(sm.get("metrics")):
                    for kind in _JSON_KINDS:
                        if isinstance(metric.get(kind), dict):
                            points += len(_dicts(metric[kind].get("dataPoints")))
    else:
        try:
            request = body if isinstance(body, Message) else ExportMetricsServiceRequest.FromString(body)
        except DecodeError as e:
            return ExportResult(Outcome.MALFORMED, f"body is not a valid ExportMetricsServiceRequest protobuf ({e})")
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    kind = metric.WhichOneof("data")
                    if kind in _POINT_FIELDS:
                        points += len(getattr(getattr(metric, kind), _POINT_FIELDS[kind]))
    metrics.inc("wt_otel_metric_points_dropped_total", points)
    return ExportResult(Outcome.OK)


def _dicts(value: object) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# --------------------------------------------------------------------------- limits, auth


CONTENT_ENCODINGS = ("gzip", "x-gzip", "deflate", "zlib", "zstd")
"""The compressed OTLP/HTTP bodies serve takes: gzip (the OTLP spec's, every SDK's and the Collector's
default), deflate (the Python SDK's other choice: zlib format, or raw deflate), zlib (the Collector's
`compression: zlib` names its zlib-format body so) and zstd (the Collector's `compression: zstd`)."""

_ZSTD_STEP = 64  # fewest compressed bytes fed at a time: at most 16 blocks of 128 KiB come out of one call
_ZSTD_MIN_WINDOW = 1 << 23  # 8 MiB, a common encoder default: a small cap must not refuse an ordinary frame


def decompress_capped(data: bytes, encoding: str, cap: int) -> bytes:
    """`data` decoded from `encoding` (one of `CONTENT_ENCODINGS`), never holding more than `cap` + 1 output
    bytes (plus one step's worth): raises `TooLarge` past the cap, `MalformedRequest` on a broken body."""
    if encoding in ("gzip", "x-gzip"):
        return _inflate(data, cap, "gzip", 16 + zlib.MAX_WBITS, member=b"\x1f\x8b")
    if encoding in ("deflate", "zlib"):
        # HTTP's deflate is the zlib format (RFC 9110); some clients send raw deflate: the header tells them apart
        zlib_format = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
        return _inflate(data, cap, encoding, zlib.MAX_WBITS if zlib_format else -zlib.MAX_WBITS)
    if encoding == "zstd":
        return _unzstd(data, cap)
    raise ValueError(f"not a content encoding serve decompresses: {encoding!r}")


def _inflate(data: bytes, cap: int, name: str, wbits: int, member: bytes | None = None) -> bytes:
    """zlib's formats; `member`: the magic of a next member (gzip may hold several), else one stream."""
    out = bytearray()
    rest = data
    try:
        while True:
            inflater = zlib.decompressobj(wbits)
            pending = rest
            while not inflater.eof:
                # max_length must stay >= 1: 0 would mean "unlimited".
                chunk = inflater.decompress(pending, cap + 1 - len(out))
                out += chunk
                if len(out) > cap:
                    raise TooLarge(f"{name} body inflates beyond the {cap}-byte limit (max_decompressed_bytes)")
                pending = inflater.unconsumed_tail
                if not pending and not chunk:
                    raise MalformedRequest(f"{name} body is empty or truncated")
            rest = inflater.unused_data
            if not rest:
                return bytes(out)
            if member is None or not rest.startswith(member):
                raise MalformedRequest(f"{len(rest)} bytes of garbage after the {name} stream")
    except zlib.error as e:
        raise MalformedRequest(f"invalid {name} body: {e}") from None


def _unzstd(data: bytes, cap: int) -> bytes:
    """zstd, one or more frames, fed a step at a time: zstandard's decompressobj has no output limit, and one
    4-byte block can stand for 128 KiB (32,768x), so a step is the room left under the cap / 32,768 bytes, at
    least `_ZSTD_STEP` (at most 2 MiB past the cap; a 4 MiB body of incompressible data takes ~4,000 calls,
    not 65,000). A frame may not ask for a window (the memory the decoder allocates) above the cap: no body
    that fits the cap needs one."""
    window = max(_ZSTD_MIN_WINDOW, 1 << max(10, (cap - 1).bit_length()))
    out = bytearray()
    rest = data
    try:
        while True:
            asked = zstandard.get_frame_parameters(rest).window_size  # read from the frame header, before decoding
            if asked > window:
                raise TooLarge(f"zstd frame asks for a {asked}-byte window, above what the {cap}-byte limit "
                               "(max_decompressed_bytes) could need")
            frame = zstandard.ZstdDecompressor(max_window_size=window).decompressobj()
            fed = 0
            while not frame.eof and fed < len(rest):
                step = max(_ZSTD_STEP, (cap - len(out)) >> 15)
                out += frame.decompress(rest[fed:fed + step])
                fed += step
                if len(out) > cap:
                    raise TooLarge(f"zstd body inflates beyond the {cap}-byte limit (max_decompressed_bytes)")
            if not frame.eof:
                raise MalformedRequest("zstd body is empty or truncated")
            rest = frame.unused_data + rest[fed:]
            if not rest:
                return bytes(out)
    except zstandard.ZstdError as e:
        raise MalformedRequest(f"invalid zstd body: {e}") from None


def load_token(path: Path | None) -> bytes | None:
    """The bearer token from `path` (surrounding whitespace stripped), or None for no auth.

    An empty file is an error: it would otherwise make "Bearer " a valid credential."""
    if path is None:
        return None
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"auth token file {path} is empty")
    return token.encode()


def bearer_ok(header: str | None, token: bytes) -> bool:
    """Whether an `Authorization` value carries `token` (scheme case-insensitive, RFC 7235)."""
    if not header:
        return False
    scheme, _, credentials = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode("utf-8", "replace"), token)


# --------------------------------------------------------------------------- google.rpc wire format


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""


def retry_info_bytes(seconds: int = RETRY_AFTER_SECONDS) -> bytes:
    """`google.rpc.RetryInfo{retry_delay: Duration{seconds}}` serialized."""
    return _len_field(1, _int_field(1, seconds))


def rpc_status_bytes(code: int, message: str, details: Iterable[tuple[str, bytes]] = ()) -> bytes:
    """`google.rpc.Status{code, message, details: [Any{type_url, value}]}` serialized."""
    out = _int_field(1, code)
    if message:
        out += _len_field(2, message.encode())
    for type_url, value in details:
        out += _len_field(3, _len_field(1, type_url.encode()) + _len_field(2, value))
    return out
