"""The wire check (wt_otel/ingest/wirecheck.py, _wirecheck.c): no problem found means upb decodes the bytes.

The native check answers "does this decode?" for serve's by-reference path without the GIL; the promise is
one-way (stricter than upb where upb is lenient), so each test holds it against upb's `FromString`.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.support.otlp_pb import producer_dumps, trace_requests
from tests.support.spanindex import decodes, native_or_skip
from tests.unit.ingest.test_spanindex import T1, _len_field, _varint, request, rich_request
from wt_otel.ingest import spanindex, wirecheck
from wt_otel.ingest.wirecheck import WireCheck, schema_of


@pytest.fixture(params=["native", "upb"])
def check(request) -> WireCheck:
    """The native check (skipped, or failed under WT_OTEL_REQUIRE_NATIVE=1, when not built) and upb's."""
    if request.param == "native":
        native_or_skip()
    made = WireCheck(ExportTraceServiceRequest, native=request.param == "native")
    assert made.native == (request.param == "native")
    return made


@pytest.mark.parametrize("chosen", ["native", "python"])
def test_by_default_the_check_follows_the_span_index(monkeypatch, chosen):
    if chosen == "native":
        native_or_skip()
    monkeypatch.setattr(spanindex, "_chosen", (chosen, None))
    assert WireCheck(ExportTraceServiceRequest).native == (chosen == "native")


def test_requiring_the_native_check_without_the_extension_names_the_cause(monkeypatch):
    monkeypatch.setattr(wirecheck, "_native", lambda: None)
    with pytest.raises(spanindex.SpanIndexUnavailable, match="_wirecheck.c.* is not built"):
        WireCheck(ExportTraceServiceRequest, native=True)
    assert not WireCheck(ExportTraceServiceRequest).native


def test_the_schema_is_read_from_the_installed_descriptors():
    schema = schema_of(ExportTraceServiceRequest.DESCRIPTOR)
    fields = {number: (kind, repeated, child) for number, kind, repeated, child in schema[0]}
    assert fields[1][:2] == (wirecheck.MESSAGE, 1)  # resource_spans
    span = next(m for m in schema if {(n, k) for n, k, _, _ in m} >= {(1, wirecheck.BYTES), (5, wirecheck.STRING),
                                                                      (7, wirecheck.FIXED64)})
    assert (6, wirecheck.VARINT, 0, -1) in span  # kind (an enum)
    assert len(schema) == len({id(m) for m in schema})
    logs = schema_of(ExportLogsServiceRequest.DESCRIPTOR)
    assert logs[0] != schema[0] or len(logs) != len(schema)


@pytest.mark.parametrize("dump", producer_dumps(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_producer_fixture_passes(dump: Path, check: WireCheck):
    for body in trace_requests(dump):
        assert check.problem(body) is None


def test_the_rich_request_and_the_empty_one_pass(check: WireCheck):
    assert check.problem(rich_request()) is None
    assert check.problem(b"") is None


@pytest.mark.parametrize("where", ["span name", "status message", "resource attribute", "event attribute value"])
def test_invalid_utf8_in_any_string_is_a_problem(check: WireCheck, where: str):
    span = Span(trace_id=T1, span_id=b"\x01" * 8, name="n-MARK", status={"message": "s-MARK"},
                attributes=[KeyValue(key="k", value=AnyValue(string_value="a-MARK"))],
                events=[Span.Event(name="e", attributes=[KeyValue(key="x", value=AnyValue(
                    array_value=ArrayValue(values=[AnyValue(string_value="v-MARK")])))])])
    body = request(span)
    marker = {"span name": b"n-MARK", "status message": b"s-MARK", "resource attribute": b"a-MARK",
              "event attribute value": b"v-MARK"}[where]
    bad = body.replace(marker, marker[:2] + b"\xed\xa0\x80"[: len(marker) - 2] + marker[5:])  # a surrogate
    assert len(bad) == len(body) and not decodes(bad)
    problem = check.problem(bad)
    assert problem is not None
    if check.native:
        assert "not valid UTF-8" in problem


@pytest.mark.parametrize("text", ["ascii only", "é", "€ and 𝄞", "\x00", "\U0010ffff", "ab" * 40 + "é" * 9])
def test_valid_utf8_of_every_width_passes(check: WireCheck, text: str):
    assert check.problem(request(Span(trace_id=T1, span_id=b"\x01" * 8, name=text))) is None


@pytest.mark.parametrize("raw", [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf", b"\xf4\x90\x80\x80", b"\xff",
                                 b"\x80", b"\xc3", b"\xe2\x82", b"abcdefg\xc3"])
def test_overlong_truncated_and_out_of_range_utf8_is_a_problem(check: WireCheck, raw: bytes):
    body = _len_field(1, _len_field(2, _len_field(2, b"\x2a" + _varint(len(raw)) + raw)))  # span.name
    assert not decodes(body)
    assert check.problem(body) is not None


@pytest.mark.parametrize("bad", [b"\xff", b"\xed\xa0\x80", b"\xc3"])
def test_a_bad_byte_anywhere_in_long_ascii_is_found(check: WireCheck, bad: bytes):
    """The validator skips ASCII 32 and 8 bytes at a time: a bad sequence at every offset of a 100-byte
    name, across those strides and in the tail after them, is still a problem; the name without it passes."""
    for at in range(100):
        name = b"a" * at + bad + b"b" * (99 - at)
        body = _len_field(1, _len_field(2, _len_field(2, b"\x2a" + _varint(len(name)) + name)))  # span.name
        assert check.problem(body) is not None, at
    ascii_only = b"c" * 100
    assert check.problem(_len_field(1, _len_field(2, _len_field(2, b"\x2a" + _varint(100) + ascii_only)))) is None


def test_every_truncation_of_a_real_request_holds_the_promise(check: WireCheck):
    body = rich_request()
    for cut in range(len(body)):
        if check.problem(body[:cut]) is None:
            assert decodes(body[:cut]), cut


def test_deep_nesting_is_left_to_upb_and_never_recurses(check: WireCheck):
    deep = AnyValue(string_value="leaf")
    for _ in range(20):
        deep = AnyValue(array_value=ArrayValue(values=[deep]))
    assert check.problem(request(Span(trace_id=T1, span_id=b"\x01" * 8,
                                      attributes=[KeyValue(key="d", value=deep)]))) is None
    inner = b"\x0a\x01x"
    for _ in range(5_000):  # far past any C stack a recursive walk could use
        inner = _len_field(5, _len_field(1, inner))
    kvb = b"\x0a\x01d\x12" + _varint(len(inner)) + inner
    spanb = b"\x0a\x10" + T1 + b"\x12\x08" + b"\x01" * 8 + b"\x4a" + _varint(len(kvb)) + kvb
    body = _len_field(1, _len_field(2, _len_field(2, spanb)))
    problem = check.problem(body)
    assert problem is not None
    if check.native:
        assert "nested too deep" in problem


@pytest.mark.parametrize("body, upb_accepts", [
    (_len_field(1, b"\x0b\x0c"), True),  # a group inside a resource_spans: an unknown field to upb
    (b"\x08\x01", True),  # resource_spans as a varint: a wire type that does not match, kept as unknown
    (b"\x00\x01", False),  # field number 0
    (b"\x0a\x05ab", False),  # a length past the end
    (b"\x0f", False),  # wire type 7
    (b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", False),  # a tag longer than 10 bytes
])
def test_what_the_check_leaves_to_upb_is_a_problem_and_upb_decides(check: WireCheck, body: bytes, upb_accepts):
    assert decodes(body) == upb_accepts
    if check.native or not upb_accepts:
        assert check.problem(body) is not None
    else:
        assert check.problem(body) is None


def test_unknown_fields_are_skipped_by_their_extent(check: WireCheck):
    span = b"\x0a\x10" + T1 + b"\x12\x08" + b"\x01" * 8
    unknown = b"\xf8\x07\x05" + b"\xfd\x07abcd" + b"\xf9\x07" + b"12345678" + b"\xfa\x07\x02\xff\xfe"  # 127, each wire
    body = _len_field(1, _len_field(2, _len_field(2, span + unknown)))
    assert decodes(body)
    assert check.problem(body) is None
    assert check.problem(body[:-1]) is not None


def ran_alongside(call) -> int:
    """How often another Python thread ran while `call()` did, with forced GIL switches off: 0 unless
    `call` releases the GIL (a count of turns, not a time)."""
    go, done = threading.Event(), threading.Event()
    ticks = 0

    def count() -> None:
        nonlocal ticks
        go.wait()
        while not done.is_set():
            ticks += 1
            time.sleep(0)  # lets the caller have the GIL back as soon as `call` returns

    interval = sys.getswitchinterval()
    counter = threading.Thread(target=count)
    counter.start()
    sys.setswitchinterval(100.0)
    try:
        go.set()  # runnable, but this thread holds the GIL and is not asked to drop it
        before = ticks
        call()
        return ticks - before
    finally:
        sys.setswitchinterval(interval)
        done.set()
        counter.join()


def test_the_native_check_lets_other_threads_run(check: WireCheck):
    body = request(Span(trace_id=T1, span_id=b"\x01" * 8, name="é" * 10_000_000))  # 20 MB of UTF-8 to check
    assert ran_alongside(lambda: body.count(b"\xff")) == 0  # the measure: a C call that holds the GIL
    if not check.native:
        assert ran_alongside(lambda: check.problem(body)) == 0  # upb holds it
        return
    assert max(ran_alongside(lambda: check.problem(body)) for _ in range(3)) > 0


@pytest.mark.parametrize("schema, error", [
    ([], "at least one message"), ([[(0, wirecheck.VARINT, 0, -1)]], "bad number"),
    ([[(1, wirecheck.MESSAGE, 0, 3)]], "bad number, kind or child"), ([[(1, 99, 0, -1)]], "bad number"),
    ([5], "a sequence of fields"), (5, "a sequence of messages"),
])
def test_a_bad_schema_is_refused_by_the_native_compiler(schema, error):
    native_or_skip()
    ext = wirecheck._native()
    with pytest.raises((ValueError, TypeError), match=error):
        ext.compile(schema)
