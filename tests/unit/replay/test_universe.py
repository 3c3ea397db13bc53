"""The universe engine: matching levels, miss policies, sequence mode, the call log, freezing."""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.contracts.problems import ContractError
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.universe import RecordedUniverse, empty_result, freeze_universe


def make(recordings: list[dict], matching: dict | None = None, tools: list[dict] | None = None, **kw: Any):
    names = dict.fromkeys(r["tool_name"] for r in recordings)
    tools = tools or [{"name": n, "input_schema": {"type": "object"}} for n in names]
    data = {"windtunnel_universe": 1, "tools": tools, "recordings": recordings, "matching": matching or {}}
    return RecordedUniverse(load_universe(data), **kw)


LOOKUP = [
    {"tool_name": "lookup", "args": {"query": "Bluewing", "region": "eu"}, "result": {"id": 1}},
    {"tool_name": "lookup", "args": {"query": "Acme", "region": "us"}, "result": {"id": 2}},
]


# ---------------------------------------------------------------- matching levels


def test_exact_match_ignores_key_order() -> None:
    u = make(LOOKUP)
    a = u.call("lookup", {"region": "eu", "query": "Bluewing"})
    assert (a.result, a.match, a.recording, a.is_error, a.divergence) == ({"id": 1}, "exact", 0, False, None)


@pytest.mark.parametrize("recorded, sent", [(1, 1.0), (1, True), (1.0, True), (0, False), ("1", 1), (None, 0)])
def test_exact_scalars_never_collide_across_json_types(recorded: Any, sent: Any) -> None:
    u = make([{"tool_name": "t", "args": {"n": recorded}, "result": "hit"}])
    assert u.call("t", {"n": recorded}).match == "exact"
    assert u.call("t", {"n": sent}).match == "fail_call"


def test_nested_args_are_canonical() -> None:
    u = make([{"tool_name": "t", "args": {"f": {"b": [1, {"y": 2, "x": 1}], "a": None}}, "result": "ok"}])
    assert u.call("t", {"f": {"a": None, "b": [1, {"x": 1, "y": 2}]}}).match == "exact"
    assert u.call("t", {"f": {"a": None, "b": [{"x": 1, "y": 2}, 1]}}).match == "fail_call"  # list order counts


def test_keyed_match_ignores_other_args_and_is_marked() -> None:
    u = make(LOOKUP, {"arg_keys": {"lookup": ["query"]}})
    a = u.call("lookup", {"query": "Acme", "verbose": True})
    assert (a.result, a.match, a.recording, a.divergence) == ({"id": 2}, "keyed", 1, None)
    assert u.call_log()[0]["match"] == "keyed"


def test_keyed_needs_at_least_one_key_present() -> None:
    u = make([{"tool_name": "t", "args": {"other": 1}, "result": "x"}], {"arg_keys": {"t": ["query"]}})
    assert u.call("t", {"verbose": True}).match == "fail_call"


def test_json_encoded_args_are_decoded() -> None:
    u = make(LOOKUP)
    assert u.call("lookup", '{"query": "Acme", "region": "us"}').match == "exact"
    with pytest.raises(ValueError, match="must be a JSON object"):
        u.call("lookup", "not json")


def test_lookups_are_indexed_not_scanned() -> None:
    """Exact and keyed hits never touch `nearest`'s per-recording pair sets: they are dict lookups."""
    recs = [{"tool_name": "t", "args": {"k": i, "x": "a"}, "result": i} for i in range(2000)]
    u = make(recs, {"arg_keys": {"t": ["k"]}, "on_miss": "nearest"})
    assert u.call("t", {"k": 1999, "x": "a"}).recording == 1999
    assert u.call("t", {"k": 1500, "x": "b"}).match == "keyed"
    assert u._index["t"].pairs == {}


# ---------------------------------------------------------------- miss policies


def test_fail_call_is_the_default_and_logs_divergence(caplog: pytest.LogCaptureFixture) -> None:
    u = make(LOOKUP)
    with caplog.at_level(logging.WARNING, logger="wt_otel.replay.universe"):
        a = u.call("lookup", {"query": "Nobody"})
    assert a.is_error and a.match == "fail_call"
    assert a.result == {"error": "no_recorded_result", "tool": "lookup", "args": {"query": "Nobody"}}
    assert a.divergence == {"policy": "fail_call", "matched": None}
    assert "universe_divergence: tool=lookup policy=fail_call" in caplog.text
    entry = u.call_log()[0]
    assert entry["extra"]["divergence"] == {"policy": "fail_call", "matched": None}  # the spec's place
    assert entry["error"] == "no_recorded_result" and entry["is_error"] is True


@pytest.mark.parametrize(
    "schema, expected",
    [({"type": "array"}, []), ({"type": "object"}, {}), ({"type": "string"}, ""), (None, ""),
     ({"type": ["null", "array"]}, [])],
)
def test_empty_is_shaped_by_result_schema(schema: dict | None, expected: Any) -> None:
    assert empty_result(schema) == expected
    tool = {"name": "t", "input_schema": {"type": "object"}, **({"result_schema": schema} if schema else {})}
    u = make([{"tool_name": "t", "args": {"a": 1}, "result": "x"}], {"on_miss": "empty"}, tools=[tool])
    a = u.call("t", {"a": 2})
    assert (a.result, a.is_error, a.match) == (expected, False, "empty")
    assert a.divergence == {"policy": "empty", "matched": None}


def test_nearest_picks_most_shared_pairs_then_recording_order() -> None:
    recs = [
        {"tool_name": "s", "args": {"q": "a", "page": 1, "lang": "en"}, "result": "r0"},
        {"tool_name": "s", "args": {"q": "b", "page": 2, "lang": "en"}, "result": "r1"},
        {"tool_name": "s", "args": {"q": "b", "page": 2, "lang": "fr"}, "result": "r2"},
    ]
    u = make(recs, {"on_miss": "nearest"})
    a = u.call("s", {"q": "b", "page": 2, "lang": "de"})  # ties r1/r2 on two pairs -> first
    assert (a.result, a.match, a.recording, a.divergence) == ("r1", "nearest", 1, {"policy": "nearest", "matched": 1})
    assert u.call("s", {"q": "z", "page": 2, "lang": "fr"}).recording == 2
    assert u.call("s", {"q": "a", "page": "1"}).recording == 0  # "1" is not 1; q still matches


def test_nearest_never_answers_with_zero_overlap(caplog: pytest.LogCaptureFixture) -> None:
    u = make(LOOKUP, {"on_miss": "nearest"})
    with caplog.at_level(logging.WARNING, logger="wt_otel.replay.universe"):
        a = u.call("lookup", {"query": "Nobody", "region": "apac"})
    assert a.is_error and a.match == "fail_call" and a.recording is None
    assert a.result["error"] == "no_recorded_result" and "shares an argument" in a.result["detail"]
    assert a.divergence["policy"] == "nearest" and a.divergence["matched"] is None
    assert a.divergence["fallback"] == "fail_call"
    assert "universe_divergence: tool=lookup policy=nearest" in caplog.text


def test_synthesize_hook_gets_name_args_universe() -> None:
    seen = []

    def hook(name: str, args: dict, universe: Any) -> Any:
        seen.append((name, args, universe))
        return {"synthetic": args["query"]}

    u = make(LOOKUP, {"on_miss": "synthesize"}, synthesize=hook)
    a = u.call("lookup", {"query": "Nobody"})
    assert (a.result, a.is_error, a.match) == ({"synthetic": "Nobody"}, False, "synthesize")
    assert a.divergence == {"policy": "synthesize", "matched": None}
    assert seen == [("lookup", {"query": "Nobody"}, u.universe)]


def test_synthesize_without_hook_or_with_failing_hook_is_fail_call() -> None:
    u = make(LOOKUP, {"on_miss": "synthesize"})
    a = u.call("lookup", {"query": "Nobody"})
    assert a.is_error and a.match == "fail_call" and "no synthesize hook" in a.result["detail"]

    def broken(*_: Any) -> Any:
        raise RuntimeError("model down")

    u = make(LOOKUP, {"on_miss": "synthesize"}, synthesize=broken)
    a = u.call("lookup", {"query": "Nobody"})
    assert a.is_error and "RuntimeError: model down" in a.result["detail"]


def test_per_tool_on_miss_overrides_default() -> None:
    recs = LOOKUP + [{"tool_name": "pay", "args": {"amount": 5}, "result": "ok"}]
    u = make(recs, {"on_miss": "empty", "per_tool_on_miss": {"pay": "fail_call"}})
    assert u.call("lookup", {"query": "x"}).match == "empty"
    assert u.call("pay", {"amount": 6}).match == "fail_call"
    assert u.policy_for("pay") == "fail_call" and u.policy_for("lookup") == "empty"


def test_unknown_tool_is_a_logged_fail_call() -> None:
    u = make(LOOKUP, {"on_miss": "empty"})
    a = u.call("delete_everything", {})
    assert a.is_error and a.match == "fail_call" and "not in the universe" in a.result["detail"]
    assert u.call_log()[0]["extra"]["divergence"]["policy"] == "empty"


# ---------------------------------------------------------------- state


def test_stateless_retry_is_not_a_divergence() -> None:
    u = make(LOOKUP)
    answers = [u.call("lookup", {"query": "Acme", "region": "us"}) for _ in range(3)]
    assert {(a.result["id"], a.match) for a in answers} == {(2, "exact")}
    assert all("extra" not in e for e in u.call_log())


def test_sequence_mode_consumes_per_run_and_reset_rewinds() -> None:
    tools = [{"name": "next", "input_schema": {"type": "object"}, "mode": "sequence"}]
    recs = [{"tool_name": "next", "args": {}, "result": n} for n in (1, 2, 3)]
    u = make(recs, tools=tools)
    assert [u.call("next", {}).result for _ in range(3)] == [1, 2, 3]
    a = u.call("next", {})
    assert a.match == "fail_call" and a.divergence == {"policy": "fail_call", "matched": None}
    u.reset()
    assert u.call_log() == []
    assert u.call("next", {}).result == 1


def test_sequence_mode_matches_within_args() -> None:
    tools = [{"name": "page", "input_schema": {"type": "object"}, "mode": "sequence"}]
    recs = [
        {"tool_name": "page", "args": {"cursor": "a"}, "result": "A1"},
        {"tool_name": "page", "args": {"cursor": "b"}, "result": "B1"},
        {"tool_name": "page", "args": {"cursor": "a"}, "result": "A2"},
    ]
    u = make(recs, {"on_miss": "nearest"}, tools=tools)
    assert [u.call("page", {"cursor": c}).result for c in "aab"] == ["A1", "A2", "B1"]
    assert u.call("page", {"cursor": "a"}).match == "fail_call"  # exhausted, and nearest has nothing left


def test_recorded_errors_are_answered_as_errors() -> None:
    recs = [
        {"tool_name": "t", "args": {"a": 1}, "result": {"message": "timeout"}, "error": True},
        {"tool_name": "t", "args": {"a": 2}, "error": "permission denied"},
        {"tool_name": "t", "args": {"a": 3}, "result": {"error": "looks bad but is data"}},
    ]
    u = make(recs)
    a1, a2, a3 = (u.call("t", {"a": i}) for i in (1, 2, 3))
    assert (a1.result, a1.is_error, a1.match) == ({"message": "timeout"}, True, "exact")
    assert (a2.result, a2.is_error) == ("permission denied", True)
    assert a3.is_error is False  # an "error" key in a normal result is data
    log = u.call_log()
    assert [e.get("error") for e in log] == [True, "permission denied", None]
    assert all("extra" not in e for e in log)


def test_call_log_shape_and_on_call() -> None:
    seen: list[dict] = []
    u = make(LOOKUP, on_call=seen.append)
    u.call("lookup", {"query": "Bluewing", "region": "eu"})
    (entry,) = u.call_log()
    assert set(entry) == {"tool_name", "args", "result", "match", "recording", "is_error", "timestamp_ms"}
    assert entry["timestamp_ms"] > 1_600_000_000_000
    assert seen == [entry]


@pytest.mark.parametrize("matching", [{}, {"on_miss": "empty"}, {"arg_keys": {"lookup": ["query"]}}])
@pytest.mark.parametrize("mode", ["stateless", "sequence"])
def test_the_log_keeps_the_args_as_called_whatever_the_caller_does_next(matching: dict, mode: str) -> None:
    """The engine keeps no reference to the caller's dict: the caller changing it afterwards (a value replaced, a
    name added or removed, the dict cleared) changes neither the log nor what `on_call` was given, on every path
    (exact, keyed, miss; lock-free and locked)."""
    seen: list[dict] = []
    tools = [{"name": "lookup", "input_schema": {}, "mode": mode}]
    u = make(LOOKUP, matching, tools=tools, on_call=seen.append)
    calls = [{"region": "eu", "query": "Bluewing"}, {"query": "Acme", "verbose": True}, {"query": "Nobody"},
             {"query": "Acme", "region": "us"}]
    answers = [u.call("lookup", args) for args in calls]
    as_called = [dict(args) for args in calls]
    before = [repr(e) for e in u.call_log()]
    for args in calls:
        args["query"] = "changed"
        args["extra"] = 1
        del args["extra"], args["query"]
        args["later"] = True
    assert [repr(e) for e in u.call_log()] == before
    assert [e["args"] for e in u.call_log()] == as_called and [list(e["args"]) for e in u.call_log()] == [
        list(a) for a in as_called]  # the same names, in the order called
    assert [e["args"] for e in seen] == as_called
    # a fail_call answer carries the args: the engine's copy, not the caller's dict
    assert [a.result["args"] for a in answers if a.match == "fail_call"] == [
        c for c, a in zip(as_called, answers, strict=True) if a.match == "fail_call"]
    calls[0].clear()
    assert [repr(e) for e in u.call_log()] == before


def test_a_dict_changed_mid_call_by_another_thread_leaves_the_log_whole() -> None:
    """The lock-free path reads the caller's dict twice (its names, then its values). A profile hook changes the
    dict in between, as another thread could: the entry is then a snapshot of the dict, and the log stays whole."""
    u = make(LOOKUP)
    args = {"region": "eu", "query": "Bluewing"}
    meddled: list[str] = []

    def meddle(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and getattr(arg, "__name__", "") == "values" and getattr(arg, "__self__", None) is args:
            meddled.append("late")
            args["late"] = 1

    sys.setprofile(meddle)
    try:
        answer = u.call("lookup", args)
    finally:
        sys.setprofile(None)
    u.call("lookup", {"query": "Acme", "region": "us"})
    assert meddled == ["late"] and answer.match == "exact"
    assert [e["args"] for e in u.call_log()] == [{"region": "eu", "query": "Bluewing", "late": 1},
                                                 {"query": "Acme", "region": "us"}]


def test_concurrent_calls_lose_no_log_entry_and_consume_each_recording_once() -> None:
    """Stateless hits append to the log without the lock; sequence tools keep it. From 8 threads at once:
    every call is logged whole (its own args with its own answer), and each sequence recording is
    consumed exactly once."""
    recs = [{"tool_name": "lookup", "args": {"query": f"q{i}"}, "result": i} for i in range(50)]
    recs += [{"tool_name": "page", "args": {}, "result": p} for p in range(40)]
    tools = [{"name": "lookup", "input_schema": {}}, {"name": "page", "input_schema": {}, "mode": "sequence"}]
    u = make(recs, {"arg_keys": {"lookup": ["query"]}}, tools=tools)
    pages: list[Any] = []

    def worker(n: int) -> None:
        for i in range(200):
            q = (n * 7 + i) % 50
            a = u.call("lookup", {"query": f"q{q}", **({"verbose": True} if i % 2 else {})})
            assert a.result == q
            if i % 40 == 0:
                pages.append(u.call("page", {}).result)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log = u.call_log()
    assert len(log) == 8 * 200 + len(pages) == 8 * 205
    assert all(e["result"] == int(e["args"]["query"][1:]) for e in log if e["tool_name"] == "lookup")
    assert {e["match"] for e in log if e["tool_name"] == "lookup"} == {"exact", "keyed"}
    assert sorted(pages) == list(range(40))  # 40 calls, 40 recordings: each answered once, none twice


# ---------------------------------------------------------------- freezing


def _run_log() -> tuple[RecordedUniverse, list[dict]]:
    u = make(LOOKUP, {"on_miss": "empty", "arg_keys": {"lookup": ["query"]}})
    u.call("lookup", {"query": "Bluewing", "region": "eu"})
    u.call("lookup", {"query": "Bluewing", "region": "eu"})  # retry
    u.call("lookup", {"query": "Acme", "verbose": True})  # keyed: not a divergence
    u.call("lookup", {"query": "Nobody"})  # empty: divergent
    return u, u.call_log()


def test_freeze_excludes_divergent_calls_unless_asked() -> None:
    u, log = _run_log()
    frozen = freeze_universe(log, u.universe.tools, u.universe.matching)
    assert [r.args for r in frozen.recordings] == [{"query": "Bluewing", "region": "eu"},
                                                   {"query": "Acme", "verbose": True}]
    assert frozen.matching.arg_keys == {"lookup": ["query"]} and frozen.matching.on_miss == "empty"
    every = freeze_universe(log, u.universe.tools, u.universe.matching, include_divergent=True)
    assert every.recordings[-1].args == {"query": "Nobody"} and every.recordings[-1].result == ""


def test_freeze_round_trips_and_keeps_errors() -> None:
    u = make([{"tool_name": "t", "args": {"a": 1}, "error": "denied"},
              {"tool_name": "t", "args": {"a": 2}, "result": 5}])
    u.call("t", {"a": 1})
    u.call("t", {"a": 2})
    frozen = freeze_universe(u.call_log(), [t.model_dump() for t in u.universe.tools])
    again = RecordedUniverse(frozen)
    assert again.call("t", {"a": 1}).is_error and again.call("t", {"a": 2}).result == 5


def test_freeze_rejects_calls_to_unlisted_tools() -> None:
    _, log = _run_log()
    with pytest.raises(ContractError, match="must name a tool listed in tools"):
        freeze_universe(log, [{"name": "other", "input_schema": {"type": "object"}}])


# ---------------------------------------------------------------- CLI: freeze


def test_cli_freeze_writes_a_valid_universe(tmp_path: Path) -> None:
    u, log = _run_log()
    source = tmp_path / "src.universe.json"
    source.write_text(json.dumps(u.universe.model_dump(mode="json", exclude_none=True)))
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps({"calls": log, "count": len(log)}))
    out = tmp_path / "out" / "new.universe.json"
    runner = CliRunner()
    res = runner.invoke(main, ["universe", "freeze", str(calls), "--tools-from", str(source), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "2 recording(s) from 4 call(s)" in res.output
    frozen = load_universe(json.loads(out.read_text()))
    assert len(frozen.recordings) == 2

    res = runner.invoke(main, ["universe", "freeze", str(calls), "--tools-from", str(source), "--out", str(out),
                               "--include-divergent"])
    assert res.exit_code == 0 and len(load_universe(json.loads(out.read_text())).recordings) == 3


def test_cli_freeze_reports_bad_input(tmp_path: Path) -> None:
    source = tmp_path / "src.universe.json"
    source.write_text(json.dumps({"windtunnel_universe": 1, "tools": [{"name": "x", "input_schema": {}}]}))
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps([{"tool_name": "unlisted", "args": {}, "result": 1, "divergence": None}]))
    res = CliRunner().invoke(main, ["universe", "freeze", str(calls), "--tools-from", str(source),
                                    "--out", str(tmp_path / "o.json")])
    assert res.exit_code == 1 and "must name a tool listed in tools" in res.output
    calls.write_text('{"nope": 1}')
    res = CliRunner().invoke(main, ["universe", "freeze", str(calls), "--tools-from", str(source),
                                    "--out", str(tmp_path / "o.json")])
    assert res.exit_code == 1 and "list of calls" in res.output


def test_lookup_keys_kept_for_the_universes_lifetime_are_their_own_size() -> None:
    """orjson (3.12 on) hands back its output in a buffer of >= 4 KiB whatever the length; the engine keeps two
    keys per recording for its lifetime, so `canonical_bytes` copies each to its size (10k recordings held
    ~80 MiB of keys, ~2 MiB now). Measured as the memory 1,000 kept keys hold."""
    import tracemalloc

    from wt_otel.model.parts import canonical_bytes

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [canonical_bytes({"query": f"client {n}", "region": "eu"}) for n in range(1000)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept[0] == b'{"query":"client 0","region":"eu"}'
    assert held < 1000 * 512, f"{held / 1000:.0f} bytes per 36-byte key"
