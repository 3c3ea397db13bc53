"""The assembler's byte bound (issue 13, item 3): retained records go first, then open sessions are written
early; every record still reaches the sink."""

from __future__ import annotations

from tests.support.hostile import genai_session, tid
from wt_otel.processors.assembler import SessionAssembler
from wt_otel.serve.metrics import Metrics


def test_held_bytes_stay_under_the_bound_and_nothing_is_dropped():
    written: list[str] = []
    metrics = Metrics()
    asm = SessionAssembler(lambda session, spans: written.append(session.key), metrics, idle_timeout=1000,
                           grace=1000, late_window=1000, max_held_bytes=1_000_000)
    for i in range(20):
        spans = genai_session(tid(i))
        spans[0].attributes["app.blob"] = "x" * 200_000
        asm.consume(spans[:3], now=float(i))  # no root yet: the sessions stay open
        assert asm.held_bytes() <= 1_000_000
    asm.close()
    assert sorted(written) == sorted(tid(i) for i in range(20))
    assert 'wt_otel_sessions_flushed_incomplete_total{reason="max_held_bytes"}' in metrics.render()


def test_retained_records_are_released_before_open_sessions_are_flushed():
    written: list[str] = []
    asm = SessionAssembler(lambda session, spans: written.append(session.key), idle_timeout=1000, grace=0,
                           late_window=1000, max_held_bytes=700_000)
    done = genai_session(tid(1))
    done[0].attributes["app.blob"] = "x" * 300_000
    asm.consume(done, now=0.0)
    asm.tick(1.0)  # root ended and grace 0: written, its records retained for late spans
    assert written == [tid(1)] and asm.held_bytes() > 300_000
    other = genai_session(tid(2))
    other[0].attributes["app.blob"] = "y" * 380_000  # retained 300 kB + 380 kB: over the bound
    asm.consume(other[:3], now=2.0)
    other2 = genai_session(tid(3))
    asm.consume(other2[:1], now=3.0)
    assert asm.held_bytes() <= 700_000
    assert written == [tid(1)] and asm.open_sessions == 2  # the retained records went, no open session did
