"""One GenAI key table: the rotel hooks and serve's filter decide "is this GenAI?" alike.

The table lives in `wt_otel.ingest.keys` (standard library only, because rotel runs the hooks in
its embedded Debian python3.11). These tests feed the same records, made by the real producer
libraries (tests/fixtures/producers), to both and compare record by record and batch by batch.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import rotel_objects as ro
from wt_otel.ingest import keys
from wt_otel.ingest.dumps import LineError, detect_format, read_dump
from wt_otel.model.spans import LogRecord, SpanRecord
from wt_otel.processors import rotel
from wt_otel.processors.genai_filter import GenAIFilter, is_genai

PRODUCERS = Path(__file__).resolve().parents[2] / "fixtures" / "producers"
DUMPS = sorted(p for p in PRODUCERS.glob("*/*") if p.suffix in (".jsonl", ".pb") and p.parent.name != "_common")
ROOT = Path(__file__).resolve().parents[3]


def records(path: Path) -> list[SpanRecord | LogRecord]:
    out = [r for r in read_dump(path, detect_format(path)) if not isinstance(r, LineError)]
    assert out, f"{path}: no records"
    return out


def rotel_says(record: SpanRecord | LogRecord) -> bool:
    if isinstance(record, SpanRecord):
        return rotel.RotelGenAIProcessor.span_is_genai(ro.span(record))
    standin = ro.log(record)
    return rotel.RotelGenAIProcessor._log_is_genai(standin, standin.attributes)


def test_the_producer_fixtures_are_there():
    assert len(DUMPS) >= 10


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rotel_and_the_filter_classify_every_record_of_a_real_dump_alike(dump):
    recs = records(dump)
    disagree = [(r.name if isinstance(r, SpanRecord) else r.event_name, is_genai(r), rotel_says(r))
                for r in recs if is_genai(r) != rotel_says(r)]
    assert not disagree
    assert any(is_genai(r) for r in recs)


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rotel_dropping_keeps_exactly_the_spans_the_filter_keeps(dump):
    spans = [r for r in records(dump) if isinstance(r, SpanRecord) and r.trace_id]
    if not spans:
        pytest.skip("a logs-only dump")
    kept_by_filter = {s.span_id for s in GenAIFilter(next=None).filter(spans)}  # type: ignore[arg-type]
    batch = ro.ResourceSpans([ro.ScopeSpans([ro.span(s) for s in spans])])
    rotel.RotelGenAIProcessor(rotel.Settings(drop_non_genai=True), sdk=ro.SDK).process_spans(batch)
    kept_by_rotel = {s.span_id.hex() for s in batch.scope_spans[0].spans}
    assert kept_by_rotel == kept_by_filter


# keys the two tables used to disagree on, and one of every entry of the shared table
@pytest.mark.parametrize("key", sorted({"tool.name", "generic.kind", "events", "incident.id", "input.value",
                                        *keys.GENAI_KEYS, *(p + "x" for p in keys.GENAI_KEY_PREFIXES)}))
def test_every_key_of_the_table_is_genai_for_both(key):
    record = SpanRecord(trace_id="01" * 16, span_id="02" * 8, name="anything", attributes={key: "x"})
    assert is_genai(record) and rotel_says(record)


@pytest.mark.parametrize("record", [
    SpanRecord(trace_id="01" * 16, span_id="02" * 8, name="GET /health", attributes={"http.method": "GET"}),
    SpanRecord(trace_id="01" * 16, span_id="02" * 8, name="db", attributes={"wt.pipeline": "rotel"}),
    LogRecord(trace_id="01" * 16, event_name="app.started", attributes={"event.name": "app.started"}),
], ids=["http", "wt-tag-only", "app-log"])
def test_plain_telemetry_is_not_genai_for_either(record):
    assert not is_genai(record) and not rotel_says(record)


def test_span_events_and_log_event_names_count_for_both():
    span = SpanRecord(trace_id="01" * 16, span_id="02" * 8, name="llm")
    span.events.append(__import__("wt_otel.model.spans", fromlist=["Event"]).Event(name="gen_ai.content.prompt"))
    log = LogRecord(trace_id="01" * 16, attributes={"event.name": "gen_ai.choice"})
    assert is_genai(span) and rotel_says(span)
    assert is_genai(log) and rotel_says(log)


def test_rotel_loads_the_table_without_pydantic_or_protobuf():
    """rotel's interpreter has only the standard library: importing the hooks must not pull the core in."""
    code = ("import sys; import wt_otel.processors.rotel as r; "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'google', 'opentelemetry', 'yaml', 'orjson', 'grpc', 'click')); "
            "print(','.join(heavy)); assert r.is_genai_key('gen_ai.system')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""
