"""One session store (issue 30 item 8): with a real `wt-otel serve` running on the data dir, keeping an
unflagged session by reference (its default), every reader sees the session and `wt-otel flag` works.

Before: `surface drift --data-dir` said "no sessions" (it opened rendered files by itself) and `wt-otel flag`
exited 1 ("in use by another wt-otel process": serve holds the data dir's lock). Now the readers go through
`SessionStore` (exporters/store.py), which renders a kept session in memory, and `flag` hands a request to
the running serve, which flags (renders) the session at its next tick.

The spans are made by the real OTel SDK and exported as OTLP/HTTP protobuf by its own exporter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.e2e.test_e2e_serve import Serve
from wt_otel.exporters.datadir import read_index


def export_session(http_url: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "store-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=http_url + "/v1/traces")))
    tracer = provider.get_tracer("wt-otel-tests")
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x", "session.id": "S-42",
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "finish_reason": "stop",
                                                   "parts": [{"type": "text", "content": "hello"}]}])}
    with (tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}),
          tracer.start_as_current_span("chat gpt-x", attributes=chat)):
        pass
    provider.shutdown()


def wt(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wt_otel.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_readers_and_flag_while_serve_keeps_the_session_by_reference(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = Serve(data, "--session-idle-timeout", "0.5")
    try:
        export_session(serve.http)
        deadline = time.monotonic() + 20
        while not (entries := read_index(data).latest()):
            assert time.monotonic() < deadline, serve.out
            time.sleep(0.1)
        [entry] = entries.values()
        assert entry["rendered"] is False and isinstance(entry["segments"], list)  # kept by reference
        slug = entry["slug"]

        listed = wt("sessions", "list", "--data-dir", str(data), "--format", "json")
        assert listed.returncode == 0, listed.stderr
        assert [(s["slug"], s["kept"]) for s in json.loads(listed.stdout)] == [(slug, "reference")]

        drift = wt("surface", "drift", "--data-dir", str(data))
        assert drift.returncode == 0, drift.stdout + drift.stderr
        assert "STABLE store-agent: 1 session(s), 1 surface version(s)" in drift.stdout

        flagged = wt("flag", slug, "--ref", "INC-42", "--data-dir", str(data), "--wait", "20")
        assert flagged.returncode == 0, flagged.stdout + flagged.stderr
        assert "by the running serve" in flagged.stdout
        latest = read_index(data).latest()[entry["key"]]
        assert latest["flagged"] is True and latest["flag_ref"] == "INC-42" and latest["rendered"] is True
        env = json.loads((data / "sessions" / slug / "incident.wtin.json").read_text())
        assert env["source"]["ref"] == "INC-42" and "wt-otel flag" in env["source"]["flag"]
        assert (data / "flag-requests.ndjsonl").read_text() == ""  # taken
    finally:
        serve.stop()


def quick_agent(text: str, session_id: str) -> dict[str, object]:
    """A python-runtime agent for the replay serve queues (what it answers does not matter here)."""
    return {"reply": "hello", "tool_calls": []}


def test_a_flag_request_to_a_serve_with_replay_on_queues_the_incident(tmp_path: Path) -> None:
    """serve takes the request at its next tick and runs the flagged session through the stages after the store:
    auto-replay imports it into scenarios/ and queues it, as it does an incident flagged on arrival."""
    from wt_otel.components import load
    from wt_otel.serve.config import load_serve_config
    from wt_otel.serve.replay_queue import QUEUE_FILE, read_events
    from wt_otel.serve.server import Server

    data = tmp_path / "data"
    config = load_serve_config(None, {
        "data_dir": str(data), "receivers.grpc_endpoint": "none", "receivers.http_endpoint": "127.0.0.1:0",
        "datadir.workers": 0, "assembler.idle_timeout": 0.3, "assembler.grace": 0.1, "replay.enabled": True,
        "replay.runtime": f"python:{__name__}:quick_agent", "replay.services": ["store-agent"],
        "replay.universe_port": 0, "replay.llm_port": 0})
    server = Server(config, quiet=True).start()
    try:
        export_session(server.http_url)
        deadline = time.monotonic() + 20
        while not (entries := read_index(data).latest()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [entry] = entries.values()
        store = load("exporters", "sessions")(data)
        outcome = store.flag(entry["slug"], "INC-77")
        assert outcome.written is None and outcome.requested is not None  # serve holds the data dir
        assert store.wait_flagged(outcome.requested, 20) is not None
        while not [e for e in read_events(data / QUEUE_FILE)[0] if e["event"] == "enqueued"]:
            assert time.monotonic() < deadline + 20
            time.sleep(0.05)
        [enqueued] = [e for e in read_events(data / QUEUE_FILE)[0] if e["event"] == "enqueued"]
        assert enqueued["ref"] == "INC-77" and (data / enqueued["scenario"] / "scenario.yaml").is_file()
    finally:
        server.stop()
