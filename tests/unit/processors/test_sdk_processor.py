"""The in-app path: a real OTel SDK TracerProvider with WtOtelSpanProcessor writes session files."""

from __future__ import annotations

import json

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from tests.support.livehelpers import run_agent
from tests.support.spans import assistant, chat_span, user
from wt_otel.exporters.datadir import read_index
from wt_otel.processors.sdk import WtOtelSpanProcessor, span_to_record


def test_sdk_spans_become_session_files(tmp_path):
    written = []
    processor = WtOtelSpanProcessor(tmp_path / "data", on_written=written.append, tick_interval=0.05)
    provider = TracerProvider(resource=Resource.create({"service.name": "in-app"}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    run_agent(tracer, incident="INC-3")
    run_agent(tracer)
    provider.shutdown()  # flushes the open sessions
    entries = read_index(tmp_path / "data").entries
    assert len(entries) == 2 and len(written) == 2
    flagged = next(e for e in entries if e["flagged"])
    assert flagged["flag_ref"] == "INC-3" and flagged["slug"] == "inc-3" and flagged["service"] == "in-app"
    assert all(e["complete"] for e in entries)
    env = json.loads((tmp_path / "data" / flagged["path"] / "incident.wtin.json").read_text())
    assert [m["role"] for m in env["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert env["witnessed_calls"][0]["args"] == {"city": "Oslo"} and env["source"]["ref"] == "INC-3"
    assert processor.metrics.get("wt_otel_records_dropped_total", reason="not_genai") == 2


def test_force_flush_writes_and_a_late_span_makes_revision_2(tmp_path):
    processor = WtOtelSpanProcessor(tmp_path, tick_interval=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}) as root:
        chat_span(tracer, inputs=[user("hi")], outputs=[assistant("hello")])
        assert provider.force_flush()
        assert [e["revision"] for e in read_index(tmp_path).entries] == [1]
        assert not read_index(tmp_path).entries[0]["complete"]  # the root has not ended yet
        root.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    entries = read_index(tmp_path).entries
    assert [e["revision"] for e in entries] == [1, 2] and entries[1]["complete"]
    assert entries[0]["slug"] == entries[1]["slug"]


def test_span_to_record_converts_ids_arrays_events_links_status(tmp_path):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Link

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("scope-x", "1.2")
    with (tracer.start_as_current_span("parent") as parent,
          tracer.start_as_current_span("child", links=[Link(parent.get_span_context(), {"k": "v"})],
                                       attributes={"arr": ["a", "b"]}) as child):
        child.add_event("gen_ai.choice", {"index": 0})
        child.set_status(Status(StatusCode.ERROR, "bad"))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    rec = span_to_record(spans["child"])
    par = span_to_record(spans["parent"])
    assert len(rec.trace_id) == 32 and len(rec.span_id) == 16 and rec.parent_span_id == par.span_id
    assert par.parent_span_id is None and rec.attributes["arr"] == ["a", "b"]
    assert rec.events[0].name == "gen_ai.choice" and rec.events[0].attributes == {"index": 0}
    assert rec.links[0].span_id == par.span_id and rec.links[0].attributes == {"k": "v"}
    assert (rec.status_code, rec.status_message) == ("ERROR", "bad") and rec.kind == "INTERNAL"
    assert rec.resource["service.name"] == "svc" and (rec.scope_name, rec.scope_version) == ("scope-x", "1.2")
    assert rec.end_ns >= rec.start_ns > 0
