"""Content capture off (issue 12): said once per service with the setting that turns it on, in the log,
/metrics and IMPORTED.md; a flagged session with no conversation is not replayed."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ReplayConfig, ServeConfig
from wt_otel.serve.replay_queue import QUEUE_FILE, read_events
from wt_otel.serve.server import Server


def no_content_request(service: str, incident: str) -> bytes:
    """What the official openai-v2 instrumentation emits by default: a chat span with no message content."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.openai_v2")
    agent = {"gen_ai.operation.name": "invoke_agent", "wt.incident": incident}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 12}
    with tracer.start_as_current_span("invoke_agent order-bot", attributes=agent), \
            tracer.start_as_current_span("chat gpt-4o-mini", attributes=chat):
        pass
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def test_capture_off_is_said_per_service_and_the_incident_is_not_replayed(tmp_path: Path) -> None:
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=tmp_path, assembler=AssemblerConfig(idle_timeout=0.3, grace=0.1),
                         replay=ReplayConfig(enabled=True, inject_url="http://127.0.0.1:1"))
    lines: list[str] = []
    warnings: list[str] = []
    server = Server(config, emit=lines.append, warn=warnings.append).start()
    try:
        assert server.http_url
        for incident in ("INC-NC-1", "INC-NC-2"):
            assert post(server.http_url, no_content_request("order-bot", incident)) == 200
        deadline = time.monotonic() + 15
        while (server.metrics.get("wt_otel_sessions_written_total") < 2
               or server.metrics.get("wt_otel_replay_skipped_total", reason="no_conversation") < 2) \
                and time.monotonic() < deadline:  # the replay stage runs once the index line is in
            time.sleep(0.05)
        metrics = server.metrics
        assert metrics.get("wt_otel_sessions_without_content_total", service="order-bot") == 2
        hints = [w for w in warnings if w.startswith("service ")]
        assert len(hints) == 1, warnings  # once per service
        assert "service order-bot" in hints[0] and "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in hints[0]
        assert 'wt_otel_sessions_without_content_total{service="order-bot"} 2' in metrics.render()
        assert metrics.get("wt_otel_replay_skipped_total", reason="no_conversation") == 2
        assert metrics.get("wt_otel_replays_queued_total") == 0
        assert sum("NOT queued for replay: no conversation to replay" in w for w in warnings) == 2
    finally:
        server.stop()
    assert not (tmp_path / "scenarios").exists() or not any((tmp_path / "scenarios").iterdir())
    refused = [e for e in read_events(tmp_path / QUEUE_FILE)[0] if e["event"] == "refused"]
    assert {e["ref"] for e in refused} == {"INC-NC-1", "INC-NC-2"}
    assert all("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in e["reason"] for e in refused)
    imported = [p.read_text() for p in (tmp_path / "sessions").glob("*/IMPORTED.md")]
    assert len(imported) == 2 and all("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in t for t in imported)
