"""OTLP decoding: requests made by the real OpenTelemetry SDK, as protobuf and as OTLP/JSON."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry._logs import LogRecord as ApiLogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, format_span_id, format_trace_id

from wt_otel.ingest.otlp import (
    OtlpJsonError,
    check_protobuf_backend,
    logs_from_json,
    logs_from_request,
    spans_from_json,
    spans_from_request,
)
from wt_otel.model.spans import LogRecord, SpanRecord

KVLIST = {"role": "user", "parts": [{"type": "text", "content": "hi"}], "n": 7, "none": None}


def _kvlist_value(d: dict[str, Any]) -> AnyValue:
    """Structured AnyValue (the SDK's attribute API cannot build kvlists)."""
    v = AnyValue()
    for key, item in d.items():
        kv = v.kvlist_value.values.add(key=key)
        _fill(kv.value, item)
    return v


def _fill(v: AnyValue, item: Any) -> None:
    if isinstance(item, dict):
        v.CopyFrom(_kvlist_value(item))
    elif isinstance(item, list):
        for x in item:
            _fill(v.array_value.values.add(), x)
    elif isinstance(item, str):
        v.string_value = item
    elif isinstance(item, int):
        v.int_value = item
    # None: leave the AnyValue empty


def sdk_traces():
    """An ExportTraceServiceRequest from the real SDK, plus the SDK's own spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "crm-agent", "build": 12}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("wt.test", "1.2.3")
    with tracer.start_as_current_span("invoke_agent", kind=SpanKind.SERVER) as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        link = Link(root.get_span_context(), {"link.kind": "follows"})
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT, links=[link]) as chat:
            chat.set_attributes(
                {
                    "gen_ai.usage.input_tokens": 2**40 + 3,
                    "gen_ai.request.temperature": 0.25,
                    "stream": False,
                    "stop": ["a", "b"],
                    "ids": [1, 2, 3],
                    "raw": b"\x00\xff\x10",
                }
            )
            chat.add_event("gen_ai.content.prompt", {"gen_ai.prompt": "hi", "i": 1}, timestamp=1_000)
            chat.set_status(Status(StatusCode.ERROR, "boom"))
        with tracer.start_as_current_span("execute_tool client_lookup") as tool:
            tool.set_status(Status(StatusCode.OK))
    provider.shutdown()
    finished = exporter.get_finished_spans()
    req = encode_spans(finished)
    chat_pb = next(s for s in req.resource_spans[0].scope_spans[0].spans if s.name == "chat gpt-4o")
    chat_pb.attributes.append(KeyValue(key="gen_ai.input.messages", value=_kvlist_value(KVLIST)))
    chat_pb.attributes.append(KeyValue(key="empty", value=AnyValue()))
    return req, finished


def sdk_logs(span_context=None):
    """An ExportLogsServiceRequest from the real SDK logger."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=Resource.create({"service.name": "crm-agent"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("wt.logs", "0.1")
    ids = {}
    if span_context is not None:
        ids = {"trace_id": span_context.trace_id, "span_id": span_context.span_id, "trace_flags": 1}
    logger.emit(
        ApiLogRecord(
            timestamp=5_000,
            event_name="gen_ai.user.message",
            body={"content": "hi", "n": [1, 2]},
            attributes={"gen_ai.system": "openai"},
            severity_text="INFO",
            **ids,
        )
    )
    logger.emit(ApiLogRecord(observed_timestamp=7_000, body="plain text"))
    provider.shutdown()
    return encode_logs(exporter.get_finished_logs())


def collector_json(msg: Any, snake: bool = False) -> dict[str, Any]:
    """OTLP/JSON as the collector file exporter writes it: MessageToDict with hex ids."""
    d = MessageToDict(msg, preserving_proto_field_name=snake)
    id_keys = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k in id_keys and isinstance(v, str):
                    x[k] = base64.b64decode(v).hex()
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    if not snake:
        walk(d)
    return d


# --------------------------------------------------------------------------- protobuf


def test_spans_from_request_matches_the_sdk_spans():
    req, finished = sdk_traces()
    records = {r.name: r for r in spans_from_request(req)}
    assert set(records) == {"invoke_agent", "chat gpt-4o", "execute_tool client_lookup"}
    by_name = {s.name: s for s in finished}
    for name, rec in records.items():
        ctx = by_name[name].context
        assert rec.trace_id == format_trace_id(ctx.trace_id)
        assert rec.span_id == format_span_id(ctx.span_id)
        assert rec.start_ns == by_name[name].start_time and rec.end_ns == by_name[name].end_time
        assert rec.resource["service.name"] == "crm-agent" and rec.resource["build"] == 12
        assert (rec.scope_name, rec.scope_version) == ("wt.test", "1.2.3")
    root, chat, tool = records["invoke_agent"], records["chat gpt-4o"], records["execute_tool client_lookup"]
    assert root.parent_span_id is None and root.kind == "SERVER" and root.status_code == "UNSET"
    assert chat.parent_span_id == root.span_id and chat.kind == "CLIENT"
    assert tool.kind == "INTERNAL" and tool.status_code == "OK"
    assert (chat.status_code, chat.status_message) == ("ERROR", "boom")
    assert chat.attributes == {
        "gen_ai.usage.input_tokens": 2**40 + 3,
        "gen_ai.request.temperature": 0.25,
        "stream": False,
        "stop": ["a", "b"],
        "ids": [1, 2, 3],
        "raw": b"\x00\xff\x10",
        "gen_ai.input.messages": KVLIST,
        "empty": None,
    }
    assert len(chat.events) == 1
    event = chat.events[0]
    assert (event.name, event.time_ns, event.attributes) == (
        "gen_ai.content.prompt",
        1_000,
        {"gen_ai.prompt": "hi", "i": 1},
    )
    assert len(chat.links) == 1
    assert (chat.links[0].trace_id, chat.links[0].span_id) == (root.trace_id, root.span_id)
    assert chat.links[0].attributes == {"link.kind": "follows"}


def test_traces_data_reads_like_the_request():
    req, _ = sdk_traces()
    data = TracesData()
    data.ParseFromString(req.SerializeToString())
    assert list(spans_from_request(data)) == list(spans_from_request(req))


def test_unknown_enum_values_fall_back():
    req, _ = sdk_traces()
    span = req.resource_spans[0].scope_spans[0].spans[0]
    span.kind = 0  # SPAN_KIND_UNSPECIFIED
    records = list(spans_from_request(req))
    assert records[0].kind == "INTERNAL"


def test_logs_from_request_with_and_without_span_ids():
    req, finished = sdk_traces()
    ctx = finished[0].context
    logs = list(logs_from_request(sdk_logs(ctx)))
    assert len(logs) == 2
    event, plain = logs
    assert event.event_name == "gen_ai.user.message"
    assert event.trace_id == format_trace_id(ctx.trace_id) and event.span_id == format_span_id(ctx.span_id)
    assert event.body == {"content": "hi", "n": [1, 2]}
    assert event.attributes == {"gen_ai.system": "openai"}
    assert (event.time_ns, event.severity_text) == (5_000, "INFO")
    assert event.resource["service.name"] == "crm-agent" and event.scope_name == "wt.logs"
    assert plain.trace_id is None and plain.span_id is None
    assert plain.body == "plain text" and plain.time_ns == 7_000  # falls back to the observed time
    no_ids = list(logs_from_request(sdk_logs()))
    assert no_ids[0].trace_id is None and no_ids[0].span_id is None


def test_check_protobuf_backend_reports_upb():
    assert check_protobuf_backend() == "upb"


# --------------------------------------------------------------------------- JSON


def test_collector_json_reads_like_protobuf():
    req, _ = sdk_traces()
    doc = collector_json(req)
    assert doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["kind"].startswith("SPAN_KIND_")
    assert list(spans_from_json(doc)) == list(spans_from_request(req))


def test_snake_case_json_with_base64_ids_reads_like_protobuf():
    req, _ = sdk_traces()
    doc = collector_json(req, snake=True)  # json_format's own output: base64 ids, snake_case keys
    assert "resource_spans" in doc
    assert list(spans_from_json(doc)) == list(spans_from_request(req))


def test_json_logs_read_like_protobuf():
    _, finished = sdk_traces()
    req = sdk_logs(finished[0].context)
    assert list(logs_from_json(collector_json(req))) == list(logs_from_request(req))
    assert list(logs_from_json(collector_json(req, snake=True))) == list(logs_from_request(req))


TRACE_HEX = "5b8efff798038103d269b633813fc60c"
SPAN_HEX = "eee19b7ec3c1b174"


def _doc(span: dict[str, Any], **rs: Any) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}], **rs}]}


def test_json_int_forms_enum_ints_and_special_doubles():
    span = {
        "traceId": TRACE_HEX.upper(),
        "spanId": SPAN_HEX,
        "name": "s",
        "kind": 3,
        "startTimeUnixNano": 1700000000000000001,
        "endTimeUnixNano": "1700000000000000002",
        "status": {"code": 2, "message": "bad"},
        "attributes": [
            {"key": "a", "value": {"intValue": "42"}},
            {"key": "b", "value": {"intValue": 43}},
            {"key": "c", "value": {"doubleValue": "NaN"}},
            {"key": "d", "value": {"doubleValue": 1}},
            {"key": "e", "value": {"arrayValue": {}}},
            {"key": "f", "value": {"kvlistValue": {"values": [{"key": "x", "value": {"boolValue": True}}]}}},
            {"key": "g", "value": {"bytesValue": base64.b64encode(b"\x01\x02").decode()}},
            {"key": "h"},
        ],
    }
    (rec,) = spans_from_json(_doc(span))
    assert rec.trace_id == TRACE_HEX and rec.kind == "CLIENT"
    assert (rec.start_ns, rec.end_ns) == (1700000000000000001, 1700000000000000002)
    assert (rec.status_code, rec.status_message) == ("ERROR", "bad")
    attrs = rec.attributes
    assert attrs["a"] == 42 and attrs["b"] == 43 and attrs["c"] != attrs["c"] and attrs["d"] == 1.0
    assert attrs["e"] == [] and attrs["f"] == {"x": True} and attrs["g"] == b"\x01\x02" and attrs["h"] is None


def test_json_enum_names_bare_and_prefixed():
    span = {
        "traceId": TRACE_HEX,
        "spanId": SPAN_HEX,
        "kind": "SPAN_KIND_PRODUCER",
        "status": {"code": "STATUS_CODE_OK"},
    }
    (rec,) = spans_from_json(_doc(span))
    assert (rec.kind, rec.status_code) == ("PRODUCER", "OK")
    span.update(kind="CONSUMER", status={"code": "ERROR"})
    (rec,) = spans_from_json(_doc(span))
    assert (rec.kind, rec.status_code) == ("CONSUMER", "ERROR")


def test_json_base64_ids_and_hex_first_ambiguity():
    trace = bytes.fromhex(TRACE_HEX)
    span_b64 = base64.b64encode(bytes.fromhex(SPAN_HEX)).decode()
    assert len(base64.b64encode(trace)) == 24 and len(span_b64) == 12
    doc = _doc({"traceId": base64.b64encode(trace).decode(), "spanId": span_b64, "parentSpanId": ""})
    (rec,) = spans_from_json(doc)
    assert (rec.trace_id, rec.span_id, rec.parent_span_id) == (TRACE_HEX, SPAN_HEX, None)
    # 16 chars, all hex: read as hex (8 bytes), even though it is also valid base64 (12 bytes).
    (rec,) = spans_from_json(_doc({"traceId": TRACE_HEX, "spanId": "0123456789abcdef"}))
    assert rec.span_id == "0123456789abcdef"
    url_safe = base64.urlsafe_b64encode(bytes.fromhex("fbff" * 8)).decode().rstrip("=")
    (rec,) = spans_from_json(_doc({"traceId": url_safe, "spanId": SPAN_HEX}))
    assert rec.trace_id == "fbff" * 8


def test_legacy_instrumentation_library_spans_and_logs():
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "old"}}]},
                "instrumentationLibrarySpans": [
                    {
                        "instrumentationLibrary": {"name": "lib", "version": "0.9"},
                        "spans": [{"traceId": TRACE_HEX, "spanId": SPAN_HEX, "name": "x"}],
                    }
                ],
            }
        ],
        "resourceLogs": [
            {
                "instrumentationLibraryLogs": [
                    {
                        "instrumentationLibrary": {"name": "liblog"},
                        "logRecords": [{"body": {"stringValue": "b"}}],
                    }
                ]
            }
        ],
    }
    (span,) = spans_from_json(doc)
    assert (span.name, span.scope_name, span.scope_version, span.service_name) == ("x", "lib", "0.9", "old")
    (log,) = logs_from_json(doc)
    assert (log.body, log.scope_name, log.trace_id, log.span_id) == ("b", "liblog", None, None)


def test_json_log_records_with_and_without_ids():
    doc = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "eventName": "gen_ai.choice",
                                "traceId": TRACE_HEX,
                                "spanId": SPAN_HEX,
                                "timeUnixNano": "9",
                                "severityText": "INFO",
                                "body": {"kvlistValue": {"values": [{"key": "index", "value": {"intValue": "0"}}]}},
                                "attributes": [{"key": "event.name", "value": {"stringValue": "gen_ai.choice"}}],
                            },
                            {"traceId": "", "spanId": "", "observedTimeUnixNano": "11"},
                        ]
                    }
                ]
            }
        ]
    }
    first, second = logs_from_json(doc)
    assert first == LogRecord(
        event_name="gen_ai.choice",
        trace_id=TRACE_HEX,
        span_id=SPAN_HEX,
        time_ns=9,
        severity_text="INFO",
        body={"index": 0},
        attributes={"event.name": "gen_ai.choice"},
    )
    assert (second.trace_id, second.span_id, second.time_ns, second.body) == (None, None, 11, None)


def _bad_span_doc() -> dict[str, Any]:
    good = {"traceId": TRACE_HEX, "spanId": SPAN_HEX}
    return {"resourceSpans": [{"scopeSpans": [{"spans": [good]}, {"spans": [good, good, good, dict(good)]}]}]}


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda s: s.update(traceId="not-an-id"),
            "resourceSpans[0].scopeSpans[1].spans[3].traceId: not a hex or base64 id",
        ),
        (lambda s: s.pop("spanId"), "resourceSpans[0].scopeSpans[1].spans[3].spanId: missing"),
        (lambda s: s.update(parentSpanId="abc"), "spans[3].parentSpanId: not a hex or base64 id"),
        (lambda s: s.update(kind="SPAN_KIND_SIDEWAYS"), "spans[3].kind: unknown value 'SPAN_KIND_SIDEWAYS'"),
        (lambda s: s.update(startTimeUnixNano="soon"), "spans[3].startTimeUnixNano: not an integer"),
        (lambda s: s.update(attributes={"a": 1}), "spans[3].attributes: must be an array"),
        (
            lambda s: s.update(attributes=[{"key": "a", "value": "plain"}]),
            "spans[3].attributes[0].value: an AnyValue must be an object",
        ),
        (
            lambda s: s.update(attributes=[{"key": "a", "value": {"arrayValue": {"values": [{"intValue": "x"}]}}}]),
            "spans[3].attributes[0].value.arrayValue.values[0].intValue: not an integer",
        ),
        (
            lambda s: s.update(
                attributes=[
                    {
                        "key": "a",
                        "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": 1}}]}},
                    }
                ]
            ),
            "attributes[0].value.kvlistValue.values[0].value.stringValue: must be a string",
        ),
        (
            lambda s: s.update(attributes=[{"key": "a", "value": {"floatValue": 1}}]),
            "unknown AnyValue field 'floatValue'",
        ),
        (
            lambda s: s.update(events=[{"timeUnixNano": "x"}]),
            "spans[3].events[0].timeUnixNano: not an integer",
        ),
        (lambda s: s.update(links=[{"traceId": TRACE_HEX}]), "spans[3].links[0].spanId: missing"),
        (lambda s: s.update(status="ERROR"), "spans[3].status: must be an object"),
    ],
)
def test_json_shape_errors_name_the_path(mutate, expected):
    doc = _bad_span_doc()
    mutate(doc["resourceSpans"][0]["scopeSpans"][1]["spans"][3])
    with pytest.raises(OtlpJsonError) as info:
        list(spans_from_json(doc))
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)


def test_json_container_shape_errors():
    with pytest.raises(ValueError, match=r"^resourceSpans: must be an array"):
        list(spans_from_json({"resourceSpans": {}}))
    with pytest.raises(ValueError, match=r"resourceSpans\[0\]: resourceSpans item must be an object"):
        list(spans_from_json({"resourceSpans": [3]}))
    with pytest.raises(ValueError, match=r"resourceLogs\[0\].scopeLogs\[0\].logRecords\[0\].traceId"):
        list(logs_from_json({"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "xyz"}]}]}]}))
    with pytest.raises(ValueError, match="must be an object"):
        list(spans_from_json([]))  # type: ignore[arg-type]


def test_json_decoding_does_not_mutate_the_input():
    req, _ = sdk_traces()
    doc = collector_json(req)
    before = copy.deepcopy(doc)
    records = list(spans_from_json(doc))
    assert doc == before and all(isinstance(r, SpanRecord) for r in records)
