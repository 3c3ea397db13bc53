"""Records -> OTLP protobuf (what serve's segment log stores for OTLP/JSON requests) reads back as the same records."""

from __future__ import annotations

import json

from tests.support.hostile import HUGE_INT_ARGS, genai_session, tid, to_otlp_json
from tests.support.livehelpers import log_event
from wt_otel.ingest.otlp import logs_from_json, logs_from_request, spans_from_json, spans_from_request
from wt_otel.ingest.otlp_encode import logs_request, traces_request
from wt_otel.model.spans import Event, Link, SpanRecord


def test_spans_from_json_round_trip_through_protobuf_unchanged() -> None:
    spans = list(spans_from_json(to_otlp_json(genai_session(tid(1), args=HUGE_INT_ARGS))))
    spans[0].events.append(Event(name="gen_ai.choice", time_ns=7, attributes={"index": 0, "ok": True}))
    spans[0].links.append(Link(trace_id=tid(2), span_id="ab" * 8, attributes={"why": "retry"}))
    spans[0].attributes.update({"nested": {"a": [1, 2.5, "x", None, {"b": b"\x00\x01"}]}, "empty": [], "big": 2**70})
    back = list(spans_from_request(traces_request(spans)))
    expected = list(spans)
    expected[0].attributes["big"] = str(2**70)  # beyond int64: kept as its decimal string
    assert back == expected


def test_logs_round_trip_through_protobuf_unchanged() -> None:
    logs = [log_event(tid(1), "12" * 8, body={"content": "hi", "n": [1, 2]}),
            log_event(tid(1), "34" * 8, name="gen_ai.choice")]
    logs[1].trace_id = logs[1].span_id = None
    back = list(logs_from_request(logs_request(logs)))
    assert back == logs
    as_json = {"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"eventName": "e", "timeUnixNano": "5", "body": {"stringValue": "x"}, "traceId": tid(3)}]}]}]}
    decoded = list(logs_from_json(json.loads(json.dumps(as_json))))
    assert list(logs_from_request(logs_request(decoded))) == decoded


def test_spans_of_different_resources_keep_their_resource() -> None:
    a = SpanRecord(trace_id=tid(1), span_id="1" * 16, name="a", resource={"service.name": "one"}, scope_name="s1")
    b = SpanRecord(trace_id=tid(1), span_id="2" * 16, name="b", resource={"service.name": "two"}, scope_name="s2",
                   scope_version="1.0", kind="CLIENT", status_code="ERROR", status_message="boom")
    assert list(spans_from_request(traces_request([a, b]))) == [a, b]
