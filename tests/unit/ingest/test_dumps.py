"""Dump files: format detection, every OTLP serialization (plain and gzip), JSONL dialects, failures."""

from __future__ import annotations

import gzip
import json
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import PRODUCERS
from tests.unit.ingest.test_otlp import collector_json, sdk_logs, sdk_traces
from wt_otel.ingest.dumps import (
    MAX_RECORD_BYTES,
    DumpFormatError,
    DumpReadError,
    LineError,
    detect_format,
    iso_to_ns,
    read_dump,
    sdk_span_id,
    sdk_trace_id,
)
from wt_otel.ingest.otlp import logs_from_request, spans_from_request
from wt_otel.model.spans import LogRecord, SpanRecord

AGENTS_FIXTURE = PRODUCERS / "agents-sdk-jsonl/trace.agents.jsonl"


def framed(*messages: Any) -> bytes:
    """The collector's `format: proto` stream: 4-byte big-endian length + message, repeated."""
    out = b""
    for msg in messages:
        data = msg if isinstance(msg, bytes) else msg.SerializeToString()
        out += len(data).to_bytes(4, "big") + data
    return out


def write(path: Path, data: bytes, gz: bool = False) -> Path:
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def jsonl(*objs: Any) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


@pytest.fixture(scope="module")
def otlp():
    traces, finished = sdk_traces()
    logs = sdk_logs(finished[1].context)
    return traces, logs, list(spans_from_request(traces)), list(logs_from_request(logs))


# --------------------------------------------------------------------------- OTLP round trips


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_otlp_json_lines(tmp_path, otlp, gz):
    traces, logs, spans, log_records = otlp
    body = jsonl(collector_json(traces), collector_json(logs))
    path = write(tmp_path / "traces.jsonl", body, gz)
    assert detect_format(path) == "otlp-json"
    assert list(read_dump(path)) == spans + log_records


def test_otlp_json_line_holding_spans_and_logs(tmp_path, otlp):
    traces, logs, spans, log_records = otlp
    both = {**collector_json(traces), **collector_json(logs)}
    path = write(tmp_path / "mixed.json", jsonl(both))
    assert list(read_dump(path)) == spans + log_records


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("suffix", [".pb", ".bin"])
def test_single_protobuf_message(tmp_path, otlp, gz, suffix):
    traces, _, spans, _ = otlp
    path = write(tmp_path / f"traces{suffix}", traces.SerializeToString(), gz)
    assert detect_format(path) == "otlp-proto"  # by name, or by the leading 0x0a
    assert list(read_dump(path)) == spans


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("with_ids", [True, False], ids=["span-ids", "no-ids"])
def test_single_logs_message(tmp_path, otlp, gz, with_ids):
    # Without ids a logs request also parses as a traces request (of id-less "spans"):
    # the reader must notice and read it as logs.
    logs = otlp[1] if with_ids else sdk_logs()
    path = write(tmp_path / "logs.pb", logs.SerializeToString(), gz)
    items = list(read_dump(path))
    assert items == list(logs_from_request(logs)) and len(items) == 2
    assert all(isinstance(i, LogRecord) for i in items)


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_length_prefixed_stream(tmp_path, otlp, gz):
    traces, logs, spans, log_records = otlp
    path = write(tmp_path / "stream.binpb", framed(traces, logs, traces), gz)
    assert detect_format(path) == "otlp-proto"
    assert list(read_dump(path)) == spans + log_records + spans


def test_length_prefixed_stream_detected_without_a_name_hint(tmp_path, otlp):
    traces, _, spans, _ = otlp
    path = write(tmp_path / "dump.data", framed(traces))
    assert detect_format(path) == "otlp-proto"
    assert list(read_dump(path)) == spans


def test_empty_protobuf_file_is_an_empty_request(tmp_path):
    path = write(tmp_path / "empty.pb", b"")
    assert detect_format(path) == "otlp-proto"
    assert list(read_dump(path)) == []


# --------------------------------------------------------------------------- protobuf failures


def test_truncated_single_message_is_a_line_error(tmp_path, otlp):
    traces, _, _, _ = otlp
    data = traces.SerializeToString()
    path = write(tmp_path / "cut.pb", data[: len(data) // 2])
    (item,) = read_dump(path)
    assert isinstance(item, LineError) and item.line == 1
    assert "not an OTLP ExportTraceServiceRequest" in item.message


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_truncated_stream_keeps_the_complete_messages(tmp_path, otlp, gz):
    traces, _, spans, _ = otlp
    data = framed(traces, traces)
    path = write(tmp_path / "cut.binpb", data[:-10], gz)
    items = list(read_dump(path))
    assert items[: len(spans)] == spans
    (error,) = items[len(spans) :]
    assert isinstance(error, LineError) and error.line == 2 and "truncated message" in error.message


def test_oversized_stream_message_is_skipped(tmp_path, otlp):
    traces, logs, spans, log_records = otlp
    small = len(logs.SerializeToString())
    assert len(traces.SerializeToString()) > small
    path = write(tmp_path / "s.binpb", framed(logs, traces, logs))
    items = list(read_dump(path, max_record_bytes=small))
    assert items[: len(log_records)] == log_records and items[-len(log_records) :] == log_records
    (error,) = [i for i in items if isinstance(i, LineError)]
    assert error.line == 2 and "exceeds" in error.message


def test_garbage_message_in_stream(tmp_path, otlp):
    traces, _, spans, _ = otlp
    path = write(tmp_path / "s.binpb", framed(b"\xff\xff\xff", traces))
    items = list(read_dump(path))
    assert isinstance(items[0], LineError) and items[0].line == 1
    assert items[1:] == spans


# --------------------------------------------------------------------------- JSON line failures


def test_invalid_json_line_in_the_middle(tmp_path, otlp):
    traces, _, spans, _ = otlp
    line = json.dumps(collector_json(traces)).encode()
    path = write(tmp_path / "t.jsonl", line + b"\n\n{not json\n" + line + b"\n")
    items = list(read_dump(path))
    errors = [i for i in items if isinstance(i, LineError)]
    assert len(errors) == 1 and errors[0].line == 3 and "invalid JSON" in errors[0].message
    assert [i for i in items if not isinstance(i, LineError)] == spans + spans
    assert str(errors[0]).startswith(f"{path}:3: ")


def test_wrong_shape_line_is_all_or_nothing(tmp_path, otlp):
    traces, _, spans, _ = otlp
    good = collector_json(traces)
    bad = collector_json(traces)
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"] = "nope"
    path = write(tmp_path / "t.jsonl", jsonl(good, bad, [1, 2], {"other": 1}, good))
    items = list(read_dump(path, "otlp-json"))
    errors = [i for i in items if isinstance(i, LineError)]
    assert [e.line for e in errors] == [2, 3, 4]
    assert "resourceSpans[0].scopeSpans[0].spans[1].spanId: not a hex or base64 id" in errors[0].message
    assert "expected resourceSpans or resourceLogs" in errors[1].message
    assert [i for i in items if not isinstance(i, LineError)] == spans + spans


def test_gzip_bomb_line_is_skipped_with_bounded_memory(tmp_path, otlp):
    traces, _, spans, _ = otlp
    line = json.dumps(collector_json(traces)).encode() + b"\n"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip container
    zeros = b"0" * (1 << 20)
    parts = [comp.compress(line)]
    parts += [comp.compress(zeros) for _ in range(200)]  # 200 MiB on one line
    parts += [comp.compress(b"\n" + line), comp.flush()]
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(b"".join(parts))
    assert path.stat().st_size < 1 << 20
    assert detect_format(path) == "otlp-json"
    tracemalloc.start()
    try:
        items = list(read_dump(path, max_record_bytes=1 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"peak {peak >> 20} MiB"
    (error,) = [i for i in items if isinstance(i, LineError)]
    assert error.line == 2 and "longer than 1048576 bytes" in error.message
    assert [i for i in items if not isinstance(i, LineError)] == spans + spans


def test_default_record_cap():
    assert MAX_RECORD_BYTES == 64 * 1024 * 1024


def test_truncated_gzip_raises_read_error(tmp_path, otlp):
    traces, _, _, _ = otlp
    data = gzip.compress(jsonl(*[collector_json(traces)] * 50))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) - 200])
    with pytest.raises(DumpReadError, match="cannot read"):
        list(read_dump(path, "otlp-json"))


# --------------------------------------------------------------------------- detection failures


def test_unknown_format_lists_the_supported_ones(tmp_path):
    path = write(tmp_path / "notes.txt", b"hello world\n")
    with pytest.raises(DumpFormatError) as info:
        detect_format(path)
    for name in ("otlp-json", "otlp-proto", "agents-jsonl", "generic-jsonl", "wtin"):
        assert name in str(info.value)
    with pytest.raises(DumpFormatError):
        read_dump(path)
    unknown_json = write(tmp_path / "x.jsonl", jsonl({"hello": 1}))
    with pytest.raises(DumpFormatError, match="cannot detect"):
        detect_format(unknown_json)
    with pytest.raises(DumpFormatError, match="an empty file: no telemetry was written to it") as empty:
        detect_format(write(tmp_path / "empty.jsonl", b""))
    assert "force_flush" in str(empty.value) and "Supported" not in str(empty.value)
    with pytest.raises(DumpFormatError, match="unknown dump format 'csv'"):
        read_dump(path, "csv")


def test_detection_skips_a_corrupt_first_line(tmp_path, otlp):
    traces, _, spans, _ = otlp
    path = write(tmp_path / "t.jsonl", b"{oops\n" + jsonl(collector_json(traces)))
    assert detect_format(path) == "otlp-json"


def test_missing_file_raises_at_call_time(tmp_path):
    with pytest.raises(DumpReadError, match="cannot open"):
        read_dump(tmp_path / "absent.jsonl", "otlp-json")
    with pytest.raises(DumpReadError):
        detect_format(tmp_path / "absent.jsonl")


def test_wtin_is_detected_but_not_read_here(tmp_path):
    envelope = b'{\n  "windtunnel_interchange": 1,\n  "messages": []\n}\n'
    by_name = write(tmp_path / "case.wtin.json", envelope)
    by_content = write(tmp_path / "case.json", envelope, gz=True)
    assert detect_format(by_name) == "wtin" and detect_format(by_content) == "wtin"
    with pytest.raises(ValueError, match="envelope"):
        read_dump(by_name)


# --------------------------------------------------------------------------- Agents SDK JSONL

T1 = "trace_0123456789abcdef0123456789abcdef"
AGENTS = [
    {  # the span comes before its trace record
        "object": "trace.span",
        "id": "span_aaaaaaaaaaaaaaaaaaaaaaaa",
        "trace_id": T1,
        "parent_id": "span_bbbbbbbbbbbbbbbbbbbbbbbb",
        "started_at": "2025-03-11T12:00:01.123456+00:00",
        "ended_at": "2025-03-11T12:00:02.5+00:00",
        "span_data": {
            "type": "function",
            "name": "client_lookup",
            "input": '{"q": "Bluewing"}',
            "output": "ok",
        },
        "error": {"message": "Error running tool", "data": {"tool_name": "client_lookup"}},
    },
    {"object": "trace", "id": T1, "workflow_name": "crm", "group_id": "conv-1", "metadata": {"tier": "gold"}},
    {
        "object": "trace.span",
        "id": "span_bbbbbbbbbbbbbbbbbbbbbbbb",
        "trace_id": T1,
        "parent_id": None,
        "started_at": "2025-03-11T12:00:00+00:00",
        "ended_at": None,
        "span_data": {"type": "agent", "name": "CRM", "tools": ["client_lookup"]},
        "error": None,
    },
    {
        "object": "trace.span",
        "id": "s9",
        "trace_id": "other-trace",
        "span_data": {"type": "mcp_tools", "server": "x"},
    },
    {"object": "trace.span", "id": "s10", "trace_id": T1},
    {"object": "response", "id": "x"},
]


def test_agents_jsonl(tmp_path):
    path = write(tmp_path / "run.jsonl", jsonl(*AGENTS))
    assert detect_format(path) == "agents-jsonl"
    items = list(read_dump(path))
    errors = [i for i in items if isinstance(i, LineError)]
    assert [(e.line, e.message[:9]) for e in errors] == [(5, "span_data"), (6, "object: e")]
    spans = {s.name: s for s in items if isinstance(s, SpanRecord)}
    assert set(spans) == {"function", "agent", "mcp_tools"}
    fn, agent, orphan = spans["function"], spans["agent"], spans["mcp_tools"]
    assert fn.trace_id == agent.trace_id == "0123456789abcdef0123456789abcdef"
    assert len(fn.span_id) == 16 and fn.parent_span_id == agent.span_id and agent.parent_span_id is None
    assert fn.attributes["openai_agents.span_data"] == AGENTS[0]["span_data"]
    for span in (fn, agent):
        assert span.attributes["openai_agents.workflow_name"] == "crm"
        assert span.attributes["openai_agents.group_id"] == "conv-1"
        assert span.attributes["openai_agents.trace_metadata"] == {"tier": "gold"}
    assert fn.attributes["openai_agents.span_id"] == "span_aaaaaaaaaaaaaaaaaaaaaaaa"
    assert (fn.status_code, fn.status_message) == ("ERROR", "Error running tool")
    assert agent.status_code == "UNSET"
    assert fn.start_ns == iso_to_ns("2025-03-11T12:00:01.123456Z", "t") and fn.end_ns - fn.start_ns == 1_376_544_000
    assert agent.end_ns == 0
    # a span whose trace record never arrives is still emitted, without trace fields
    assert orphan.attributes["openai_agents.workflow_name"] is None and len(orphan.trace_id) == 32


def test_agents_sdk_fixture_from_the_real_sdk():
    items = list(read_dump(AGENTS_FIXTURE))
    assert items and not [i for i in items if isinstance(i, LineError)]
    spans = [i for i in items if isinstance(i, SpanRecord)]
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    assert len(by_id) == len(spans)
    for span in spans:
        assert span.parent_span_id is None or (span.trace_id, span.parent_span_id) in by_id
        assert span.attributes["openai_agents.workflow_name"]
        assert span.name == span.attributes["openai_agents.span_data"]["type"]
        assert 0 < span.start_ns <= span.end_ns
    assert {"agent", "generation", "function"} <= {s.name for s in spans}
    lines = AGENTS_FIXTURE.read_text().splitlines()
    assert len(spans) == sum('"object": "trace.span"' in line for line in lines)


def test_id_mapping_is_deterministic():
    assert sdk_trace_id(T1) == T1.removeprefix("trace_")
    assert sdk_trace_id("trace_ABCDEF0123456789abcdef0123456789") == "abcdef0123456789abcdef0123456789"
    hashed = sdk_trace_id("run-7")
    assert len(hashed) == 32 and hashed == sdk_trace_id("run-7") != sdk_trace_id("run-8")
    assert sdk_span_id("span_0123456789abcdef", "t") == "0123456789abcdef"
    assert sdk_span_id("s1", "t1") != sdk_span_id("s1", "t2")
    assert len(sdk_span_id("span_aaaaaaaaaaaaaaaaaaaaaaaa", "t")) == 16


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1970-01-01T00:00:01Z", 1_000_000_000),
        ("1970-01-01T00:00:01.000000123Z", 1_000_000_123),
        ("1970-01-01T02:00:00+02:00", 0),
        ("1970-01-01 00:00:00.5", 500_000_000),
        (None, 0),
    ],
)
def test_iso_to_ns(text, ns):
    assert iso_to_ns(text, "started_at") == ns


def test_iso_to_ns_rejects_garbage():
    with pytest.raises(ValueError, match="started_at: not an ISO 8601"):
        iso_to_ns("yesterday", "started_at")


# --------------------------------------------------------------------------- generic JSONL


def generic(**fields: Any) -> dict[str, Any]:
    return {"trace_id": "run-1", "workflow_name": "refunds", "span_id": "s1", "type": "agent", **fields}


def test_generic_jsonl(tmp_path):
    lines = [
        generic(name="Refunder", group_id="g1", trace_metadata={"user": "u1"}, started_at="2025-01-01T00:00:00Z"),
        generic(span_id="s2", parent_id="s1", type="tool", name="lookup_order", input={"id": 7}, output="ok"),
        generic(span_id="s3", parent_id="s1", type="function", name="refund", error={"message": "denied"}),
        generic(span_id="s4", type="generation", trace_metadata={"user": "ignored"}, group_id="g1"),
        generic(trace_id="run-2", workflow_name="other", span_id="s1", type="custom", name="note", data={}),
    ]
    path = write(tmp_path / "good.jsonl", jsonl(*lines))
    assert detect_format(path) == "generic-jsonl"
    items = list(read_dump(path))
    assert all(isinstance(i, SpanRecord) for i in items) and len(items) == 5
    agent, tool, fn, gen, other = items
    assert [s.name for s in items] == ["agent", "tool", "function", "generation", "custom"]
    assert agent.trace_id == tool.trace_id != other.trace_id and tool.parent_span_id == agent.span_id
    assert agent.span_id != other.span_id  # same raw "s1", different trace
    assert tool.attributes["generic.record"] == lines[1]
    assert tool.attributes["generic.workflow_name"] == "refunds" and tool.attributes["generic.group_id"] == "g1"
    assert gen.attributes["generic.trace_metadata"] == {"user": "u1"}  # from the first record
    assert (fn.status_code, fn.status_message) == ("ERROR", "denied")
    assert agent.start_ns == 1_735_689_600_000_000_000


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            generic(span_id="s2", workflow_name="payments"),
            "workflow_name: 'payments' differs from 'refunds' on line 1",
        ),
        (generic(span_id="s2", group_id="g2"), "group_id: 'g2' differs from 'g1'"),
        (
            {"trace_id": "run-1", "workflow_name": "refunds", "type": "agent"},
            "span_id: must be a non-empty string",
        ),
        (generic(type="llm"), "type: 'llm' is not one of"),
        (generic(type="guardrail", name="pii"), "triggered"),
        (generic(type="custom"), "name: must be a non-empty string"),
        (generic(metadata=[1]), "metadata: must be a JSON object"),
        (generic(started_at="noon"), "started_at: not an ISO 8601"),
        (generic(parent_id=5), "parent_id: must be a string"),
    ],
)
def test_generic_jsonl_violations(tmp_path, bad, message):
    path = write(tmp_path / "bad.jsonl", jsonl(generic(group_id="g1"), bad, generic(span_id="s3")))
    items = list(read_dump(path, "generic-jsonl"))
    errors = [i for i in items if isinstance(i, LineError)]
    assert len(errors) == 1 and errors[0].line == 2 and message in errors[0].message, errors
    assert sum(isinstance(i, SpanRecord) for i in items) == 2


def test_contract_a_is_recognised_without_importing_its_models(tmp_path):
    """`detect_format` knows Contract A by the contract's own suffix and version key (kept in dumps.py so that
    `wt-otel import` does not import the envelope's models at start), and a fresh interpreter reading a dump
    does not import them."""
    import subprocess
    import sys

    from wt_otel.contracts import envelope
    from wt_otel.ingest import dumps

    assert dumps.WTIN_SUFFIX == envelope.SUFFIX
    key = f'"{envelope.VERSION_KEY}"'.encode()
    assert key == dumps._WTIN_KEY
    named, sniffed = tmp_path / f"a{envelope.SUFFIX}", tmp_path / "b.json"
    named.write_text("{}")
    sniffed.write_text(json.dumps({envelope.VERSION_KEY: 1, "messages": []}))
    assert dumps.detect_format(named) == dumps.detect_format(sniffed) == "wtin"
    code = ("import sys; from wt_otel.ingest import dumps; dumps.detect_format(sys.argv[1]); "
            "print('wt_otel.contracts.envelope' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(sniffed)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
