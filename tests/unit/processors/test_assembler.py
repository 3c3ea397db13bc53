"""The streaming session assembler and the GenAI filter, on records, with an injected clock."""

from __future__ import annotations

import json

from tests.support.livehelpers import agent, chat, exec_tool, http_span, log_event, tid, weather_session
from tests.support.spans import assistant, user
from wt_otel.exporters.datadir import DataDirStore, read_index
from wt_otel.processors.assembler import SessionAssembler
from wt_otel.processors.genai_filter import GenAIFilter, is_genai
from wt_otel.serve.metrics import Metrics


class Sink:
    def __init__(self) -> None:
        self.sessions = []
        self.spans = []

    def __call__(self, session, spans) -> None:
        self.sessions.append(session)
        self.spans.append(spans)


def make(**kw) -> tuple[SessionAssembler, Sink, Metrics]:
    sink, metrics = Sink(), Metrics()
    return SessionAssembler(sink, metrics, **kw), sink, metrics


def test_out_of_order_and_cross_batch_arrival_make_one_session():
    asm, sink, _ = make()
    spans = weather_session(tid(1))
    root = spans[-1]
    asm.consume([root], now=0.0)  # the root first, children later, each in its own batch
    for i, span in enumerate(reversed(spans[:-1])):
        asm.consume([span], now=0.1 * (i + 1))
    asm.tick(1.0)
    assert sink.sessions == []  # grace runs from the last record (t=0.3)
    asm.tick(2.31)
    [s] = sink.sessions
    assert [m["role"] for m in s.messages] == ["user", "assistant", "tool", "assistant"]
    assert [w.tool_name for w in s.witnessed_calls] == ["weather"] and s.complete
    assert s.key == tid(1) and asm.open_sessions == 0


def test_traces_sharing_a_conversation_id_merge_across_batches():
    asm, sink, _ = make(idle_timeout=5)
    asm.consume([chat(tid(1), [user("hi")], [assistant("hello")], **{"gen_ai.conversation.id": "conv-7"})], 0)
    asm.consume([chat(tid(3), [user("other")], [assistant("x")])], 0.5)
    asm.consume([chat(tid(2), [user("hi"), assistant("hello"), user("bye")], [assistant("ciao")], start=5_000,
                      **{"gen_ai.conversation.id": "conv-7"})], 1)
    asm.tick(5.9)
    assert [s.key for s in sink.sessions] == [tid(3)]  # conv-7 is still active (last record at t=1)
    asm.tick(6)
    conv = sink.sessions[1]
    assert conv.key == tid(1) and conv.trace_ids == [tid(1), tid(2)] and conv.user_turns == ["hi", "bye"]


def test_two_open_sessions_joined_later_by_a_conversation_id_keep_the_older_key():
    asm, sink, _ = make()
    asm.consume([chat(tid(1), [user("a")], [assistant("b")], **{"session.id": "s1"})], 0)
    asm.consume([chat(tid(2), [user("c")], [assistant("d")], start=3_000)], 1)
    asm.consume([exec_tool(tid(2), "t", {}, 1, "x", **{"session.id": "s1"})], 2)
    asm.flush(3)
    [s] = sink.sessions
    assert s.key == tid(1) and sorted(s.trace_ids) == [tid(1), tid(2)]


def test_idle_timeout_completes_a_session_without_an_agent_root():
    asm, sink, _ = make(idle_timeout=30, grace=2)
    # a parentless chat span is a root, but not an agent/workflow one: no grace, wait for idle
    asm.consume([chat(tid(1), [user("hi")], [assistant("hello")])], now=100.0)
    asm.tick(102.5)
    asm.tick(129.9)
    assert sink.sessions == []
    asm.tick(130.0)
    [s] = sink.sessions
    assert s.complete and s.user_turns == ["hi"]


def test_root_ended_plus_grace_completes_early():
    asm, sink, _ = make(idle_timeout=30, grace=2)
    asm.consume(weather_session(tid(1)), now=10.0)
    asm.tick(11.99)
    assert sink.sessions == []
    asm.tick(12.0)
    assert len(sink.sessions) == 1 and sink.sessions[0].complete


def test_grace_runs_from_each_sessions_last_record_whatever_order_the_roots_came_in():
    """Sessions whose root has arrived wait in order of last activity: a late record sends one to the back,
    and a tick completes those past their grace in front of it, not it."""
    asm, sink, _ = make(idle_timeout=30, grace=2)
    first, second = weather_session(tid(1)), weather_session(tid(2))
    asm.consume([first[0], first[-1]], now=10.0)  # each root with the first chat
    asm.consume([second[0], second[-1]], now=10.5)
    asm.consume(first[1:-1], now=11.0)  # the rest of the first session arrives last
    asm.tick(12.6)
    assert [s.key for s in sink.sessions] == [tid(2)]
    asm.tick(12.99)
    assert len(sink.sessions) == 1
    asm.tick(13.0)
    assert [s.key for s in sink.sessions] == [tid(2), tid(1)] and all(s.complete for s in sink.sessions)
    asm.consume(second[1:-1], now=14.0)  # late: reopened, root already seen, so due again after its grace
    asm.tick(15.99)
    assert len(sink.sessions) == 2
    asm.tick(16.0)
    assert [s.key for s in sink.sessions] == [tid(2), tid(1), tid(2)] and asm.open_sessions == 0


def test_nested_invoke_agent_does_not_end_the_session():
    asm, sink, _ = make(idle_timeout=30, grace=2)
    root = agent(tid(1))
    sub = agent(tid(1), parent=root.span_id)
    asm.consume([chat(tid(1), [user("q")], [assistant("a")], parent=sub.span_id), sub], 0)
    asm.tick(5)
    assert sink.sessions == []


def test_logs_attach_to_their_span_and_revisions_do_not_duplicate_events():
    asm, sink, _ = make(idle_timeout=1)
    c = chat(tid(1), [user("hi")], [assistant("hello")])
    asm.consume([c, log_event(tid(1), c.span_id)], 0)
    asm.tick(1)
    asm.consume([log_event(tid(1), c.span_id, name="gen_ai.choice")], 2)
    asm.tick(3)
    first, second = sink.spans
    assert [len(s.events) for s in first] == [1] and [len(s.events) for s in second] == [2]
    assert c.events == []  # the retained record itself is never mutated


def test_late_span_rewrites_the_session_as_revision_2(tmp_path):
    store = DataDirStore(tmp_path)
    asm = SessionAssembler(lambda s, _spans: store.write(s), idle_timeout=5, grace=1, is_written=store.has_key)
    spans = weather_session(tid(9))
    asm.consume(spans, now=0)
    asm.tick(1)
    late = exec_tool(tid(9), "lookup", {"q": "late"}, {"ok": True}, "c9", parent=spans[-1].span_id, start=8_000)
    asm.consume([late], now=30)
    asm.tick(31)
    lines = read_index(tmp_path).entries
    assert [(e["key"], e["revision"]) for e in lines] == [(tid(9), 1), (tid(9), 2)]
    assert lines[0]["slug"] == lines[1]["slug"]
    env = json.loads((tmp_path / "sessions" / lines[1]["slug"] / "incident.wtin.json").read_text())
    assert [w["tool_name"] for w in env["witnessed_calls"]] == ["weather", "lookup"]
    assert len(list((tmp_path / "sessions").iterdir())) == 1


def test_late_span_after_the_window_is_a_continuation_not_an_overwrite(tmp_path):
    store = DataDirStore(tmp_path)
    asm = SessionAssembler(lambda s, _spans: store.write(s), idle_timeout=5, late_window=10,
                           is_written=store.has_key)
    asm.consume(weather_session(tid(4)), now=0)
    asm.tick(3)
    asm.tick(100)  # past the late window: the records are forgotten
    asm.consume([exec_tool(tid(4), "lookup", {}, 1, "c9")], now=101)
    asm.tick(107)
    latest = read_index(tmp_path).latest()
    assert set(latest) == {tid(4), tid(4) + "~2"}
    assert latest[tid(4)]["complete"] and not latest[tid(4) + "~2"]["complete"]
    env = json.loads((tmp_path / "sessions" / latest[tid(4)]["slug"] / "incident.wtin.json").read_text())
    assert [w["tool_name"] for w in env["witnessed_calls"]] == ["weather"]  # revision 1 untouched


def test_max_open_sessions_flushes_the_oldest_as_incomplete_and_loses_nothing():
    asm, sink, metrics = make(max_open_sessions=2)
    records = [chat(tid(n), [user(f"q{n}")], [assistant(f"a{n}")]) for n in range(1, 6)]
    for i, r in enumerate(records):
        asm.consume([r], now=float(i))
    assert asm.open_sessions == 2
    assert [s.key for s in sink.sessions] == [tid(1), tid(2), tid(3)]
    assert all(not s.complete for s in sink.sessions)
    assert metrics.get("wt_otel_sessions_flushed_incomplete_total", reason="max_open_sessions") == 3
    asm.close()
    assert sorted(sp.span_id for spans in sink.spans for sp in spans) == sorted(r.span_id for r in records)


def test_max_open_sessions_writes_a_session_whose_root_arrived_as_complete():
    """Under a backlog many finished sessions wait out their grace at once; the bound must not brand them."""
    asm, sink, metrics = make(max_open_sessions=2)
    for n in range(1, 4):
        asm.consume(weather_session(tid(n)), now=0.0)
    assert [(s.key, s.complete) for s in sink.sessions] == [(tid(1), True)]
    assert metrics.get("wt_otel_sessions_flushed_incomplete_total", reason="max_open_sessions") == 0


def test_max_records_per_session_flushes_and_continues():
    asm, sink, metrics = make(max_records_per_session=3)
    q = user("q")
    records = [chat(tid(1), [q], [assistant(f"a{i}")], start=1_000 * i) for i in range(7)]
    asm.consume(records, now=0)
    asm.close()
    assert [s.key for s in sink.sessions] == [tid(1), tid(1) + "~2", tid(1) + "~3"]
    assert [s.complete for s in sink.sessions] == [False, False, False]
    assert "continuation of session" in sink.sessions[1].warnings[-1]
    assert metrics.get("wt_otel_sessions_flushed_incomplete_total", reason="max_records_per_session") == 2
    assert sum(len(spans) for spans in sink.spans) == 7


def test_retained_records_budget_forgets_the_oldest_first_past_tombstones():
    asm, sink, _ = make(max_retained_records=8, grace=0)  # 4 records per weather session: room for two
    for n in range(1, 5):
        asm.consume(weather_session(tid(n)), now=float(n))
        asm.tick(n + 0.5)
    # after session 3 the budget dropped 1's records; after 4 it dropped 2's, skipping 1's tombstone
    for n in (2, 3):
        asm.consume([exec_tool(tid(n), "weather", {"city": "Rome"}, {"temp": 9}, "late", parent="a" * 16)], now=9)
    asm.close()
    assert [s.key for s in sink.sessions] == [tid(1), tid(2), tid(3), tid(4), tid(2) + "~2", tid(3)]
    assert [len(spans) for spans in sink.spans[-2:]] == [1, 5]  # 2 continues with what came late, 3 is revised


def test_records_without_trace_id_are_counted_not_silently_lost():
    asm, sink, metrics = make()
    asm.consume([log_event("", "")], 0)
    assert metrics.get("wt_otel_records_dropped_total", reason="no_trace_id") == 1


def test_close_writes_open_sessions_complete_only_when_every_root_arrived():
    asm, sink, _ = make()
    asm.consume(weather_session(tid(1)), 0)
    asm.consume([chat(tid(2), [user("x")], [assistant("y")], parent="00000000000000aa")], 0)
    asm.close()
    assert {s.key: s.complete for s in sink.sessions} == {tid(1): True, tid(2): False}


# --------------------------------------------------------------------------- GenAI filter


class Collect:
    def __init__(self) -> None:
        self.records = []

    def consume(self, records, now):
        self.records.extend(records)

    def tick(self, now):
        pass

    def close(self):
        pass


def test_filter_keeps_genai_and_the_rest_of_known_genai_traces():
    out, metrics = Collect(), Metrics()
    f = GenAIFilter(out, metrics)
    spans = weather_session(tid(1))
    plain_root = http_span(tid(1))
    other = http_span(tid(2))
    f.consume([plain_root, other, *spans], 0)  # the plain span first: order inside a batch does not matter
    assert plain_root in out.records and other not in out.records
    f.consume([http_span(tid(1))], 1)  # a later batch of a known trace
    assert len(out.records) == len(spans) + 2
    assert metrics.get("wt_otel_records_dropped_total", reason="not_genai") == 1


def test_filter_drops_a_plain_span_that_arrives_before_its_trace_is_known():
    out = Collect()
    f = GenAIFilter(out)
    early = http_span(tid(5))
    f.consume([early], 0)
    f.consume([chat(tid(5), [user("q")], [assistant("a")])], 1)
    assert early not in out.records and len(out.records) == 1


def test_is_genai_recognises_each_dialect_marker():
    assert is_genai(http_span(tid(1))) is False
    for attrs in ({"llm.input_messages.0.message.role": "user"}, {"traceloop.entity.name": "x"},
                  {"openinference.span.kind": "LLM"}, {"pydantic_ai.all_messages": "[]"}, {"tool.name": "t"},
                  {"events": "[]"}, {"wt.incident": "INC-1"}, {"openai_agents.span_type": "function"}):
        span = http_span(tid(1))
        span.attributes.update(attrs)
        assert is_genai(span), attrs
    assert is_genai(log_event(tid(1), "ab")) and not is_genai(log_event(tid(1), "ab", name="app.started"))


def test_filter_lru_is_bounded():
    f = GenAIFilter(Collect(), max_known_traces=3)
    for n in range(10):
        f.consume([chat(tid(n), [user("q")], [assistant("a")])], 0)
    assert len(f._known) == 3


def _kept_runs(n: int) -> list:
    from wt_otel.model.spans import SpanRefs
    return [SpanRefs(f"{i:032x}", None, 0, [2 * i, 2 * i + 1], roots=((2 * i + 1, "invoke_agent"),))
            for i in range(1, n + 1)]


def test_a_burst_of_sessions_kept_by_reference_is_not_backlog_before_the_writer_is_measured():
    """Before the first session is due, the writer's speed is a prior: that of building and rendering a session,
    or, when sessions are kept by reference (an index line each), that of keeping one. A burst of 5,000 ended
    sessions waiting out their grace is then no reason to refuse requests; with the render prior it is."""
    kept, _, _ = make(grace=2.0)
    kept.keep_by_reference = lambda indexed: True
    rendered, _, _ = make(grace=2.0)
    for asm in (kept, rendered):
        asm.consume(_kept_runs(5_000), now=0.0)
    assert kept.write_backlog() == 0.0
    assert rendered.write_backlog() > 40  # 5,000 x 10 ms less the 2 s grace


def test_spanrefs_split_keeps_each_root_with_its_span():
    from wt_otel.model.spans import SpanRefs, count
    run = SpanRefs("ab" * 16, "conv", 7, [1, 4, 5, 9], roots=((4, "invoke_agent"), (9, "chat")), marks=(("k", 1),))
    head, tail = run.split(2)
    assert (head.ordinals, head.roots) == ([1, 4], ((4, "invoke_agent"),))
    assert (tail.ordinals, tail.roots) == ([5, 9], ((9, "chat"),))
    assert head.segment_pos == tail.segment_pos == 7 and head.marks == tail.marks == (("k", 1),)
    assert count([head, tail]) == 4 and count([run, *weather_session(tid(1))]) == 8


def test_needed_position_is_the_lowest_position_an_open_or_holding_session_pins():
    """The checkpoint's floor, read from a heap of positions: random arrivals (new traces, late spans, shared
    conversations that merge, sessions past their grace, over the retained budget) against the walk over
    every open and holding group it replaced."""
    import random

    from wt_otel.model.spans import SpanRefs

    rng = random.Random(15)
    asm, _, _ = make(grace=1.0, idle_timeout=5.0, late_window=8.0, max_retained_records=40, max_open_sessions=30)
    asm.keep_by_reference = lambda indexed: True

    def walked() -> int:
        return min((g.min_pos for g in asm._pinning() if g.min_pos >= 0), default=-1)

    pos, now, checked = 0, 0.0, set()
    for i in range(600):
        now += rng.choice([0.0, 0.1, 0.5, 2.0])
        batch = []
        for _ in range(rng.randint(1, 4)):
            pos += rng.randint(1, 3)
            window = i // 4  # traces and conversations come and go
            trace = f"{rng.randint(window, window + 12) + 1:032x}"
            conv = rng.choice([None, None, f"conv-{rng.randint(window, window + 4)}"])
            root = ((0, "invoke_agent"),) if rng.random() < 0.5 else ()
            batch.append(SpanRefs(trace, conv, rng.choice([pos, pos, max(0, pos - rng.randint(1, 30))]), [0, 1],
                                  roots=root))
        asm.consume(batch, now)
        if rng.random() < 0.3:
            asm.tick(now)
        assert asm.needed_position() == walked()
        checked.add(asm.needed_position())
    assert len(checked) > 5
    asm.tick(now + 100)
    assert asm.needed_position() == walked() == -1


def test_positions_heap_stays_bounded_behind_a_long_open_session():
    """A session that stays open keeps the lowest position; the thousands written and let go behind it leave
    stale entries below the top, which are dropped once they outnumber the live groups."""
    from wt_otel.model.spans import SpanRefs

    asm, _, _ = make(grace=0.5, idle_timeout=1e9, late_window=1.0, max_retained_records=100)
    asm.keep_by_reference = lambda indexed: True
    for i in range(1, 20_001):
        now = i * 0.01
        asm.consume([SpanRefs("f" * 32, "long", 0 if i == 1 else i, [0])] if i % 50 == 1 else [], now)
        asm.consume([SpanRefs(f"{i:032x}", None, i, [0, 1], roots=((0, "invoke_agent"),))], now)
        if i % 10 == 0:
            asm.tick(now)
            assert asm.needed_position() == 0
    assert len(asm._positions) <= 4 * (len(asm._open) + len(asm._holding)) + 4096
    assert asm.needed_position() == 0
