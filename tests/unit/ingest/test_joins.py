"""The join rule (wt_otel/ingest/joins.py, issue 29): traces join on evidence, never two conversations into one."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.conversations import FIRST_A, FIRST_Q, Scenario, lookalikes, texts, turn
from tests.support.importdump import as_proto
from wt_otel.exporters.scenario_dir import ScenarioDirWriter
from wt_otel.ingest.flags import FEEDBACK_KEYS
from wt_otel.ingest.importer import import_dumps
from wt_otel.ingest.joins import _feedback_matcher, merge_continuations, span_facts
from wt_otel.ingest.sessions import build_session
from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord


def imported(tmp_path: Path, scenario: Scenario) -> list[dict]:
    dump = tmp_path / "dump.pb"
    dump.write_bytes(as_proto([r for t in scenario.first + scenario.second for r in t.records], per_request=200))
    report = import_dumps([dump], ScenarioDirWriter(tmp_path / "out"), jobs=1)
    assert report.errors == []
    return [json.loads((d / "incident.wtin.json").read_text()) for d in report.written]


def check_every_trace_once(envelopes: list[dict], scenario: Scenario) -> None:
    seen = [t for e in envelopes for t in e["provenance"]["trace_ids"]]
    assert sorted(seen) == sorted(t.trace_id for t in scenario.first + scenario.second)  # each in exactly one


def test_a_thousand_conversations_with_ids_that_open_alike_stay_a_thousand(tmp_path: Path) -> None:
    scenario = lookalikes(1000, continued=list(range(0, 1000, 2)), with_ids=True)
    envelopes = imported(tmp_path, scenario)
    assert len(envelopes) == 1000
    check_every_trace_once(envelopes, scenario)
    for env in envelopes:
        c = int(env["provenance"]["conversation_id"].removeprefix("conv-"))
        own = [FIRST_Q, FIRST_A] + ([scenario.second_q[c], f"order {c} ships tomorrow"] if c % 2 == 0 else [])
        assert texts(env) == own
        assert env["provenance"]["joined_by"] == ["trace", "conversation_id:gen_ai.conversation.id"]


def test_without_ids_n_one_turn_and_n_two_turn_conversations_give_2n_sessions(tmp_path: Path) -> None:
    n = 500
    scenario = lookalikes(2 * n, continued=list(range(0, 2 * n, 2)), with_ids=False)
    envelopes = imported(tmp_path, scenario)
    assert len(envelopes) == 2 * n
    check_every_trace_once(envelopes, scenario)
    two = [e for e in envelopes if len(e["provenance"]["trace_ids"]) == 2]
    assert len(two) == n
    for env in two:
        q = texts(env)[2]
        c = int(q.removeprefix("where is order ").removesuffix("?"))
        assert texts(env) == [FIRST_Q, FIRST_A, q, f"order {c} ships tomorrow"]  # both turns
        assert env["provenance"]["joined_by"][-1].startswith("continuation:")
        # every candidate held the same history: the latest was taken, a guess the session says
        assert any("the latest of" in w for w in env["warnings"])
    assert all(texts(e) == [FIRST_Q, FIRST_A] for e in envelopes if len(e["provenance"]["trace_ids"]) == 1)


def built(t) -> Session:
    session = build_session(t.records)
    assert session is not None
    return session


def test_a_flagged_candidate_on_a_tie_stays_apart_and_both_say_why() -> None:
    a = turn(0, 0, [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]}], FIRST_A, 1000, None)
    b = turn(1, 1, [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]}], FIRST_A, 3000, None,
             extra={"wt.incident": "INC-7"})
    history = [{"role": "user", "parts": [{"type": "text", "content": t}]} if i % 2 == 0 else
               {"role": "assistant", "parts": [{"type": "text", "content": t}]}
               for i, t in enumerate([FIRST_Q, FIRST_A, "and then?"])]
    c = turn(2, 2, history, "then nothing", 9000, None)
    sessions = merge_continuations([built(a), built(b), built(c)])
    assert len(sessions) == 3
    flagged = next(s for s in sessions if s.flagged)
    cont = next(s for s in sessions if len(s.messages) == 4)
    assert any("carries its own flag or feedback" in w for w in flagged.warnings)
    assert any("carries its own flag or feedback" in w for w in cont.warnings)
    assert flagged.trace_ids == [b.trace_id] and cont.trace_ids == [c.trace_id]


def test_without_a_tie_the_latest_candidate_is_taken_even_when_flagged() -> None:
    b = turn(1, 1, [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]}], FIRST_A, 3000, None,
             extra={"wt.incident": "INC-7"})
    history = [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]},
               {"role": "assistant", "parts": [{"type": "text", "content": FIRST_A}]},
               {"role": "user", "parts": [{"type": "text", "content": "and then?"}]}]
    c = turn(2, 2, history, "then nothing", 9000, None)
    [joined] = merge_continuations([built(c), built(b)])
    assert joined.trace_ids == [b.trace_id, c.trace_id] and joined.flag_ref == "INC-7"
    assert joined.joined_by == ["trace", f"continuation:{c.trace_id}"]
    assert not any("the latest of" in w for w in joined.warnings)  # one candidate: evidence, not a guess


def test_an_unflagged_tie_joins_the_latest_and_says_it_was_a_guess() -> None:
    a = turn(0, 0, [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]}], FIRST_A, 1000, None)
    b = turn(1, 1, [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]}], FIRST_A, 3000, None)
    history = [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]},
               {"role": "assistant", "parts": [{"type": "text", "content": FIRST_A}]},
               {"role": "user", "parts": [{"type": "text", "content": "and then?"}]}]
    c = turn(2, 2, history, "then nothing", 9000, None)
    sessions = merge_continuations([built(a), built(b), built(c)])
    joined = next(s for s in sessions if len(s.trace_ids) == 2)
    assert joined.trace_ids == [b.trace_id, c.trace_id]
    assert any("the latest of 2 earlier sessions" in w for w in joined.warnings)


@pytest.mark.parametrize("first_extra,second_extra,resource", [
    ({"user.id": "ana"}, {"user.id": "bo"}, None),
    ({"enduser.id": "ana"}, {}, None),
    ({}, {}, {"service.name": "faq-bot", "service.instance.id": "faq-bot-2"}),
])
def test_a_different_user_or_service_instance_never_joins(first_extra, second_extra, resource) -> None:
    a = turn(0, 0, [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]}], FIRST_A, 1000, None,
             extra=first_extra)
    history = [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]},
               {"role": "assistant", "parts": [{"type": "text", "content": FIRST_A}]},
               {"role": "user", "parts": [{"type": "text", "content": "and then?"}]}]
    c = turn(1, 1, history, "then nothing", 9000, None, extra=second_extra, resource=resource)
    assert len(merge_continuations([built(a), built(c)])) == 2
    same = turn(2, 1, history, "then nothing", 9000, None, extra=first_extra)
    assert len(merge_continuations([built(a), built(same)])) == 1  # the same user and instance: joined


def test_a_history_that_differs_from_the_earlier_transcript_does_not_join() -> None:
    a = turn(0, 0, [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]}], FIRST_A, 1000, None)
    history = [{"role": "user", "parts": [{"type": "text", "content": FIRST_Q}]},
               {"role": "assistant", "parts": [{"type": "text", "content": FIRST_A + " Anything else?"}]},
               {"role": "user", "parts": [{"type": "text", "content": "and then?"}]}]
    c = turn(1, 1, history, "then nothing", 9000, None)
    assert len(merge_continuations([built(a), built(c)])) == 2
    early = turn(2, 1, [*history[:1], {"role": "assistant", "parts": [{"type": "text", "content": FIRST_A}]},
                        history[2]], "then nothing", 500, None)  # started before the candidate ended
    assert len(merge_continuations([built(a), built(early)])) == 2


def test_a_span_link_joins_turns_that_share_no_history(tmp_path: Path) -> None:
    """Every conversation opens alike and the second turn resends nothing: only its span link to the first
    turn's trace says whose it is. Each second turn lands in its own conversation, joined by the link."""
    from tests.support.conversations import linked

    scenario = linked(200)
    envelopes = imported(tmp_path, scenario)
    assert len(envelopes) == 200
    check_every_trace_once(envelopes, scenario)
    for env in envelopes:
        first, second = env["provenance"]["trace_ids"]
        c = int(second, 16) - 201
        assert texts(env) == [FIRST_Q, FIRST_A, scenario.second_q[c], f"order {c} ships tomorrow"]
        assert env["provenance"]["joined_by"] == ["trace", f"link:{second}"]


def test_a_span_that_links_to_several_traces_joins_none(tmp_path: Path) -> None:
    from tests.support.conversations import linked
    from wt_otel.model.spans import Link

    scenario = linked(2)
    fan_in = scenario.second[0].records[0]
    fan_in.links = [Link(t.trace_id, t.records[0].span_id) for t in scenario.first]
    envelopes = imported(tmp_path, scenario)
    assert len(envelopes) == 3  # the fan-in turn alone; the other second turn joined its own first
    alone = next(e for e in envelopes if e["provenance"]["trace_ids"] == [scenario.second[0].trace_id])
    assert any("links to 2 other traces" in w for w in alone["warnings"])


def test_a_link_to_a_trace_the_import_never_saw_joins_nothing(tmp_path: Path) -> None:
    from tests.support.conversations import linked
    from wt_otel.model.spans import Link

    scenario = linked(1)
    scenario.second[0].records[0].links = [Link("f" * 32, "e" * 16)]  # a trace outside this dump
    envelopes = imported(tmp_path, scenario)
    assert sorted(len(e["provenance"]["trace_ids"]) for e in envelopes) == [1, 1]
    assert all(not any("link" in w for w in e["warnings"]) for e in envelopes)


_KEY_PARTS = st.sampled_from(["user", "feedback", "gen_ai", "score", "label", ".", "*", "?", "[", "]", "x", "\n", "é"])


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(st.lists(_KEY_PARTS, max_size=6).map("".join), max_size=6),
       patterns=st.lists(st.lists(_KEY_PARTS, max_size=5).map("".join), max_size=4))
def test_the_feedback_matcher_agrees_with_fnmatchcase_key_by_key(keys: list[str], patterns: list[str]) -> None:
    """One compiled expression for all patterns answers as `fnmatchcase` per key and pattern did."""
    match = _feedback_matcher(tuple(patterns))
    for key in [*keys, *FEEDBACK_KEYS, "user.feedback.rating", "gen_ai.feedback"]:
        assert bool(match(key)) == any(fnmatch.fnmatchcase(key, p) for p in patterns), (key, patterns)
    built = [SpanRecord(trace_id="a" * 32, span_id=f"{i:016x}", name="s", attributes={k: 1})
             for i, k in enumerate(keys)]
    assert span_facts(built, patterns)[1] == any(fnmatch.fnmatchcase(k, p) for k in keys for p in patterns)
