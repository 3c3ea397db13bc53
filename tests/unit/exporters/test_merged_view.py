"""The merged view over several serve instances' data dirs (issue 32, part 4): `wt-otel sessions list` with
`--data-dir` repeated lists every session once with its dir, and reports the conversations whose parts landed
on different instances (by conversation id, by a trace split between them, and, for a conversation without
any id, by the join rule) instead of merging or dropping them. Two real `Server`s over real OTLP/HTTP."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.conversations import RESOURCE, Turn, _msg, turn
from tests.unit.serve.test_joins_live import post, wait_written
from wt_otel.cli import main
from wt_otel.components import load
from wt_otel.model.spans import Link
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.server import Server

T0 = 1_000_000_000
LATER = T0 + 100_000


def _one(n: int, name: str, history: list[tuple[str, str]], answer: str, start: int, conv: str | None = None,
         resource: dict | None = None) -> Turn:
    return turn(n, 0, [_msg(role, text) for role, text in history], answer, start, conv,
                resource=resource)


def traffic() -> tuple[list[Turn], list[Turn]]:
    """What instance A and instance B received, as a trace-id split in front of them would send it."""
    c1 = [("user", "refund order 17?")]
    c1_answer = "Order 17 is refundable until Friday."
    lookalike = [("user", "hi")]
    a = [
        _one(0, "c0", [("user", "track my parcel")], "It left the depot.", T0, conv="conv-0"),
        _one(1, "c1", c1, c1_answer, T0 + 1000),
        _one(2, "c2", [("user", "only on A")], "yes", T0 + 2000),
        _one(3, "c4", lookalike, "hello", T0 + 3000),
    ]
    b = [
        _one(10, "c3", [("user", "only on B")], "yes", T0 + 4000),
        _one(11, "c0 again", [("user", "when does it arrive?")], "Tomorrow.", LATER, conv="conv-0"),
        _one(12, "c1 again", [*c1, ("assistant", c1_answer), ("user", "then refund it")], "Refunded.",
             LATER + 1000),
        # opens like c4 and continues it, but from another service instance: the rule never joins these
        _one(13, "c5", [*lookalike, ("assistant", "hello"), ("user", "bye")], "bye",
             LATER + 2000, resource={**RESOURCE, "service.instance.id": "faq-bot-2"}),
    ]
    a.append(_one(4, "c7", [("user", "book a table")], "For how many?", T0 + 6000))
    linked = _one(14, "c7 again", [("user", "four")], "Booked.", LATER + 3000)  # resends nothing: a span link
    linked.records[0].links = [Link(a[-1].trace_id, a[-1].records[0].span_id)]
    b.append(linked)
    split = _one(20, "c6", [("user", "a trace cut in two")], "ok", T0 + 5000)
    agent, chat = split.records
    a.append(Turn(split.trace_id, [agent], 6))  # the root span went to A, its chat span to B
    b.append(Turn(split.trace_id, [chat], 6))
    return a, b


@pytest.fixture(scope="module")
def two_dirs() -> Iterator[tuple[Path, Path, list[Turn], list[Turn]]]:
    root = Path(tempfile.mkdtemp(prefix="wt-merged-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    a_turns, b_turns = traffic()
    servers = []
    try:
        for name in ("a", "b"):
            config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                                 data_dir=root / name, datadir={"render": "flagged", "workers": 0},
                                 assembler=AssemblerConfig(idle_timeout=0.3, grace=0.05))
            servers.append(Server(config, quiet=True, warn=lambda _m: None).start())
        for server, turns in zip(servers, (a_turns, b_turns), strict=True):
            assert server.http_url
            post(server.http_url, turns)
        for server, turns in zip(servers, (a_turns, b_turns), strict=True):
            wait_written(server, len(turns))
    finally:
        for server in servers:
            server.stop()
    yield root / "a", root / "b", a_turns, b_turns
    shutil.rmtree(root, ignore_errors=True)


def listed(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, ["sessions", "list", *args])
    return res.exit_code, res.stdout, res.stderr


def test_every_session_once_with_its_dir_and_each_split_reported(two_dirs: tuple) -> None:
    a, b, a_turns, b_turns = two_dirs
    code, out, err = listed("--data-dir", str(a), "--data-dir", str(b), "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert sorted((r["data_dir"], r["key"]) for r in rows) == sorted(
        [(str(a), t.trace_id) for t in a_turns] + [(str(b), t.trace_id) for t in b_turns])
    by = {(Path(r["data_dir"]).name, r["key"]): r for r in rows}
    split_pairs = {("a", a_turns[0].trace_id): ("b", b_turns[1].trace_id, "conversation conv-0"),
                   ("a", a_turns[1].trace_id): ("b", b_turns[2].trace_id, "continues the transcript of"),
                   ("a", a_turns[4].trace_id): ("b", b_turns[4].trace_id, "links to"),
                   ("a", a_turns[5].trace_id): ("b", b_turns[5].trace_id, f"session key {a_turns[5].trace_id}")}
    for (dir_a, key_a), (dir_b, key_b, why) in split_pairs.items():
        left, right = by[(dir_a, key_a)], by[(dir_b, key_b)]
        assert left["split"] and right["split"]
        assert [(Path(o["data_dir"]).name, o["key"]) for o in left["split_with"]] == [(dir_b, key_b)]
        assert [(Path(o["data_dir"]).name, o["key"]) for o in right["split_with"]] == [(dir_a, key_a)]
        assert any(why in e for e in left["split_evidence"]), left["split_evidence"]
    alone = [r for r in rows if not r["split"]]
    assert len(alone) == len(rows) - 8 and all(r["split_with"] == [] for r in alone)  # c2, c3, c4 and c5

    code, out, err = listed("--data-dir", str(a), "--data-dir", str(b))
    lines = out.splitlines()
    assert code == 0 and sum(line.startswith((f"{a}  ", f"{b}  ")) for line in lines) == len(rows)
    splits = [line for line in lines if line.startswith("split across 2 data dirs")]
    assert len(splits) == 4 and any("(conversation conv-0)" in line for line in splits)
    assert f"{len(rows)} session(s) in {a}, {b}; 4 conversation(s) split across data dirs" in err


def test_index_only_finds_what_the_index_lines_say_and_one_dir_is_as_before(two_dirs: tuple) -> None:
    a, b, a_turns, _ = two_dirs
    code, out, _err = listed("--data-dir", str(a), "--data-dir", str(b), "--index-only")
    splits = [line for line in out.splitlines() if line.startswith("split across")]
    assert code == 0 and len(splits) == 2 and not any("continues" in line or "links" in line for line in splits)
    code, out, _err = listed("--data-dir", str(a), "--format", "json")
    assert code == 0 and [set(r) for r in json.loads(out)] == [set(load("exporters", "sessions")(a).list()[0]
                                                                   .to_dict())] * len(a_turns)
    code, out, _err = listed("--data-dir", str(a))
    assert code == 0 and not out.startswith(str(a)) and "split" not in out


def test_a_dir_named_twice_is_read_once_and_not_a_data_dir_is_a_usage_error(two_dirs: tuple) -> None:
    a, b, _, _ = two_dirs
    assert listed("--data-dir", str(a), "--data-dir", str(a / "."))[:2] == listed("--data-dir", str(a))[:2]
    code, _out, err = listed("--data-dir", str(a), "--data-dir", str(b / "sessions"))
    assert code == 2 and "not a wt-otel data dir" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="named twice"):
        load("exporters", "sessions").merged([a, b, a])


def test_render_over_several_dirs_renders_each_part_where_it_lives(two_dirs: tuple) -> None:
    """Last: it renders (appends revisions to) the shared dirs. `conv-0` is a slug in both: both parts."""
    a, b, _, _ = two_dirs
    res = CliRunner().invoke(main, ["sessions", "render", "conv-0", "--data-dir", str(a), "--data-dir", str(b)])
    assert res.exit_code == 0, res.output
    assert sorted(res.stdout.splitlines()) == [f"rendered {a}/sessions/conv-0 (revision 2)",
                                               f"rendered {b}/sessions/conv-0 (revision 2)"]
    assert (a / "sessions" / "conv-0" / "incident.wtin.json").is_file()
    assert (b / "sessions" / "conv-0" / "incident.wtin.json").is_file()
    res = CliRunner().invoke(main, ["sessions", "render", "nope", "--data-dir", str(a), "--data-dir", str(b)])
    assert res.exit_code == 2 and f"no session 'nope' in any of {a}, {b}" in res.stderr
