"""Property: the lean lookup engine answers every generated universe and call sequence exactly as the engine it
replaced (issue 15; tests/unit/replay/test_universe_equivalence.py runs the producer fixtures' universes).

Universes and calls are built to collide: 1 / 1.0 / true / "1", NaN and null, huge ints, lone surrogates in
names and values, objects serialized through `default=str` (Decimal, a str-able object), values nested past
orjson's depth limit, extra and missing arguments, sequence tools, every miss policy, resets, perturbations.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from tests.support.fuzzing import count, deep, hostile_text, huge_ints
from tests.support.universe_reference import Call, Tagged, assert_same, synth
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.universe import load_universe

pytestmark = pytest.mark.fuzz

NAMES = ["q", "k", "1", "\ud800", "é"]
colliding = st.sampled_from([1, 1.0, True, "1", 0, False, None, math.nan, "", "a", "é", "\ud800", 2**70, -(2**64),
                             1e16, [1, "1"], {"b": 1, "a": 2}, {"a": 2, "b": 1}])
values = st.one_of(colliding, colliding, hostile_text, huge_ints, st.floats(),
                   st.sampled_from(["1", "x"]).map(Tagged), st.sampled_from(["1", "2"]).map(Decimal),
                   st.integers(min_value=250, max_value=300).map(deep),
                   st.lists(colliding, max_size=2), st.dictionaries(st.sampled_from(NAMES), colliding, max_size=2))
arg_dicts = st.dictionaries(st.sampled_from(NAMES), values, max_size=3)
recorded_args = st.builds(lambda q, rest: {**rest, "q": q}, values, arg_dicts)  # "q": the usual keyed name
TOOLS = ["a", "b", "c"]


@st.composite
def universes_and_calls(draw: st.DrawFn) -> tuple[dict[str, Any], list[Call]]:
    recordings = draw(st.lists(st.fixed_dictionaries(
        {"tool_name": st.sampled_from(TOOLS), "args": st.one_of(arg_dicts, recorded_args), "result": colliding},
        optional={"error": st.sampled_from([True, "upstream down"])}), max_size=8))
    tools = [{"name": t, "input_schema": {"type": "object"}, "mode": draw(st.sampled_from(["stateless", "sequence"])),
              **draw(st.sampled_from([{}, {"result_schema": {"type": "array"}}]))} for t in TOOLS]
    matching = {"on_miss": draw(st.sampled_from(["fail_call", "empty", "nearest", "synthesize"])),
                "arg_keys": {t: draw(st.one_of(st.sampled_from([["q"], ["q"], ["\ud800"], ["q", "k"]]),
                                               st.lists(st.sampled_from(NAMES), max_size=3)))
                             for t in TOOLS}}
    data = {"windtunnel_universe": 1, "tools": tools, "recordings": recordings, "matching": matching}
    recorded = [(r["tool_name"], r["args"]) for r in recordings]
    one_call = st.one_of(
        st.sampled_from(recorded) if recorded else st.nothing(),
        st.builds(lambda c, v: (c[0], {**c[1], "verbose": v}), st.sampled_from(recorded), values)
        if recorded else st.nothing(),
        st.builds(lambda c, extra: (c[0], {**c[1], **extra}), st.sampled_from(recorded), arg_dicts)
        if recorded else st.nothing(),
        st.builds(lambda c: (c[0], {(1 if k == "1" else k): v for k, v in c[1].items()}), st.sampled_from(recorded))
        if recorded else st.nothing(),  # a non-str key, canonically equal to "1"
        st.tuples(st.sampled_from([*TOOLS, "zz"]), arg_dicts),
        st.tuples(st.sampled_from(TOOLS), st.sampled_from([None, "not json", '{"q": 1}', "[]"])),
        st.just(("RESET", None)),
    )
    return data, draw(st.lists(one_call, max_size=12))


@given(universes_and_calls(), st.sampled_from([None, "error", "empty"]))
def test_generated_universes_answer_the_same(case: tuple[dict[str, Any], list[Call]], perturb: str | None) -> None:
    count("universe_equivalence")
    data, calls = case
    note(repr(data))
    universe = load_universe(data)
    perturbation = Perturbation(kind=perturb, tool="a") if perturb else None
    for answer in assert_same(universe, calls, synthesize=synth, perturbation=perturbation):
        count(f"universe_equivalence:{answer[2] if len(answer) > 2 else 'ValueError'}")


