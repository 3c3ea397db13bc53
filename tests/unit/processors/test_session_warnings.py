"""serve: what the importer did not understand is logged once per session, counted by kind, and a
flagged session without content is not auto-replayed as if it were complete."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord
from wt_otel.serve.config import ReplayConfig
from wt_otel.serve.metrics import Metrics


def _chat(span_id: str, start: int, outputs: list | None, flag: bool = False) -> SpanRecord:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.conversation.id": "conv-1"}
    if outputs is not None:
        attrs["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
        attrs["gen_ai.output.messages"] = json.dumps(outputs)
    if flag:
        attrs["wt.incident"] = "INC-9"
    return SpanRecord(trace_id="t" * 32, span_id=span_id, name="chat m", start_ns=start, end_ns=start + 1,
                      attributes=attrs)


def test_warnings_are_logged_once_per_session_and_counted_by_kind(caplog: pytest.LogCaptureFixture):
    from wt_otel.processors.assembler import SessionAssembler

    written: list[Session] = []
    metrics = Metrics()
    asm = SessionAssembler(lambda s, spans: written.append(s), metrics, idle_timeout=0.0, grace=0.0)
    unanswered = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {}}]}]
    with caplog.at_level(logging.WARNING, logger="wt_otel.assembler"):
        asm.consume([_chat("a" * 16, 1, unanswered)], now=0.0)
        asm.flush(now=1.0)
        asm.consume([_chat("b" * 16, 5, unanswered)], now=2.0)  # a late span: a second revision
        asm.flush(now=3.0)
    assert len(written) == 2
    logged = [r.getMessage() for r in caplog.records if "has no result" in r.getMessage()]
    assert len(logged) == 1, logged
    assert metrics.get("wt_otel_session_warnings_total", kind="tool_call_without_result") == 1
    assert 'wt_otel_session_warnings_total{kind="tool_call_without_result"} 1' in metrics.render()


def test_a_flagged_session_without_content_is_not_auto_replayed(tmp_path: Path):
    from wt_otel.ingest.sessions import build_session
    from wt_otel.processors.auto_replay import AutoReplay

    session = build_session([_chat("c" * 16, 1, None, flag=True)])
    assert session is not None and session.flagged and not session.content_captured
    metrics = Metrics()
    warned: list[str] = []
    replay = AutoReplay(ReplayConfig(enabled=True, inject_url="http://127.0.0.1:9"), tmp_path, tmp_path / "runs",
                        metrics, emit=lambda _: None, warn=warned.append)
    replay.on_written(session, object())
    events = [json.loads(line) for f in tmp_path.rglob("*.ndjson*") for line in f.read_text().splitlines()]
    [refused] = [e for e in events if e.get("event") == "refused"]
    assert refused["ref"] == "INC-9" and "no message content" in refused["reason"]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in refused["reason"]
    assert metrics.get("wt_otel_replay_refused_total") == 1 and "NOT queued for replay" in warned[0]
    assert not (tmp_path / "scenarios").exists() or not list((tmp_path / "scenarios").iterdir())
