"""Issue 31 item 4: text from telemetry reached the operator's terminal raw. An incident id with OSC/CSI sequences
(window title, clear screen) and a newline (a forged log line) is sent through every serve log line that prints
telemetry: "wrote … flagged", "queued incident", "replayed incident", a session's diagnostics, a replay refused.
Real serve in-process, its real text log (`wt_otel.serve.logs.configure`), auto-replay against an agent endpoint
that is down (a quick ERROR row)."""

from __future__ import annotations

import io
import logging
import socket
import time
import urllib.request
from pathlib import Path

from tests.support.hostile import genai_session, tid, to_request
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ReplayConfig, ServeConfig
from wt_otel.serve.logs import configure
from wt_otel.serve.replay_queue import QUEUE_FILE, read_events
from wt_otel.serve.server import Server

HOSTILE = "INC-\x1b]0;pwned\x07\x1b[2J\x9b31m-1\nFAKE ERROR injected line\u202e"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(server: Server, spans: list, service: str = "hostile") -> None:
    request = to_request(spans)
    request.resource_spans[0].resource.attributes[0].value.string_value = service
    req = urllib.request.Request(server.http_url + "/v1/traces", data=request.SerializeToString(),
                                 headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def test_every_log_line_that_prints_telemetry_escapes_it(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    log = configure("info", "text", stdout=out, stderr=err)
    config = ServeConfig(
        data_dir=tmp_path / "data", receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
        assembler=AssemblerConfig(idle_timeout=0.2, grace=0.05),
        replay=ReplayConfig(enabled=True, inject_url=f"http://127.0.0.1:{_free_port()}", services=["hostile"]))
    server = Server(config, emit=log.info, warn=log.warning).start()
    try:
        replayed = genai_session(tid(1), conversation=f"conv-{HOSTILE}")
        replayed[-1].attributes["wt.incident"] = HOSTILE
        elsewhere = genai_session(tid(2), start=50_000)  # a service with no replay target: refused, said
        elsewhere[-1].attributes["wt.incident"] = HOSTILE + "-2"
        no_content = genai_session(tid(3), start=90_000)  # content capture off: said per service
        for span in no_content:
            span.attributes.pop("gen_ai.input.messages", None)
            span.attributes.pop("gen_ai.output.messages", None)
        _post(server, replayed)
        _post(server, elsewhere, f"svc-{HOSTILE}")
        _post(server, no_content, f"quiet-{HOSTILE}")
        deadline = time.monotonic() + 30
        while not [e for e in read_events(config.data_dir / QUEUE_FILE)[0] if e["event"] == "done"]:
            assert time.monotonic() < deadline, out.getvalue() + err.getvalue()
            time.sleep(0.05)
    finally:
        server.stop()
        logging.getLogger().handlers.clear()
    text = out.getvalue() + err.getvalue()
    for said in ("wrote ", "queued incident", "replayed incident", "NOT replayed", "records no message content"):
        lines = [line for line in text.splitlines() if said in line]
        assert lines, f"no {said!r} line in:\n{text}"
        assert any("\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m-1\\nFAKE" in line for line in lines), (said, lines)
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in text
    assert not [line for line in text.splitlines() if line.startswith("FAKE")]  # no forged line
