"""Fuzzing the span index (issue 15): the native scanner, the upb fallback and the wire walk against each
other on garbage, on mutated real requests and on generated ones, and against today's decode path
whenever protobuf accepts the bytes. Any implementation may refuse (SpanIndexError, the same message from all),
never anything else; `pytest` runs the fast profile, `pytest -m fuzz` the long one."""

from __future__ import annotations

import functools

import pytest
from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.support.fuzzing import GENAI_KEYS, _depth, count, json_values, record_lists
from tests.support.hostile import genai_session, tid, to_request
from tests.support.spanindex import any_value, decodes, implementation, native_or_skip, outcome, text, truth, view
from wt_otel.ingest import spanindex
from wt_otel.ingest.wirecheck import WireCheck

pytestmark = pytest.mark.fuzz

MARK_KEYS = ["wt.incident", "wt.incident.id", "user.feedback", "feedback.score", "gen_ai.feedback.rating",
             "session.id", "thread.id", "gen_ai.operation.name"]


def _seed() -> bytes:
    spans = genai_session(tid(1), conversation="conv-1")
    spans[0].attributes["user.feedback"] = -1
    return to_request(spans).SerializeToString()


SEED = _seed()


@functools.cache
def _native_check() -> WireCheck:
    native_or_skip()
    return WireCheck(ExportTraceServiceRequest, native=True)


def _keeps_the_promise(body: bytes) -> bool:
    """The native wire check (wirecheck.py) finds no problem only in bytes upb decodes; returns upb's answer."""
    accepted = decodes(body)
    if _native_check().problem(body) is None:
        assert accepted
    return accepted


def _agree(body: bytes) -> tuple[str, str]:
    _keeps_the_promise(body)
    native = implementation("native")
    got = outcome(spanindex.scan_python, body)
    assert outcome(spanindex.scan_wire, body) == got
    assert outcome(native, body) == got
    # and the runs serve keeps by reference: the C walk without the GIL and the Python path alike, errors too
    assert outcome(spanindex.scan_runs_native, body) == outcome(spanindex.scan_runs_python, body)
    return got


@given(st.binary(max_size=2048))
def test_garbage_is_refused_or_indexed_alike(body):
    count("spanindex_garbage")
    _agree(body)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    body = bytearray(SEED)
    for _ in range(draw(st.integers(1, 4))):
        if not body:
            break
        at = draw(st.integers(0, len(body) - 1))
        kind = draw(st.integers(0, 3))
        if kind == 0:
            body[at] = draw(st.integers(0, 255))
        elif kind == 1:
            body[at:at] = draw(st.binary(min_size=1, max_size=12))
        elif kind == 2:
            del body[at:at + draw(st.integers(1, 16))]
        else:
            del body[at:]
    return bytes(body)


@given(mutated())
def test_mutated_requests_are_refused_or_indexed_alike_and_as_decoded(body):
    count("spanindex_mutated")
    kind, _ = _agree(body)
    if kind == "entries":
        try:
            expected = truth(body)
        except DecodeError:
            return  # the index reads less than protobuf checks (see spanindex's docstring)
        assert view(spanindex.scan_python(body)) == expected


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """Hostile span records as real protobuf, with AnyValues of every kind on the keys the index reads."""
    spans = []
    for record in draw(record_lists):
        if not hasattr(record, "name"):
            continue  # a log record
        attrs = [KeyValue(key=text(k), value=any_value(v)) for k, v in record.attributes.items()
                 if not isinstance(v, dict | list) or _depth(v) < 30]  # protobuf's own limit is 100
        for _ in range(draw(st.integers(0, 3))):
            attrs.append(KeyValue(key=draw(st.sampled_from(MARK_KEYS + GENAI_KEYS)),
                                  value=any_value(draw(st.one_of(json_values, st.binary(max_size=8))))))
        events = [Span.Event(name=text(e.name), attributes=[KeyValue(key=draw(st.sampled_from(MARK_KEYS)),
                                                               value=any_value(draw(json_values)))])
                  for e in record.events]
        spans.append(Span(trace_id=bytes.fromhex(record.trace_id), span_id=bytes.fromhex(record.span_id),
                          parent_span_id=bytes.fromhex(record.parent_span_id or ""), name=text(record.name),
                          attributes=attrs, events=events))
    scope = ScopeSpans(spans=spans)
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[scope])]).SerializeToString()


@given(requests())
# found by the long profile: feedback with an empty `session.id` is no conversation, so no GenAI evidence, for the
# index and the decode path's filter alike
@example(body=b"\nG\x12E\x12C\n\x10" + bytes(15) + b"\x01\x12\x08" + bytes(7)
         + b"\x01J\x13\n\ruser.feedback\x12\x02:\x00J\x10\n\nsession.id\x12\x02:\x00")
def test_generated_requests_index_as_the_decoder_reads_them(body):
    count("spanindex_generated")
    kind, _ = _agree(body)
    if decodes(body):  # well-formed requests of known fields: the check settles them, no fallback to upb
        assert _native_check().problem(body) is None
    try:
        expected = truth(body)
    except DecodeError:
        return
    assert kind == "entries"
    assert view(spanindex.scan_python(body)) == expected
