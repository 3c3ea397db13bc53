"""`wt-otel import` on hostile OTLP/JSON (issue 13, item 1): it never dies with a traceback, it reports
`file:line` for what it cannot read, keeps values no encoder accepts as text, and writes every other session."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tests.support.hostile import HUGE_INT_ARGS, genai_session, tid, to_otlp_json
from wt_otel.cli import main


def _line(spans) -> str:
    return json.dumps(to_otlp_json(spans))


def test_import_keeps_going_past_hostile_values(tmp_path):
    victim = genai_session(tid(1), args=HUGE_INT_ARGS, conversation="conv-shared")
    sharing = genai_session(tid(2), conversation="conv-shared", start=50_000)  # same conversation: same session
    plain = genai_session(tid(3))
    big_int = to_otlp_json(genai_session(tid(4)))
    attrs = big_int["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    attrs.append({"key": "app.counter", "value": {"intValue": str(10**30)}})
    bad_time = to_otlp_json(genai_session(tid(5)))
    bad_time["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = str(10**400)
    surrogate = _line(genai_session(tid(6), reply="x")).replace('"x"', '"\\udc80"')  # a lone surrogate, escaped
    dump = tmp_path / "hostile.otlp.jsonl"
    dump.write_text("\n".join([_line(victim), _line(sharing), _line(plain), json.dumps(big_int),
                               json.dumps(bad_time), surrogate]) + "\n")
    result = CliRunner().invoke(main, ["import", str(dump), "--out", str(tmp_path / "out")])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert f"{dump}:5:" in result.output and "timestamp" in result.output  # file:line, then on
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert len(written) == 4, (written, result.output)  # victim+sharing (one session), plain, big int, surrogate
    shared = json.loads((tmp_path / "out" / "conv-shared" / "incident.wtin.json").read_text())
    assert {"account": "12345678901234567890123"} in [c["args"] for c in shared["witnessed_calls"]]
    assert any("kept as text" in w for w in shared["warnings"])
