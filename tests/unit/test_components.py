"""Plug-ins are checked when loaded: a registered object that lacks its interface is refused, by name.

Each test installs a small third-party package on the fly (tests/support/plugins.py): a module
and a dist-info whose entry points importlib.metadata reads like any pip-installed package's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.plugins import install
from wt_otel.components import KINDS, PluginError, UnknownComponent, load, load_plugin, names
from wt_otel.contracts.inject import RuntimeSpecError
from wt_otel.replay.runtimes import resolve_runtime, runtime_names

ROOT = Path(__file__).resolve().parents[2]

SOURCE = '''
from pathlib import Path
from wt_otel.components import ResultsFormatSpec, StageType

class NoWrite:
    name, suffix = "nowrite", ".nw"

def write_lines(results, out: Path) -> None:
    out.write_text("".join(f"{r.scenario_id} {r.verdict}\\n" for r in results.scenarios))

LINES = ResultsFormatSpec("lines", ".lines", write_lines)
NO_WRITE = NoWrite()
NOT_A_STAGE = object()
BAD_KIND = StageType("bad-kind", "exporter", lambda c, ctx, n: None)
BAD_MODEL = StageType("bad-model", "session", lambda c, ctx, n: None, config_model=dict)

class HalfRuntime:
    name, url, warnings = "half", None, []
    def reset(self): ...
    def close(self): ...

class EchoRuntime(HalfRuntime):
    name = "echo"
    def surface(self): ...
    def inject(self, session_id, text): ...

def half(arg, *, url=None, timeout_s=None):
    return HalfRuntime()

def echo(arg, *, url=None, timeout_s=None):
    rt = EchoRuntime()
    rt.url = arg
    return rt

def picky(arg, *, url=None, timeout_s=None):
    raise ValueError("picky needs an argument like picky:fast")

raise_on_import = None
'''


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = install(tmp_path / "site", "wt_test_plugins", SOURCE, {
        "wt_otel.results_formats": {"lines": "wt_test_plugins:LINES", "nowrite": "wt_test_plugins:NO_WRITE"},
        "wt_otel.stages": {"not-a-stage": "wt_test_plugins:NOT_A_STAGE", "bad-kind": "wt_test_plugins:BAD_KIND",
                           "bad-model": "wt_test_plugins:BAD_MODEL",
                           "missing-module": "wt_test_no_such_module:STAGE"},
        "wt_otel.runtimes": {"half": "wt_test_plugins:half", "echo": "wt_test_plugins:echo",
                             "picky": "wt_test_plugins:picky"},
        "wt_otel.sinks": {"nowrite": "wt_test_plugins:NOT_A_STAGE"},
    })
    monkeypatch.syspath_prepend(str(root))
    return root


def test_every_kind_has_its_group_and_the_built_ins_are_registered():
    assert KINDS == {"stages": "wt_otel.stages", "sinks": "wt_otel.sinks",
                     "results_formats": "wt_otel.results_formats", "runtimes": "wt_otel.runtimes"}
    assert {"genai-filter", "assembler", "flagger", "redactor", "datadir", "auto-replay"} <= set(names("stages"))
    assert {"junit", "json"} <= set(names("results_formats"))
    assert "scenario-dir" in names("sinks") and "http_inject" in names("runtimes")
    for kind in KINDS:
        for name in names(kind):
            if not name.startswith(("not-", "bad-", "missing-", "nowrite", "half", "echo", "picky", "lines")):
                load_plugin(kind, name)  # every built-in passes its own check


def test_the_old_entry_point_names_still_load():
    for name in ("junit", "json", "ledger", "table", "result-spans", "scenario-dir", "datadir"):
        assert load("exporters", name) is not None
    for name in ("genai-filter", "assembler", "flagger", "redactor", "auto-replay", "sdk-span-processor"):
        assert load("processors", name) is not None


def test_a_results_format_without_write_is_refused_by_name(plugins):
    with pytest.raises(PluginError) as err:
        load_plugin("results_formats", "nowrite")
    msg = str(err.value)
    assert "'nowrite'" in msg and "wt_test_plugins:NO_WRITE" in msg and "lacks write" in msg
    assert "results format" in msg


def test_a_stage_that_is_not_a_stage_type_names_everything_it_lacks(plugins):
    with pytest.raises(PluginError, match=r"'not-a-stage'.*lacks type_name, kind, create, config_model"):
        load_plugin("stages", "not-a-stage")
    with pytest.raises(PluginError, match=r"'bad-kind'.*stage kind 'exporter' is not one of records, assembler"):
        load_plugin("stages", "bad-kind")
    with pytest.raises(PluginError, match=r"'bad-model'.*config_model must be a pydantic model class or None"):
        load_plugin("stages", "bad-model")
    with pytest.raises(PluginError, match=r"'missing-module'.*cannot be loaded: ModuleNotFoundError"):
        load_plugin("stages", "missing-module")
    with pytest.raises(PluginError, match=r"'nowrite'.*is not a sink: it lacks write"):
        load_plugin("sinks", "nowrite")


def test_an_unknown_name_lists_what_is_installed(plugins):
    with pytest.raises(UnknownComponent, match=r"no results format named 'csv' \(installed: json, junit, lines"):
        load_plugin("results_formats", "csv")


def test_runtimes_resolve_built_ins_then_entry_points_then_dotted_paths(plugins):
    assert resolve_runtime("http_inject", url="http://127.0.0.1:9").name == "http_inject"
    echo = resolve_runtime("echo:ws://agent")
    assert echo.name == "echo" and echo.url == "ws://agent"
    assert {"http_inject", "python", "echo"} <= set(runtime_names())
    with pytest.raises(RuntimeSpecError, match=r"'half'.*lacks surface, inject"):
        resolve_runtime("half")
    with pytest.raises(RuntimeSpecError, match=r"runtime 'picky': ValueError: picky needs an argument"):
        resolve_runtime("picky")
    with pytest.raises(RuntimeSpecError, match=r"unknown runtime 'nope': use http_inject, python, .*echo"):
        resolve_runtime("nope")


def test_the_cli_offers_registered_results_formats_and_writes_through_them(plugins, tmp_path: Path):
    env = {"PYTHONPATH": f"{plugins}:{ROOT}", "PATH": "/usr/bin:/bin"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "wt_otel.cli", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=60)

    assert "lines" in cli("run", "--help").stdout
    bad = cli("run", str(tmp_path), "--format", "csv")
    assert bad.returncode == 2 and "'csv' is not one of" in bad.stderr and "'lines'" in bad.stderr
    suite = tmp_path / "s.t2t.yaml"
    suite.write_text("version: 1\nname: s\ntests:\n  - id: looks-up\n    assertions:\n"
                     "      - {type: tool-sequence, mode: exact, tools: [client_lookup, client_lookup]}\n")
    dump = ROOT / "tests" / "fixtures" / "producers" / "openai-v2-span-attrs" / "dump.otlp.jsonl"
    done = cli("check", str(dump), "--suite", str(suite), "--out", str(tmp_path / "r.lines"))  # suffix picks it
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "r.lines").read_text() == "looks-up PASS\n"
    refused = cli("check", str(dump), "--suite", str(suite), "--format", "nowrite", "--out", str(tmp_path / "x"))
    assert refused.returncode != 0 and "'nowrite'" in refused.stderr and "lacks write" in refused.stderr
