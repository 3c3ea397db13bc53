"""A thumbs-down sent as its own span, carrying only the session's key (`session.id`, or another key import joins
on), flags that session in serve as it does in `wt-otel import` (issue 30 item 8).

Before, the GenAI filter dropped the feedback span (no GenAI key, a trace of its own), silently. The spans are
made by the real OTel SDK and posted to a real serve over OTLP/HTTP, as JSON (decoded) and as protobuf (the span
index's path, sessions kept by reference).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.producers import encode_spans, to_otlp_json
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import load_serve_config
from wt_otel.serve.server import Server


def requests(key: str) -> list[bytes | str]:
    """One chat session whose spans carry `key`, then a feedback span in a trace of its own (one per request)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "fb-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("wt-otel-tests")
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x", key: "S-1",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "finish_reason": "stop",
                                                   "parts": [{"type": "text", "content": "wrong"}]}])}
    with (tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                      key: "S-1"}),
          tracer.start_as_current_span("chat gpt-x", attributes=chat)):
        pass
    with tracer.start_as_current_span("user feedback", attributes={key: "S-1", "user.feedback": "thumbs_down"}):
        pass
    provider.shutdown()
    return [encode_spans([span]) for span in exporter.get_finished_spans()]


def _post(server: Server, request, encoding: str) -> None:
    """One export request to serve, as OTLP/JSON or protobuf."""
    if encoding == "json":
        body, kind = json.dumps(to_otlp_json(request)).encode(), "application/json"
    else:
        body, kind = request.SerializeToString(), "application/x-protobuf"
    req = urllib.request.Request(server.http_url + "/v1/traces", data=body, headers={"Content-Type": kind})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


@pytest.mark.parametrize("encoding", ["json", "protobuf"])
@pytest.mark.parametrize("key", ["session.id", "langfuse.session.id"])
def test_a_thumbs_down_keyed_by_the_session_id_alone_flags_the_session(tmp_path: Path, key: str,
                                                                       encoding: str) -> None:
    config = load_serve_config(None, {"data_dir": str(tmp_path), "receivers.grpc_endpoint": "none",
                                      "receivers.http_endpoint": "127.0.0.1:0", "datadir.workers": 0})
    server = Server(config, quiet=True).start()
    try:
        for request in requests(key):
            _post(server, request, encoding)
    finally:
        server.stop()
    [entry] = read_index(tmp_path).latest().values()
    assert entry["flagged"] is True, entry
    assert entry["flag_reason"] == "negative-feedback: user.feedback='thumbs_down'"
    assert len(entry["trace_ids"]) == 2  # the feedback's own trace joined the session it names


@pytest.mark.parametrize("encoding", ["json", "protobuf"])
def test_a_thumbs_down_after_the_session_was_written_flags_its_next_revision(tmp_path: Path, encoding: str) -> None:
    """The usual order: the answer, the session written (kept by reference), then the user's thumbs-down."""
    config = load_serve_config(None, {"data_dir": str(tmp_path), "receivers.grpc_endpoint": "none",
                                      "receivers.http_endpoint": "127.0.0.1:0", "datadir.workers": 0,
                                      "assembler.idle_timeout": 0.3, "assembler.grace": 0.1})
    server = Server(config, quiet=True).start()
    *session, feedback = requests("session.id")
    try:
        for request in session:
            _post(server, request, encoding)
        deadline = time.monotonic() + 10
        while not read_index(tmp_path).latest():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [first] = read_index(tmp_path).latest().values()
        assert first["flagged"] is False
        _post(server, feedback, encoding)
        while not next(iter(read_index(tmp_path).latest().values()))["flagged"]:
            assert time.monotonic() < deadline + 10
            time.sleep(0.05)
    finally:
        server.stop()
    [entry] = read_index(tmp_path).latest().values()
    assert entry["key"] == first["key"] and entry["revision"] > first["revision"]
    assert entry["flag_reason"] == "negative-feedback: user.feedback='thumbs_down'" and entry["rendered"] is True
