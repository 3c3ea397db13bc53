"""`wt-otel import` as a user meets it: exit codes, selection, safety, atomicity."""

from __future__ import annotations

import ast
import gzip
import json
import re
import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from tests.support.paths import PRODUCERS, SHARED
from tests.support.spans import assistant, chat_span, tool, user
from wt_otel.cli import main

PRODUCERS = PRODUCERS
SPAN_ATTRS = PRODUCERS / "openai-v2-span-attrs" / "dump.otlp.jsonl"
CORPUS = SHARED / "conformance" / "contract-a" / "valid"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_import_writes_one_directory_per_session(tmp_path: Path):
    r = run("import", str(SPAN_ATTRS), "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    [d] = list((tmp_path / "out").iterdir())
    assert sorted(p.name for p in d.iterdir()) == sorted([
        "incident.wtin.json", "fixture.universe.json", "llm.cassette.json", "scenario.yaml", "scorer.py",
        "IMPORTED.md"])
    assert run("validate", str(tmp_path / "out")).exit_code == 0


def test_existing_directory_is_kept_unless_force(tmp_path: Path):
    out = tmp_path / "out"
    assert run("import", str(SPAN_ATTRS), "--out", str(out)).exit_code == 0
    [d] = list(out.iterdir())
    (d / "scorer.py").write_text("# my reviewed scorer\n")
    r = run("import", str(SPAN_ATTRS), "--out", str(out))
    assert r.exit_code == 1 and "already exists" in r.output and "--force" in r.output
    assert (d / "scorer.py").read_text() == "# my reviewed scorer\n"
    assert run("import", str(SPAN_ATTRS), "--out", str(out), "--force").exit_code == 0
    assert "unreviewed stub" in (d / "scorer.py").read_text()
    assert [p.name for p in out.iterdir()] == [d.name], "no temp dirs left behind"


def test_corrupt_line_is_reported_with_file_and_line_and_skipped(tmp_path: Path):
    dump = tmp_path / "mixed.otlp.jsonl"
    lines = SPAN_ATTRS.read_text().splitlines()
    dump.write_text("\n".join(lines[:1] + ['{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 7}]}]}]}',
                                           "{broken json"] + lines[1:]) + "\n")
    r = run("import", str(dump), "--out", str(tmp_path / "out"))
    assert r.exit_code == 1
    assert f"{dump}:2:" in r.output and f"{dump}:3:" in r.output
    assert len(list((tmp_path / "out").iterdir())) == 1, "the good lines still make their session"


def test_strict_aborts_before_writing_anything(tmp_path: Path):
    dump = tmp_path / "bad.otlp.jsonl"
    dump.write_text(SPAN_ATTRS.read_text() + "{broken\n")
    r = run("import", str(dump), "--out", str(tmp_path / "out"), "--strict")
    assert r.exit_code == 1 and "nothing was written" in r.output
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_gzip_dump_and_trace_id_selection(tmp_path: Path):
    gz = tmp_path / "dump.otlp.jsonl.gz"
    gz.write_bytes(gzip.compress(SPAN_ATTRS.read_bytes()))
    r = run("import", str(gz), "--out", str(tmp_path / "none"), "--trace-id", "0" * 32)
    assert r.exit_code == 0 and "1 not selected" in r.output
    assert not (tmp_path / "none").exists() or not any((tmp_path / "none").iterdir())
    trace_id = json.loads(SPAN_ATTRS.read_text().splitlines()[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0][
        "traceId"]
    r = run("import", str(gz), "--out", str(tmp_path / "one"), "--trace-id", trace_id.upper())
    assert r.exit_code == 0 and len(list((tmp_path / "one").iterdir())) == 1


def test_flagged_only_and_origin_ref_from_the_flag(tmp_path: Path, otlp_dump):
    def build(t):
        chat_span(t, inputs=[user("quiet")], outputs=[assistant("ok")])
        chat_span(t, inputs=[user("loud")], outputs=[assistant("boom")], **{"wt.incident": "INC-2026-412"})

    r = run("import", str(otlp_dump(build)), "--out", str(tmp_path / "out"), "--flagged-only")
    assert r.exit_code == 0, r.output
    [d] = list((tmp_path / "out").iterdir())
    assert d.name == "inc-2026-412"
    scenario = yaml.safe_load((d / "scenario.yaml").read_text())
    assert "origin:INC-2026-412" in scenario["tags"] and scenario["user_turns"] == ["loud"]
    assert json.loads((d / "incident.wtin.json").read_text())["source"]["ref"] == "INC-2026-412"


def test_envelope_input_becomes_a_scenario(tmp_path: Path):
    src = CORPUS / "runner_witnessed.wtin.json"
    if not src.exists():
        src = tmp_path / "e.wtin.json"
        src.write_text(json.dumps({"windtunnel_interchange": 1, "session": {"model": "m"},
                                   "source": {"ref": "incident-2026-06-30-412"},
                                   "messages": [user("a"), assistant("b")]}))
    r = run("import", str(src), "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    [d] = list((tmp_path / "out").iterdir())
    assert d.name == "incident-2026-06-30-412"
    assert run("validate", str(d)).exit_code == 0
    cassette = json.loads((d / "llm.cassette.json").read_text())
    calls = cassette["traces"][cassette["latest_trace_id"]]["calls"]
    assert calls and all(c.get("reconstructed_from_transcript") for c in calls)


def test_invalid_envelope_is_an_input_error(tmp_path: Path):
    bad = tmp_path / "bad.wtin.json"
    bad.write_text(json.dumps({"windtunnel_interchange": "1", "session": {"model": "m"}, "messages": []}))
    r = run("import", str(bad), "--out", str(tmp_path / "out"))
    assert r.exit_code == 1 and "windtunnel_interchange must be a positive integer" in r.output


def test_usage_errors_exit_2(tmp_path: Path):
    assert run("import", str(SPAN_ATTRS)).exit_code == 2  # no --out
    assert run("import", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path)).exit_code == 2
    assert run("import", str(SPAN_ATTRS), "--out", str(tmp_path), "--format", "csv").exit_code == 2


def test_unknown_format_is_a_clear_error(tmp_path: Path):
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    r = run("import", str(junk), "--out", str(tmp_path / "out"))
    assert r.exit_code == 1 and "otlp-json" in r.output


HOSTILE = ('"""\'\'\'\nimport os; os.system("touch /tmp/pwned")  # ```\n'
           '</details><script>alert(1)</script>\n: {x: y}\u2028')


def test_hostile_trace_text_lands_only_as_data(tmp_path: Path, otlp_dump):
    evil_tool = 'x"\n  - injected: true\n# '

    def build(t):
        chat_span(t, inputs=[user(HOSTILE), assistant(calls=[("c1", evil_tool, {"q": HOSTILE})]),
                             tool("c1", HOSTILE)],
                  outputs=[assistant(HOSTILE)], **{"wt.incident": "../../etc/passwd\x00\n"})

    out = tmp_path / "out"
    r = run("import", str(otlp_dump(build)), "--out", str(out))
    assert r.exit_code == 0, r.output
    [d] = list(out.iterdir())
    assert d.parent == out and d.name == "etc-passwd"

    tree = ast.parse((d / "scorer.py").read_text())
    assigned = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)}
    assert assigned["RECORDED_ANSWER"] == HOSTILE
    assert all(isinstance(n, ast.ImportFrom | ast.Assign | ast.FunctionDef | ast.Expr) for n in tree.body)
    assert not any(isinstance(n, ast.Import) for n in ast.walk(tree))

    scenario = yaml.safe_load((d / "scenario.yaml").read_text())
    assert scenario["user_turns"] == [HOSTILE.strip()]
    assert "injected" not in scenario
    assert run("validate", str(d)).exit_code == 0



def outside_code(md: str) -> str:
    """Markdown text outside fenced blocks and code spans (where markup would be live)."""
    md = re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", md, flags=re.S | re.M)
    return re.sub(r"(`+) .*? \1", "", md)


def test_hostile_flag_reaches_imported_md_only_inside_code(tmp_path: Path, otlp_dump):
    def build(t):
        chat_span(t, inputs=[user("x")], outputs=[assistant("y")], **{"wt.incident": HOSTILE})

    out = tmp_path / "out"
    assert run("import", str(otlp_dump(build)), "--out", str(out)).exit_code == 0
    [d] = list(out.iterdir())
    md = (d / "IMPORTED.md").read_text()
    assert "<script>" in md
    assert "<script>" not in outside_code(md) and "import os" not in outside_code(md)


def test_out_dir_is_never_escaped_by_slug(tmp_path: Path, otlp_dump):
    def build(t):
        for ref in ("..", "/", "a/../../b", "CON", ""):
            chat_span(t, inputs=[user("x")], outputs=[assistant("y")], **({"wt.incident": ref} if ref else {}))

    out = tmp_path / "out"
    assert run("import", str(otlp_dump(build)), "--out", str(out)).exit_code == 0
    made = list(out.iterdir())
    assert len(made) == 5 and all(p.parent == out and p.name not in (".", "..") for p in made)
    shutil.rmtree(out)


def test_capture_off_session_still_imports_and_says_so(tmp_path: Path, otlp_dump):
    def build(t):
        with t.start_as_current_span("invoke_agent"):
            chat_span(t)  # the instrumentation recorded no message content
            with t.start_as_current_span("execute_tool f", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                    "gen_ai.tool.call.arguments": '{"a": 1}', "gen_ai.tool.call.result": '"ok"'}):
                pass

    out = tmp_path / "out"
    r = run("import", str(otlp_dump(build)), "--out", str(out))
    assert r.exit_code == 0, r.output
    [d] = list(out.iterdir())
    assert run("validate", str(d)).exit_code == 0
    assert "not captured" in (d / "IMPORTED.md").read_text()
    scenario = yaml.safe_load((d / "scenario.yaml").read_text())
    assert scenario["user_turns"][0].startswith("TODO")
    universe = json.loads((d / "fixture.universe.json").read_text())
    assert universe["recordings"][0]["args"] == {"a": 1}


def test_lines_are_echoed_a_chunk_at_a_time_with_the_same_text(monkeypatch):
    """`wrote <dir>` per session: the text of one echo per line, in one write per chunk."""
    import click

    from wt_otel.cli import files

    calls: list[tuple[str, bool]] = []
    monkeypatch.setattr(click, "echo", lambda message, nl=True, err=False: calls.append(
        (message + ("\n" if nl else ""), err)))
    lines = [f"wrote out/s{i}" for i in range(5)] + ["warning: two\nlines"]
    files._echo_lines(lines, err=True, chunk=2)
    assert "".join(text for text, _ in calls) == "".join(f"{line}\n" for line in lines)
    assert len(calls) == 3 and all(err for _, err in calls)
    calls.clear()
    files._echo_lines([])
    assert calls == []
