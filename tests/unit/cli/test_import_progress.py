"""`wt-otel import` loads rich for its progress display only when rich could call stderr a terminal.

Why: rich costs ~25 ms of every start and the display is off whenever stderr is not a terminal (CI,
pipes, the import bench). The pre-check must never hide a display rich would have drawn.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from tests.support.paths import ROOT
from wt_otel.cli import files


@pytest.mark.parametrize("env", [{}, {"TTY_COMPATIBLE": "0"}, {"TTY_COMPATIBLE": "1"}, {"FORCE_COLOR": ""},
                                 {"FORCE_COLOR": "1"}])
def test_the_precheck_is_false_only_where_rich_says_no_terminal(monkeypatch, env) -> None:
    for key in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    if not files._may_be_terminal():
        assert not Console(stderr=True).is_terminal
    else:
        assert env  # only the environment can make a non-terminal stderr one


def test_no_terminal_no_rich_and_the_same_import(tmp_path) -> None:
    probe = ("import json, sys\nfrom wt_otel.cli import main\n"
             "try:\n    main(['import', sys.argv[1], '--out', sys.argv[2]])\n"
             "except SystemExit as e:\n    code = e.code\n"
             "print(json.dumps({'code': code, 'rich': 'rich' in sys.modules}))\n")
    dump = ROOT / "examples" / "dumps" / "support-agent.otlp.jsonl"
    outs = {}
    for force in ("", "1"):
        env = {k: v for k, v in os.environ.items() if k not in ("TTY_COMPATIBLE", "FORCE_COLOR")}
        if force:
            env["FORCE_COLOR"] = force  # rich draws (a transient display on stderr) and is loaded
        out = tmp_path / f"out{force}"
        done = subprocess.run([sys.executable, "-c", probe, str(dump), str(out)], capture_output=True, text=True,
                              timeout=120, env=env, check=False)
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["code"] in (0, None), done.stderr
        assert report["rich"] is bool(force)
        outs[force] = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert outs[""] == outs["1"] and outs[""]
