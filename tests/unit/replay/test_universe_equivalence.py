"""The lean lookup engine answers exactly as the engine it replaced (issue 15).

`RecordedUniverse` (bytes keys, shortcuts, a lock-free log of slots) against `ReferenceUniverse`
(tests/support/universe_reference.py: the engine as it was, one lock, str keys, a log of dicts): the same
answers (result, error flag, match, recording, divergence), the same call log, the same entries handed to
`on_call`, the same `universe_divergence` warnings, and the same ValueError for bad arguments. On every
universe the producer fixtures import to, under every miss policy, keying and mode, and on hypothesis-generated
universes and calls built to collide (1 / 1.0 / true / "1", NaN and null, huge ints, lone surrogates, objects
serialized through `default=str`, values nested past orjson's depth limit).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import orjson
import pytest

from tests.support.paths import PRODUCERS
from tests.support.universe_reference import Call, ReferenceUniverse, Tagged, assert_same, run_engine, synth
from wt_otel.components import load
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.universe import load_universe
from wt_otel.ingest.importer import import_dumps
from wt_otel.replay.universe import RecordedUniverse


def calls_for(data: dict[str, Any]) -> list[Call]:
    """Hits, near misses and misses derived from a universe's recordings, then all of it again."""
    calls: list[Call] = []
    for rec in data["recordings"]:
        tool, args = rec["tool_name"], rec["args"]
        calls += [(tool, dict(reversed(list(args.items())))), (tool, {**args, "verbose": True}),
                  (tool, {k: "zz" for k in args}), (tool, dict(list(args.items())[1:])),
                  (tool, orjson.dumps(args).decode())]
    tools = [t["name"] for t in data["tools"]]
    calls += [(t, {}) for t in tools] + [(t, None) for t in tools]
    calls += [("not_a_tool", {"q": 1}), (tools[0] if tools else "x", "not json"), (tools[0] if tools else "x", "[1]")]
    return calls + calls  # the second pass: stateless tools answer the same, sequence tools run dry


def variants(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The universe under every policy, no / one / two keyed args, stateless and sequence tools."""
    names = [t["name"] for t in data["tools"]]
    first_args: dict[str, list[str]] = {}
    for rec in data["recordings"]:
        first_args.setdefault(rec["tool_name"], list(rec["args"]))
    keyings = [{}, {t: a[:1] for t, a in first_args.items() if a},
               {t: [*a[:2], "absent"] for t, a in first_args.items()}]
    out = []
    for policy in ("fail_call", "empty", "nearest", "synthesize"):
        for arg_keys in keyings:
            for mode in ("stateless", "sequence"):
                tools = [{**t, "mode": mode} for t in data["tools"]]
                out.append({**data, "tools": tools, "matching": {"on_miss": policy, "arg_keys": arg_keys,
                                                                  "per_tool_on_miss": {names[-1]: "fail_call"}
                                                                  if len(names) > 1 else {}}})
    return out


@pytest.fixture(scope="module")
def producer_universes(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    dumps = sorted(p for p in PRODUCERS.glob("*/*") if p.name.startswith(("dump", "trace"))
                   and p.parent.name[0] != "_")
    out: dict[bytes, dict[str, Any]] = {}
    for i, dump in enumerate(dumps):
        report = import_dumps([dump], load("exporters", "scenario-dir")(tmp_path_factory.mktemp(f"p{i}")))
        for written in report.written:
            data = orjson.loads((written / "fixture.universe.json").read_bytes())
            # producers of the same story import to the same universe: each distinct one is run once
            same = orjson.dumps([data["tools"], data["recordings"], data["matching"]], option=orjson.OPT_SORT_KEYS)
            out.setdefault(same, data)
    assert len(out) >= 15, "the producer fixtures import to fewer distinct universes than expected"
    return list(out.values())


def test_every_producer_universe_answers_the_same(producer_universes: list[dict[str, Any]]) -> None:
    runs = 0
    for data in producer_universes:
        calls = calls_for(data)
        for variant in variants(data):
            universe = load_universe(variant)
            assert_same(universe, calls, synthesize=synth if variant["matching"]["on_miss"] == "synthesize" else None)
            runs += 1
        universe = load_universe(data)
        for p in (Perturbation(kind="error"), Perturbation(kind="empty"), Perturbation(kind="slow", delay_s=0.5),
                  Perturbation(kind="error", tool=data["tools"][0]["name"], message="down")):
            assert_same(universe, calls, perturbation=p)
            runs += 1
    assert runs >= 28 * len(producer_universes)


def test_the_comparison_can_fail() -> None:
    """A different answer is caught: the oracle comparison is not vacuous."""
    data = {"windtunnel_universe": 1, "tools": [{"name": "t", "input_schema": {}}],
            "recordings": [{"tool_name": "t", "args": {"q": "a"}, "result": 1}]}
    universe = load_universe(data)

    class Skewed(RecordedUniverse):
        def call(self, tool: str, args: Any = None) -> Any:
            return super().call(tool, {"q": "b"})

    old = run_engine(ReferenceUniverse, universe, [("t", {"q": "a"})], None, None)
    new = run_engine(Skewed, universe, [("t", {"q": "a"})], None, None)
    assert repr(old[0]) != repr(new[0])


def test_collisions_the_shortcuts_must_not_hide() -> None:
    """Hand-picked cases for each shortcut: a str key table next to a `default=str` object, a non-str key."""
    data = {"windtunnel_universe": 1, "tools": [{"name": "t", "input_schema": {}}],
            "recordings": [{"tool_name": "t", "args": {"q": Tagged("1"), "x": 1}, "result": "tagged"},
                           {"tool_name": "t", "args": {"q": "2"}, "result": "two"},
                           {"tool_name": "t", "args": {"1": "a"}, "result": "one"},
                           {"tool_name": "t", "args": {"1": "a", "q": "2"}, "result": "one-two"}],
            "matching": {"arg_keys": {"t": ["q"]}}}
    universe = load_universe(data)
    calls: list[Call] = [("t", {"q": "1"}), ("t", {"q": "1", "y": 0}), ("t", {"q": Decimal("1")}), ("t", {"q": "2"}),
                         ("t", {1: "a"}), ("t", {1: "a", "q": "2"}), ("t", {"q": "2", 2: 0}), ("t", {"q": math.nan})]
    assert_same(universe, calls)
    engine = RecordedUniverse(universe)
    assert [(a.match, a.result) for a in map(engine.call, *zip(*calls[:6], strict=True))] == [
        ("keyed", "tagged"), ("keyed", "tagged"), ("keyed", "tagged"), ("exact", "two"), ("exact", "one"),
        ("exact", "one-two")]


def test_the_name_filter_only_skips_keys_that_cannot_hit() -> None:
    """The exact path builds a key only when the call's count and names fit the recordings of that count
    (`shapes`, a union per count): same-count recordings with other names, a call mixing their names, no
    args at all, a non-str key, and a count no recording has."""
    data = {"windtunnel_universe": 1, "tools": [{"name": "t", "input_schema": {}}],
            "recordings": [{"tool_name": "t", "args": {"a": 1, "b": 2}, "result": "ab"},
                           {"tool_name": "t", "args": {"c": 3, "d": 4}, "result": "cd"},
                           {"tool_name": "t", "args": {}, "result": "none"},
                           {"tool_name": "t", "args": {"1": "x"}, "result": "one"}],
            "matching": {"arg_keys": {"t": ["a"]}}}
    calls: list[Call] = [("t", {"b": 2, "a": 1}), ("t", {"d": 4, "c": 3}), ("t", {"a": 1, "d": 4}), ("t", {}),
                         ("t", {1: "x"}), ("t", {"1": "x"}), ("t", {"a": 1}), ("t", {"a": 1, "b": 2, "c": 3}),
                         ("t", {"c": 3, "b": 2}), ("t", "{}"), ("t", None)]
    for policy in ("fail_call", "nearest"):
        assert_same(load_universe({**data, "matching": {**data["matching"], "on_miss": policy}}), calls)
    engine = RecordedUniverse(load_universe(data))
    assert [(a.match, a.result) for a in map(engine.call, *zip(*calls[:8], strict=True))] == [
        ("exact", "ab"), ("exact", "cd"), ("keyed", "ab"), ("exact", "none"), ("exact", "one"), ("exact", "one"),
        ("keyed", "ab"), ("keyed", "ab")]
