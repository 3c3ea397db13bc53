"""Synthesize hooks named MODULE:ATTR in a scenario, serve's config and `universe serve` (recording-a-universe.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from tests.support.universe_agent import UNIVERSE, UniverseAgent, run_sweep, write_scenario
from wt_otel._util.hooks import HookError, load_hook
from wt_otel.cli import main
from wt_otel.replay.runtimes import PythonRuntime
from wt_otel.serve.config import ReplayConfig

SYNTH = {**UNIVERSE, "matching": {"on_miss": "synthesize"}}
HOOK = '''
def make(tool, args, universe):
    return {"status": "synthesized for " + args.get("order_id", "?"), "tools": len(universe.tools)}

def broken(tool, args, universe):
    raise RuntimeError("generator offline")
'''


def scenario_with_hook(tmp_path: Path, module: str, attr: str) -> Path:
    d = write_scenario(tmp_path / "sc", "synth", universe=SYNTH, synthesize=f"{module}:{attr}")
    (d / f"{module}.py").write_text(HOOK)
    return d


def calls(result) -> list[dict]:  # noqa: ANN001
    [trace] = result.scenarios[0].traces
    return [c.to_dict() for c in trace.mcp_calls]


def test_a_scenario_names_its_hook_and_a_miss_is_synthesized(tmp_path: Path) -> None:
    scenario_with_hook(tmp_path, "h7_hooks_a", "make")
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent([("lookup_order", {"order_id": "Z-9"})])),
                       tmp_path)
    [call] = calls(result)
    assert call["match"] == "synthesize" and call["result"] == {"status": "synthesized for Z-9", "tools": 1}
    assert call["extra"]["divergence"]["policy"] == "synthesize"  # still divergence evidence


def test_a_raising_hook_falls_back_to_fail_call_saying_why(tmp_path: Path) -> None:
    scenario_with_hook(tmp_path, "h7_hooks_b", "broken")
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent([("lookup_order", {"order_id": "Z-9"})])),
                       tmp_path)
    [call] = calls(result)
    assert call["match"] == "fail_call" and call["is_error"]
    assert call["extra"]["divergence"]["reason"] == "synthesize hook raised RuntimeError: generator offline"


def test_a_missing_hook_is_an_error_row_with_the_reason(tmp_path: Path) -> None:
    write_scenario(tmp_path / "sc", "synth", universe=SYNTH, synthesize="h7_no_such_module:make")
    result = run_sweep([tmp_path / "sc"], PythonRuntime(UniverseAgent()), tmp_path)
    rec = result.record.scenarios[0]
    assert rec.verdict == "ERROR" and rec.triage == "environment"
    assert "synthesize hook 'h7_no_such_module:make': cannot import 'h7_no_such_module'" in rec.detail


def test_run_options_default_hook_for_serve(tmp_path: Path) -> None:
    d = write_scenario(tmp_path / "sc", "synth", universe=SYNTH)
    (tmp_path / "h7_hooks_c.py").write_text(HOOK)
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        result = run_sweep([d], PythonRuntime(UniverseAgent([("lookup_order", {"order_id": "Q"})])), tmp_path,
                           synthesize="h7_hooks_c:make")
    finally:
        sys.path.remove(str(tmp_path))
    assert calls(result)[0]["match"] == "synthesize"


@pytest.mark.parametrize(("spec", "message"), [
    ("os.path", "must be MODULE:ATTR"),
    ("../evil:x", "must be MODULE:ATTR"),
    ("__import__('os'):system", "must be MODULE:ATTR"),
    ("json:nope", "json has no attribute 'nope'"),
    ("json:JSONDecoder", "is a class, not a callable"),
    ("json:__version__", "is str, not a callable"),
])
def test_load_hook_refuses_anything_but_a_named_callable(spec: str, message: str) -> None:
    with pytest.raises(HookError, match="synthesize hook") as err:
        load_hook(spec, "synthesize hook")
    assert message in str(err.value)


def test_serve_config_checks_the_hook_at_start_up() -> None:
    with pytest.raises(ValidationError, match="cannot import 'h7_missing_mod'"):
        ReplayConfig(synthesize="h7_missing_mod:make")
    assert ReplayConfig(synthesize="json:dumps").synthesize == "json:dumps"


def test_universe_serve_rejects_a_bad_hook(tmp_path: Path) -> None:
    path = tmp_path / "fixture.universe.json"
    path.write_text(json.dumps(SYNTH))
    result = CliRunner().invoke(main, ["universe", "serve", str(path), "--port", "0", "--synthesize", "nope:x"])
    assert result.exit_code == 2 and "cannot import 'nope'" in result.output


def test_two_scenarios_with_a_hooks_py_of_the_same_name_keep_their_own(tmp_path: Path) -> None:
    for sid, label in (("one", "first"), ("two", "second")):
        d = write_scenario(tmp_path / "sc", sid, universe=SYNTH, synthesize="hooks:make")
        (d / "hooks.py").write_text(f"def make(tool, args, universe):\n    return {{'from': {label!r}}}\n")
    agent = UniverseAgent([("lookup_order", {"order_id": "Z"})])
    result = run_sweep([tmp_path / "sc"], PythonRuntime(agent), tmp_path)
    got = [s.traces[0].mcp_calls[0].result for s in result.scenarios]
    assert got == [{"from": "first"}, {"from": "second"}]
