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


def test_a_producer_that_trips_one_warning_in_every_session_does_not_flood_the_log(caplog: pytest.LogCaptureFixture):
    """The log keeps the first few of each kind a period and says how many it left out; the metric counts all."""
    from wt_otel._util.throttle import LogThrottle
    from wt_otel.processors.assembler import SessionAssembler

    clock = [0.0]
    metrics = Metrics()
    asm = SessionAssembler(lambda s, spans: None, metrics, idle_timeout=0.0, grace=0.0,
                           log_throttle=LogThrottle(burst=3, period=60.0, clock=lambda: clock[0]))
    unanswered = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {}}]}]

    def sessions(first: int, n: int) -> None:
        for i in range(first, first + n):
            span = _chat(f"{i:016x}", i, unanswered)
            span.trace_id = f"{i:032x}"
            span.attributes["gen_ai.conversation.id"] = f"conv-{i}"
            asm.consume([span], now=float(i))
            asm.flush(now=float(i))

    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records]

    with caplog.at_level(logging.WARNING, logger="wt_otel.assembler"):
        sessions(0, 10)
        assert sum("has no result" in m for m in lines()) == 3
        assert not any("not logged" in m for m in lines())
        clock[0] = 61.0  # a new period: the count held back is said once, with the next line of that kind
        sessions(10, 5)
        assert sum("has no result" in m for m in lines()) == 6
        [said] = [m for m in lines() if "not logged" in m]
        assert said.startswith("7 more session warning(s) of kind 'tool_call_without_result'")
        asm.close()  # shutdown says what this period held back
        assert "2 more session warning(s)" in lines()[-1]
    assert metrics.get("wt_otel_session_warnings_total", kind="tool_call_without_result") == 15


def test_log_throttle_keeps_kinds_apart_and_opens_a_new_period_on_time() -> None:
    from wt_otel._util.throttle import LogThrottle

    clock = [100.0]
    t = LogThrottle(burst=2, period=10.0, clock=lambda: clock[0])
    assert [t.admit("a") for _ in range(4)] == [(True, 0), (True, 0), (False, 0), (False, 0)]
    assert t.admit("b") == (True, 0)  # another kind has its own budget
    clock[0] = 109.9
    assert t.admit("a") == (False, 0) and t.held_back() == {"a": 3}
    clock[0] = 110.0
    assert t.admit("a") == (True, 3) and t.held_back() == {}
    assert t.admit("a") == (True, 0)
