"""Scenario names say what the conversation was about (issue 30, item 10): an opaque id (a trace id, a UUID)
gives way to the first user turn plus a short id; trace text is untrusted, so the name is a bounded slug."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from wt_otel._util.fsutil import MAX_SLUG, readable_name, unique_slug
from wt_otel.cli import main

TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.mark.parametrize(("ident", "turn", "expected"), [
    (TRACE, "What is the phone number on file for Bluewing?", "what-is-the-phone-number-on-file-for-1c80319c"),
    ("3f9a1c2e-1111-2222-3333-444455556666", "Where is order A-1?", "where-is-order-a-1-55556666"),
    ("conv_3f9a1c2e11112222333344445555", "Héllo, café!", "hello-cafe-44445555"),
    (TRACE, None, "session-1c80319c"),
    (TRACE, "日本語だけ", "session-1c80319c"),
    ("INC-2026-1129-8", "anything", "inc-2026-1129-8"),  # a name already: kept
    ("conv-bluewing-email", "anything", "conv-bluewing-email"),
])
def test_an_opaque_id_becomes_the_first_turn_plus_a_short_id(ident: str, turn: str | None, expected: str) -> None:
    assert readable_name(ident, turn) == expected


@pytest.mark.parametrize("turn", ["../../../etc/passwd", "..", "a/b\\c\x00d\nrm -rf /", "x" * 5000, "-" * 80,
                                  "CON", " . ", "\u202e\u200bevil"])
def test_hostile_turns_give_bounded_file_safe_names(turn: str) -> None:
    name = readable_name(TRACE, turn)
    assert 0 < len(name) <= MAX_SLUG and set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
    assert not name.startswith("-") and ".." not in name and name.endswith("-1c80319c")


def test_names_are_stable_and_unique() -> None:
    taken: set[str] = set()
    a = unique_slug(readable_name(TRACE, "Where is A-1?"), TRACE, taken)
    b = unique_slug(readable_name(TRACE, "Where is A-1?"), "another-key", taken)  # the same trace id prefix
    assert a == readable_name(TRACE, "Where is A-1?") == "where-is-a-1-1c80319c" and b != a
    assert len(taken) == 2


def _span_line(trace_id: str, question: str) -> str:
    def attr(key: str, value: str) -> dict:
        return {"key": key, "value": {"stringValue": value}}

    span = {"traceId": trace_id, "spanId": "00f067aa0ba902b7", "name": "chat m", "kind": 3,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
            "attributes": [attr("gen_ai.operation.name", "chat"), attr("gen_ai.request.model", "m"),
                           attr("gen_ai.input.messages", json.dumps(
                               [{"role": "user", "parts": [{"type": "text", "content": question}]}])),
                           attr("gen_ai.output.messages", json.dumps(
                               [{"role": "assistant", "parts": [{"type": "text", "content": "It shipped."}],
                                 "finish_reason": "stop"}]))]}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [attr("service.name", "shop")]},
                                          "scopeSpans": [{"spans": [span]}]}]})


def test_import_names_a_session_without_a_conversation_id_by_its_first_turn(tmp_path: Path) -> None:
    dump = tmp_path / "dump.otlp.jsonl"
    dump.write_text(_span_line(TRACE, "Where is my order A-1? It is late") + "\n"
                    + _span_line("1" * 32, "../../etc/passwd") + "\n")
    res = CliRunner().invoke(main, ["import", str(dump), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["etc-passwd-11111111", "where-is-my-order-a-1-it-is-late-1c80319c"], names
