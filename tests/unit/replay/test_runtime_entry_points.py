"""Runtime resolution in the spec's order (0002): built-ins, then `wt_otel.runtimes` entry points, then dotted path.

The entry point is real: a distribution's `entry_points.txt` on sys.path, found by importlib.metadata."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from wt_otel.contracts.inject import RuntimeSpecError
from wt_otel.replay.runtimes import HttpInjectRuntime, PythonRuntime, resolve_runtime

PLUGIN = '''
from wt_otel.contracts.inject import SurfaceProbe, TurnResult


class EchoRuntime:
    name = "echo"

    def __init__(self, arg=None, *, url=None, timeout_s=None):
        self.url, self.timeout_s, self.warnings, self.arg = url, timeout_s, [], arg

    def reset(self): pass
    def surface(self): return SurfaceProbe(status="unavailable", detail="echo")
    def inject(self, session_id, text): return TurnResult(reply=text)
    def close(self): pass


def broken(arg=None, *, url=None, timeout_s=None):
    raise RuntimeError("no licence")


def not_a_runtime(arg=None, *, url=None, timeout_s=None):
    return 42


def agent(text, session_id):  # a python agent, for the dotted-path fallback
    return {"reply": text, "tool_calls": []}
'''


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[None]:
    (tmp_path / "h7_rt_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "h7_rt_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: h7-rt-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[wt_otel.runtimes]\necho = h7_rt_plugin:EchoRuntime\nbroken = h7_rt_plugin:broken\n"
        "odd = h7_rt_plugin:not_a_runtime\nhttp_inject = h7_rt_plugin:EchoRuntime\n")
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))
    sys.modules.pop("h7_rt_plugin", None)


def test_an_entry_point_runtime_is_found_by_name_with_url_and_timeout(installed: None) -> None:
    runtime = resolve_runtime("echo", url="http://agent:1", timeout_s=3.0)
    assert runtime.name == "echo" and runtime.url == "http://agent:1"
    assert runtime.inject("s", "hi").reply == "hi"
    assert resolve_runtime("echo:fast").arg == "fast"  # --runtime NAME[:ARG]


def test_built_ins_come_first(installed: None) -> None:
    assert isinstance(resolve_runtime("http_inject"), HttpInjectRuntime)  # not the plug-in of the same name


def test_dotted_path_comes_last(installed: None) -> None:
    assert isinstance(resolve_runtime("h7_rt_plugin:agent"), PythonRuntime)


@pytest.mark.parametrize(("name", "message"), [
    ("broken", "runtime 'broken': RuntimeError: no licence"),
    ("odd", "is not a runtime: it lacks name, url"),
    ("nosuch", "use http_inject, python, broken, echo, "),  # then the installed ones, sorted
])
def test_bad_plugins_are_usage_errors_that_say_why(installed: None, name: str, message: str) -> None:
    with pytest.raises(RuntimeSpecError, match="runtime") as err:
        resolve_runtime(name)
    assert message in str(err.value)
