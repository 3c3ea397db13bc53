"""The span index (wt_otel/ingest/spanindex.py, _spanindex.c): both implementations against today's decode
path on every producer fixture and on generated requests, hostile bytes refused with SpanIndexError (never
another exception, never a crash), and the start-up choice (WT_OTEL_SPANINDEX)."""

from __future__ import annotations

import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, TracesData

from tests.support.otlp_pb import producer_dumps, trace_requests
from tests.support.paths import ROOT
from tests.support.spanindex import IMPLEMENTATIONS, any_value, implementation, outcome, truth, view
from wt_otel.ingest import spanindex
from wt_otel.ingest.spanindex import SpanIndexError

sys.path.insert(0, str(ROOT / "bench"))
from import_throughput import session_spans  # noqa: E402  (the benchmarks' realistic agent sessions)

T1, T2 = bytes.fromhex("0af7651916cd43dd8448eb211c80319c"), bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")


def kv(key: str, value: object) -> KeyValue:
    return KeyValue(key=key, value=any_value(value))


def request(*spans: Span, resources: int = 1) -> bytes:
    rs = [ResourceSpans(resource=Resource(attributes=[kv("service.name", f"svc{i}")]),
                        scope_spans=[ScopeSpans(spans=list(spans[i::resources]))]) for i in range(resources)]
    return ExportTraceServiceRequest(resource_spans=rs).SerializeToString()


def rich_request() -> bytes:
    """Every case the index distinguishes, on real protobuf: see the comment on each span."""
    root = (1).to_bytes(8, "big")
    spans = [
        # parentless agent root: operation from gen_ai.operation.name, conversation from the first key set
        Span(trace_id=T1, span_id=root, name="invoke_agent triage",
             attributes=[kv("gen_ai.operation.name", "invoke_agent"), kv("gen_ai.conversation.id", ""),
                         kv("session.id", 42)]),
        # an HTTP span: not GenAI (event attributes do not count, an incident key on the span would);
        # feedback and incident marks on its event
        Span(trace_id=T1, span_id=(2).to_bytes(8, "big"), parent_span_id=root, name="POST /feedback",
             attributes=[kv("http.request.method", "POST"), kv("user.feedback", "bad")],
             events=[Span.Event(name="feedback", attributes=[kv("user.feedback.score", -1.5),
                                                              kv("wt.incident.id", "INC-7")])]),
        # GenAI only by its event name; the duplicate key: the last value wins, as in the decoder's dict
        Span(trace_id=T2, span_id=(3).to_bytes(8, "big"), name="llm call",
             attributes=[kv("thread.id", "first"), kv("thread.id", "second")],
             events=[Span.Event(name="gen_ai.user.message", attributes=[kv("content", "hi")])]),
        # parentless chat span whose operation attribute is not a string: operation from the name
        Span(trace_id=T2, span_id=(4).to_bytes(8, "big"), name="chat gpt-4o",
             attributes=[kv("gen_ai.operation.name", 7), kv("gen_ai.conversation.id", ["a", {"b": 1}]),
                         kv("wt.flag", True), kv("gen_ai.feedback.bytes", b"\x00\xff"),
                         KeyValue(key="gen_ai.feedback.none")]),
        # parentless, no GenAI evidence, operation None; conversation from a double
        Span(trace_id=T2, span_id=(5).to_bytes(8, "big"), name="GET /health",
             attributes=[kv("thread.id", 2.5), kv("ai_not.a.prefix", 1)]),
        # GenAI by a whole key (input.value); parent of the wrong length is kept as it is
        Span(trace_id=T2, span_id=(6).to_bytes(8, "big"), parent_span_id=b"\x01\x02", name="",
             attributes=[kv("input.value", "q"), kv("gen_ai.conversation.id", True)]),
        # GenAI by its keys alone, in a namespace of its own: it names the model and counts its tokens
        Span(trace_id=T2, span_id=(7).to_bytes(8, "big"), name="acme.step",
             attributes=[kv("acme.Model.Name", "m"), kv("acme.usage.input_TOKENS", 3)]),
        # a model named without a token count (or a token that counts nothing) is not
        Span(trace_id=T2, span_id=(8).to_bytes(8, "big"), name="acme.step",
             attributes=[kv("http.model", "m"), kv("auth.token", "x")]),
        # no ids at all
        Span(name="execute_tool lookup"),
    ]
    return request(*spans, resources=2)


@pytest.fixture(params=IMPLEMENTATIONS)
def scan(request):
    return implementation(request.param)


# --------------------------------------------------------------------------- agreement with the decoder


@pytest.mark.parametrize("dump", producer_dumps(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_producer_fixture_indexes_as_the_decoder_reads_it(dump: Path, scan):
    bodies = list(trace_requests(dump))
    assert bodies, f"{dump} has no traces"
    for body in bodies:
        assert view(scan(body)) == truth(body)


def test_the_rich_request_indexes_as_the_decoder_reads_it(scan):
    body = rich_request()
    entries = scan(body)
    assert view(entries) == truth(body)
    by_span = {e.span_id: e for e in entries}
    root = by_span["0000000000000001"]
    assert (root.genai, root.conversation, root.operation, root.parent_span_id) == (True, "42", "invoke_agent", None)
    http = by_span["0000000000000002"]
    assert not http.genai and http.operation is None
    assert http.marks == (("user.feedback", "bad"), ("user.feedback.score", -1.5), ("wt.incident.id", "INC-7"))
    assert by_span["0000000000000003"].genai and by_span["0000000000000003"].conversation == "second"
    chat = by_span["0000000000000004"]
    assert chat.operation == "chat" and chat.conversation == "['a', {'b': 1}]"
    assert chat.marks == (("wt.flag", True), ("gen_ai.feedback.bytes", b"\x00\xff"), ("gen_ai.feedback.none", None))
    health = by_span["0000000000000005"]
    assert (health.genai, health.operation, health.conversation) == (False, None, "2.5")
    assert by_span["0000000000000006"].parent_span_id == "0102" and by_span["0000000000000006"].conversation == "True"
    assert by_span[""].trace_id == "" and by_span[""].genai and by_span[""].operation == "execute_tool"


def test_the_benchmark_sessions_and_traces_data_index_alike(scan):
    spans = [s for n in range(1, 4) for s in session_spans(n, 1_700_000_000_000_000_000)]
    body = request(*spans)
    assert view(scan(body)) == truth(body)
    assert sum(e.genai for e in scan(body)) == len(spans) - 3  # the GET /health span of each session
    data = TracesData(resource_spans=ExportTraceServiceRequest.FromString(body).resource_spans).SerializeToString()
    assert scan(data) == scan(body)
    assert scan(b"") == []


def test_the_fallback_indexes_well_formed_requests_without_the_wire_walk(monkeypatch):
    """The wire walk is the fallback's answer to hostile bytes only: real requests go through upb."""
    bodies = [rich_request(), *(b for d in producer_dumps() for b in trace_requests(d))]
    expect = [spanindex.scan_wire(body) for body in bodies]

    def refuse(body):
        raise AssertionError("the wire walk ran on a well-formed request")

    monkeypatch.setattr(spanindex, "scan_wire", refuse)
    assert [spanindex.scan_python(body) for body in bodies] == expect
    with pytest.raises(AssertionError, match="the wire walk ran"):
        spanindex.scan_python(b"\x0a\x80")


def test_all_implementations_agree_entry_for_entry():
    native = implementation("native")
    for body in [rich_request(), *(b for d in producer_dumps() for b in trace_requests(d))]:
        expect = repr(spanindex.scan_wire(body))
        assert repr(native(body)) == expect == repr(spanindex.scan_python(body))


def test_import_pass_one_reads_the_same_ids_through_the_native_scanner(monkeypatch):
    """`dumps.scan_message` (pass 1 of `wt-otel import`) takes trace and conversation ids from the native
    scanner when it is built: the same as its Python walk over the decoded request, span for span."""
    from wt_otel.ingest import dumps

    implementation("native")
    bodies = [rich_request(), *(b for d in producer_dumps() for b in trace_requests(d)),
              request(*session_spans(7, 1_700_000_000_000_000_000)),
              request(Span(trace_id=T1, span_id=b"\x01" * 8), Span(trace_id=T1, span_id=b"\x02" * 4))]

    def scanned(body: bytes) -> object:
        try:
            return dumps.scan_message(body)
        except ValueError as e:
            return str(e)

    native = [scanned(body) for body in bodies]
    assert dumps._native_scan is spanindex.scan_native
    monkeypatch.setattr(dumps, "_native_scan", False)  # the Python walk only
    assert native == [scanned(body) for body in bodies]
    assert native[-1] == (True, 2, [])  # a span without a valid id: not traces (permissive protobuf: logs)


# --------------------------------------------------------------------------- hostile bytes


@pytest.mark.parametrize("body, message", [
    (b"\x0a\x80", "truncated varint at byte 2"),
    (b"\x0a" + b"\xff" * 10 + b"\x01", "varint longer than 10 bytes"),
    (b"\x0a\x05ab", "the request field 1 of 5 bytes runs past the end"),
    (b"\x13", "group field 2 is not closed before byte 1"),
    (b"\x13\x1c", "group field 2 is closed by field 3"),
    (b"\x14", "field 2 ends a group that was not started"),
    (b"\x0a\x02\x1b\x1c\x14", "field 2 ends a group that was not started"),
    (b"\x1e", "field 3 has wire type 6 (not a protobuf wire type)"),
    (b"\x00", "field number 0 in the request"),
    (b"\x12\x09" + b"\x00" * 8, "field 2 runs past the end of its message"),
    (b"\x0a\x06\x12\x04\x12\x02\x4a\x01", "span field 9 of 1 bytes runs past the end"),
    (b"\x0a\x07\x12\x05\x12\x03\x4a\x01\x00", "field number 0 in an attribute"),
])
def test_malformed_bytes_raise_span_index_error(scan, body, message):
    with pytest.raises(SpanIndexError, match=re.escape(message)):
        scan(body)


@pytest.mark.parametrize("body, spans", [
    (b"\x08\x01", 0),  # the request's field 1 as a varint
    (b"\x0a\x04\x12\x02\x10\x01", 0),  # a scope_spans field as a varint
    (b"\x0a\x06\x12\x04\x12\x02\x08\x00", 1),  # a span's trace_id as a varint
    (b"\x13\x1b\x1c\x14", 0),  # nested groups
    (b"\x0a\x08\x12\x06\x12\x04\x4a\x02\x0b\x0c", 1),  # an attribute as a group
    (b"\x0a\x0a\x12\x08\x12\x06\x4a\x04\x12\x02\x08\x01", 1),  # a value as a varint: no value
])
def test_wrong_wire_types_and_groups_are_skipped_as_protobuf_skips_them(scan, body, spans):
    """protobuf keeps a field with an unexpected wire type, and a group, as an unknown field; so does the index
    (so upb, which the fallback runs on, and the wire walk agree), and the decoder reads the same spans."""
    entries = scan(body)
    assert len(entries) == spans and view(entries) == truth(body)


def test_what_upb_refuses_but_the_index_accepts_is_indexed_by_the_wire_walk(scan):
    """A 6-byte tag (field numbers past 32 bits, an unknown field to the index), or groups nested deeper than
    upb's limit, make upb refuse the bytes: the fallback then answers with the wire walk, so all
    implementations still agree."""
    span = Span(trace_id=T1, span_id=b"\x01" * 8, name="chat x").SerializeToString()
    huge_tag = b"\xf8\xff\xff\xff\x8f\x00\x01"  # field 2**32 - 1 + ..., wire type 0
    deep_groups = b"\x7b" * 300 + b"\x7c" * 300  # field 15 as 300 nested groups: past upb's depth limit
    for extra in (huge_tag, deep_groups):
        body = _len_field(1, _len_field(2, _len_field(2, span + extra)))
        with pytest.raises(DecodeError):
            spanindex._LeanRequest.FromString(body)
        assert [(e.trace_id, e.operation) for e in scan(body)] == [(T1.hex(), "chat")]


def test_the_first_bad_value_in_wire_order_is_the_one_reported(scan):
    """An event written before the span's attributes, each with a mark the index reads and cannot: upb groups
    the fields by number, so the fallback reports the error the wire walk (and the native scanner) finds first."""
    event = _len_field(3, _len_field(1, b"user.feedback") + _len_field(2, b"\x0a\x01\xff"))  # invalid UTF-8
    attr = _len_field(9, _len_field(1, b"user.feedback") + b"\x12\x00" * 2)  # the value field twice
    for fields, message in ((_len_field(11, event) + attr, "a string attribute value is not valid UTF-8"),
                            (attr + _len_field(11, event), "has its value field more than once")):
        body = _len_field(1, _len_field(2, _len_field(2, b"\x0a\x10" + T1 + fields)))
        with pytest.raises(SpanIndexError, match=message):
            scan(body)


def test_every_truncation_of_a_real_request_is_refused_or_indexed_alike():
    native = implementation("native")
    body = rich_request()
    for cut in range(len(body)):
        expect = outcome(spanindex.scan_wire, body[:cut])
        assert outcome(native, body[:cut]) == expect == outcome(spanindex.scan_python, body[:cut]), cut


def test_values_read_by_the_index_are_checked_and_values_it_skips_are_not(scan):
    bad_utf8 = Span(trace_id=T1, span_id=b"\x01" * 8, attributes=[
        KeyValue(key="gen_ai.conversation.id", value=AnyValue(bytes_value=b"x"))])
    body = bytearray(request(bad_utf8))
    body[body.index(b"\x3a\x01x")] = 0x0A  # bytes_value -> string_value holding the byte 'x': still fine
    assert scan(bytes(body))[0].conversation == "x"
    body[body.index(b"\x0a\x01x") + 2] = 0xFF  # now invalid UTF-8 in a value the index reads
    with pytest.raises(SpanIndexError, match="not valid UTF-8"):
        scan(bytes(body))
    skipped = bytes(body).replace(b"gen_ai.conversation.id", b"gen_ai.conversation.zz")
    assert scan(skipped)[0].conversation is None  # the same bytes under a key it does not read: skipped


def test_deep_nesting_never_recurses(scan):
    deep = AnyValue(string_value="leaf")
    for _ in range(30):  # two protobuf levels each; protobuf itself refuses beyond 100
        deep = AnyValue(array_value=ArrayValue(values=[deep]))
    span = Span(trace_id=T1, span_id=b"\x01" * 8, attributes=[KeyValue(key="x.deep", value=deep)])
    raw = request(span)
    assert scan(raw)[0].genai is False
    # 5,000 levels of nesting by hand: skipped by its length when unread, refused (by protobuf) when read
    inner = b"\x0a\x01x"
    for _ in range(5_000):  # AnyValue{array_value: ArrayValue{values: [inner]}}
        inner = _len_field(5, _len_field(1, inner))
    for key, expect in ((b"x.unread", None), (b"session.id", SpanIndexError)):
        kvb = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(inner)) + inner
        spanb = b"\x0a\x10" + T1 + b"\x12\x08" + b"\x01" * 8 + b"\x4a" + _varint(len(kvb)) + kvb
        body = _len_field(1, _len_field(2, _len_field(2, spanb)))
        if expect is None:
            assert scan(body)[0].conversation is None
        else:
            with pytest.raises(SpanIndexError, match="not a valid AnyValue"):
                scan(body)


def test_memory_is_bounded_by_what_the_index_keeps(scan):
    """A 16 MB attribute value the index does not read costs it nothing: it is skipped by its length."""
    big = Span(trace_id=T1, span_id=b"\x01" * 8, name="chat x",
               attributes=[kv("gen_ai.input.messages", "x" * (16 << 20))])
    body = request(big)
    tracemalloc.start()
    try:
        entries = scan(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert entries[0].genai and peak < 1 << 20, peak


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append(n & 0x7F | 0x80)
        n >>= 7


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


# --------------------------------------------------------------------------- the start-up choice


@pytest.mark.parametrize("value, expect", [("python", "python"), ("auto", None), ("", None), (" Native ", "native"),
                                           ("off", "off"), ("fast", "error")])
def test_wt_otel_spanindex_chooses(value, expect):
    code = ("from wt_otel.ingest import spanindex as s\n"
            "try:\n    print(s.implementation(), s.native_available())\n"
            "except s.SpanIndexUnavailable as e:\n    print('error', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"WT_OTEL_SPANINDEX": value, "PATH": "/usr/bin:/bin"}).stdout.split()
    built = spanindex.native_available()
    if expect == "error":
        assert out[0] == "error" and "use python, native, auto or off" in " ".join(out)
    elif expect == "native" and not built:
        assert out[0] == "error" and "not built" in " ".join(out)
    else:
        assert out[0] == (expect or ("native" if built else "python"))


def test_forcing_native_without_the_extension_names_the_cause(monkeypatch):
    monkeypatch.setattr(spanindex, "_native", None)
    monkeypatch.setenv(spanindex.ENV_VAR, "native")
    with pytest.raises(spanindex.SpanIndexUnavailable, match="not built: install with a C compiler"):
        spanindex._choose()
    monkeypatch.setenv(spanindex.ENV_VAR, "auto")
    assert spanindex._choose()[0] == "python"


# --------------------------------------------------------------------------- runs (what serve keeps by reference)


def test_runs_group_every_span_once_by_trace_and_conversation_in_c_and_python_alike():
    sessions = request(*[s for n in range(1, 6) for s in session_spans(n, 0)], resources=2)  # 5 whole sessions
    bodies = [sessions, rich_request(), *(b for d in producer_dumps() for b in trace_requests(d))]
    implementation("native")  # skips without the C extension (CI builds it)
    grouped = 0
    for body in bodies:
        entries = spanindex.scan_python(body)
        runs = spanindex.runs_python(entries)
        assert repr(spanindex.scan_runs_native(body)) == repr((len(entries), runs))  # the C walk, no GIL
        if any(not spanindex.valid_ids(e) for e in entries):
            assert runs is None
            continue
        assert runs is not None
        assert sorted(n for run in runs for n in run[2]) == list(range(len(entries)))  # each span in one run
        convs: dict[str, set[str]] = {}
        for e in entries:
            if e.conversation is not None:
                convs.setdefault(e.trace_id, set()).add(e.conversation)
        for trace_id, conv, ordinals, roots, marks, genai in runs:
            mine = [entries[n] for n in ordinals]
            one = convs.get(trace_id, set())
            joined = next(iter(one)) if len(one) == 1 else None  # where a span without a conversation id goes
            assert ordinals == sorted(ordinals)
            assert {(e.trace_id, e.conversation if e.conversation is not None else joined) for e in mine} == \
                {(trace_id, conv)}
            assert roots == tuple((n, entries[n].operation) for n in ordinals if entries[n].parent_span_id is None)
            assert marks == tuple(m for e in mine for m in e.marks) and genai == any(e.genai for e in mine)
        grouped += len(runs) < len(entries)
    assert grouped  # the fixtures hold requests with several spans of one session


def test_a_span_without_a_conversation_id_runs_with_its_traces_one_conversation():
    """One run per session (the assembler's work is per run), unless the trace holds several conversations."""
    t1, t2 = "a1" * 16, "b2" * 16
    spans = [("01" * 8, t1, "conv-1"), ("02" * 8, t1, None), ("03" * 8, t2, None), ("04" * 8, t2, "conv-2"),
             ("05" * 8, t2, "conv-3"), ("06" * 8, t1, "conv-1")]
    entries = [spanindex.SpanEntry(t, s, None if c else "0f" * 8, True, c, "chat" if c else None, ())
               for s, t, c in spans]
    expected = [(t1, "conv-1", [0, 1, 5]), (t2, None, [2]), (t2, "conv-2", [3]), (t2, "conv-3", [4])]
    runs = spanindex.runs_python(entries)
    assert runs is not None and [(r[0], r[1], r[2]) for r in runs] == expected
    implementation("native")
    body = request(*[Span(trace_id=bytes.fromhex(t), span_id=bytes.fromhex(s), name="chat m" if c else "GET /",
                          parent_span_id=b"" if c else bytes.fromhex("0f" * 8),
                          attributes=[kv("gen_ai.conversation.id", c), kv("gen_ai.operation.name", "chat")] if c
                          else [kv("gen_ai.operation.name", "chat")])
                     for s, t, c in spans])
    got = spanindex.scan_runs_native(body)
    assert got[1] is not None and [(r[0], r[1], r[2]) for r in got[1]] == expected
    assert repr(got) == repr(spanindex.scan_runs_python(body))


@pytest.mark.parametrize("field, value", [("trace_id", "0" * 32), ("trace_id", "ab" * 8), ("span_id", "0" * 16),
                                          ("span_id", "ab"), ("parent_span_id", "abcd")])
def test_runs_refuse_a_request_with_an_invalid_id_in_c_and_python(field, value):
    entries = spanindex.scan_python(rich_request())
    entries[1] = entries[1]._replace(**{field: value})
    assert spanindex.runs_python(entries) is None
    implementation("native")
    req = ExportTraceServiceRequest.FromString(rich_request())
    span = req.resource_spans[0].scope_spans[0].spans[1]
    setattr(span, field, bytes.fromhex(value))
    body = req.SerializeToString()
    assert spanindex.scan_runs_python(body) == spanindex.scan_runs_native(body) == (len(entries), None)


def test_scan_runs_stays_linear_on_a_request_built_to_make_it_quadratic():
    """One trace with a conversation id per span (a run each), and many traces: the C grouping finds runs and
    traces by keyed hash (the sender chooses the ids), so 20,000 runs cost what 20,000 spans do. Parity with
    the Python path; a walk over each trace's runs, or a hash the sender can aim, would take minutes here."""
    implementation("native")
    one = bytes.fromhex("ab" * 16)
    spans = [Span(trace_id=one, span_id=(n + 1).to_bytes(8, "big"), name="chat m",
                  attributes=[kv("gen_ai.conversation.id", f"c{n}")]) for n in range(20_000)]
    spans += [Span(trace_id=(n + 1).to_bytes(16, "big"), span_id=(n + 1).to_bytes(8, "big"), name="chat m")
              for n in range(20_000)]
    body = request(*spans)
    got = spanindex.scan_runs_native(body)
    assert got[0] == 40_000 and got[1] is not None and len(got[1]) == 40_000
    assert repr(got) == repr(spanindex.scan_runs_python(body))


def test_scan_runs_with_an_extension_built_before_it_reads_the_request_all_the_same(monkeypatch):
    """A checkout updated without reinstalling keeps its older C build: serve still indexes (the C scan, then
    the runs in Python), as it did before `scan_runs` existed."""
    implementation("native")
    body = rich_request()
    expected = spanindex.scan_runs_python(body)
    monkeypatch.setattr(spanindex, "_native_scan_runs", None)
    monkeypatch.setattr(spanindex, "_chosen", ("native", spanindex.scan_native))
    assert repr(spanindex.scan_runs(body)) == repr(expected)


def test_a_model_call_in_a_namespace_of_its_own_is_genai_in_every_walk(scan):
    """Issue 29: a producer nobody wrote a prefix for must reach the session builder in serve too; its model
    call names the model and counts tokens (`keys.model_call_bits`, the shape reader's rule)."""
    by_span = {e.span_id: e.genai for e in scan(rich_request())}
    assert by_span[(7).to_bytes(8, "big").hex()] is True
    assert by_span[(8).to_bytes(8, "big").hex()] is False
