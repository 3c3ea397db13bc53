"""Replay targets per service (issue 12: the sample's support-agent incident was replayed against an unrelated
order bot). Incidents of a service with no target are kept and reported, never replayed against another agent."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ReplayConfig, ReplayTarget, ServeConfig
from wt_otel.serve.replay_queue import QUEUE_FILE, read_events
from wt_otel.serve.server import Server


def incident(service: str, ref: str) -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "finish_reason": "stop",
                                                   "parts": [{"type": "text", "content": "hello"}]}])}
    with tracer.start_as_current_span(f"invoke_agent {service}", attributes={
            "gen_ai.operation.name": "invoke_agent", "wt.incident": ref}), \
            tracer.start_as_current_span("chat m", attributes=chat):
        pass
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def run_serve(tmp_path: Path, replay: ReplayConfig, incidents: list[tuple[str, str]]) -> tuple[Server, list[str]]:
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=tmp_path, assembler=AssemblerConfig(idle_timeout=0.3, grace=0.1), replay=replay)
    warnings: list[str] = []
    server = Server(config, emit=lambda _: None, warn=warnings.append).start()
    try:
        assert server.http_url
        for service, ref in incidents:
            request = urllib.request.Request(server.http_url + "/v1/traces", data=incident(service, ref),
                                             headers={"Content-Type": "application/x-protobuf"})
            urllib.request.urlopen(request, timeout=10).close()
        deadline = time.monotonic() + 15
        while server.metrics.get("wt_otel_sessions_written_total") < len(incidents):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        server.stop(grace=0)
    return server, warnings


def test_an_incident_of_a_service_without_a_target_is_kept_and_reported(tmp_path: Path) -> None:
    replay = ReplayConfig(enabled=True, inject_url="http://127.0.0.1:1", services=["order-bot"], stop_timeout=0)
    server, warnings = run_serve(tmp_path, replay, [("support-agent", "INC-S-1"), ("order-bot", "INC-O-1")])
    events = read_events(tmp_path / QUEUE_FILE)[0]
    enqueued = {e["ref"]: e for e in events if e["event"] == "enqueued"}
    refused = {e["ref"]: e for e in events if e["event"] == "refused"}
    assert set(enqueued) == {"INC-O-1"} and enqueued["INC-O-1"]["target"] == "default"
    assert "no replay target for service support-agent" in refused["INC-S-1"]["reason"]
    assert server.metrics.get("wt_otel_replay_skipped_total", reason="no_target") == 1
    assert any("incident INC-S-1 NOT replayed: no replay target for service support-agent" in w for w in warnings)
    assert (tmp_path / "sessions").is_dir() and len(list((tmp_path / "sessions").iterdir())) == 2  # both kept


def test_no_service_named_replays_nothing_and_targets_route_by_service(tmp_path: Path) -> None:
    unnamed = ReplayConfig(enabled=True, inject_url="http://127.0.0.1:1", stop_timeout=0)
    server, _ = run_serve(tmp_path / "a", unnamed, [("order-bot", "INC-O-2")])
    assert server.metrics.get("wt_otel_replay_skipped_total", reason="no_target") == 1
    routed = ReplayConfig(enabled=True, inject_url="http://127.0.0.1:1", services=["order-*"], stop_timeout=0,
                          targets=[ReplayTarget(services=["support-agent"], inject_url="http://127.0.0.1:2",
                                                universe_port=0, llm_port=0)])
    run_serve(tmp_path / "b", routed, [("support-agent", "INC-S-2"), ("order-bot", "INC-O-3")])
    enqueued = {e["ref"]: e["target"] for e in read_events(tmp_path / "b" / QUEUE_FILE)[0] if e["event"] == "enqueued"}
    assert enqueued == {"INC-S-2": "target-1", "INC-O-3": "default"}
