"""Two incidents flagged in one conversation are two sessions (issue 12: `INC-ME-2` disappeared into
`inc-me-1 (revision 2, … flagged INC-ME-1)`). Nothing a user flagged may vanish."""

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

from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.server import Server


def turn(conversation: str, user: str, answer: str, incident: str) -> bytes:
    """One turn of a chat conversation as its own trace (GenAI semconv), flagged with `wt.incident`."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "me-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": user}]}])
    output = json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}],
                          "finish_reason": "stop"}])
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": conversation, "wt.incident": incident}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
            "gen_ai.conversation.id": conversation, "gen_ai.input.messages": messages,
            "gen_ai.output.messages": output}
    with tracer.start_as_current_span("invoke_agent me-bot", attributes=agent), \
            tracer.start_as_current_span("chat m", attributes=chat):
        pass
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def post(url: str, body: bytes) -> None:
    request = urllib.request.Request(url + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def wait_written(server: Server, n: int) -> None:
    deadline = time.monotonic() + 15
    while server.metrics.get("wt_otel_sessions_written_total") < n:
        assert time.monotonic() < deadline, "sessions not written"
        time.sleep(0.05)


def test_a_second_incident_on_a_written_conversation_is_its_own_session(tmp_path: Path) -> None:
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=tmp_path, assembler=AssemblerConfig(idle_timeout=0.3, grace=0.1))
    lines: list[str] = []
    server = Server(config, emit=lines.append).start()
    try:
        assert server.http_url
        post(server.http_url, turn("conv-me", "Where is A-1?", "It shipped.", "INC-ME-1"))
        wait_written(server, 1)
        post(server.http_url, turn("conv-me", "And A-2?", "It is lost.", "INC-ME-2"))
        wait_written(server, 3)  # revision 2 of INC-ME-1's session, and INC-ME-2's own session
    finally:
        server.stop()
    latest = {e["key"]: e for e in read_index(tmp_path).entries}
    refs = sorted(e["flag_ref"] for e in latest.values() if e["flagged"])
    assert refs == ["INC-ME-1", "INC-ME-2"], latest
    assert len({e["slug"] for e in latest.values()}) == 2
    assert any("flagged INC-ME-2" in line for line in lines), lines


def test_import_of_a_conversation_flagged_twice_writes_two_scenarios(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from wt_otel.cli import main

    for n, (user, answer, ref) in enumerate((("Where is A-1?", "It shipped.", "INC-ME-1"),
                                             ("And A-2?", "It is lost.", "INC-ME-2"))):
        (tmp_path / f"turn-{n}.pb").write_bytes(turn("conv-me", user, answer, ref))
    res = CliRunner().invoke(main, ["import", str(tmp_path / "turn-0.pb"), str(tmp_path / "turn-1.pb"),
                                    "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    refs = sorted(json.loads((d / "incident.wtin.json").read_text())["source"]["ref"]
                  for d in (tmp_path / "out").iterdir())
    assert refs == ["INC-ME-1", "INC-ME-2"]
