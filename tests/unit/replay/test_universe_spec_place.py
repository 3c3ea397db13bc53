"""Universe rules from recording-a-universe.md: divergence in `extra.divergence`, string args normalized."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.contracts.run import McpCall
from wt_otel.contracts.universe import lint_universe, load_universe
from wt_otel.contracts.validate import validate_data
from wt_otel.replay.universe import RecordedUniverse, divergence_of, freeze_universe

UNIVERSE: dict[str, Any] = {
    "windtunnel_universe": 1,
    "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
    "recordings": [{"tool_name": "lookup", "args": {"q": "a"}, "result": 1}],
}


def test_a_miss_is_logged_under_extra_divergence() -> None:
    u = RecordedUniverse(load_universe(UNIVERSE))
    u.call("lookup", {"q": "a"})
    u.call("lookup", {"q": "zzz"})
    hit, miss = u.call_log()
    assert "extra" not in hit and "divergence" not in hit
    assert miss["extra"] == {"divergence": {"policy": "fail_call", "matched": None}}
    assert "divergence" not in miss  # one place: the spec's
    assert McpCall.model_validate(miss).divergence == {"policy": "fail_call", "matched": None}


def test_old_top_level_divergence_is_still_read() -> None:
    legacy = {"tool_name": "lookup", "args": {}, "match": "fail_call", "divergence": {"policy": "fail_call"}}
    call = McpCall.model_validate(legacy)
    assert call.divergence == {"policy": "fail_call"}
    assert call.to_dict()["extra"] == {"divergence": {"policy": "fail_call"}}
    assert divergence_of(legacy) == {"policy": "fail_call"}
    # freezing leaves divergent calls out, whichever place they used
    frozen = freeze_universe([legacy, {"tool_name": "lookup", "args": {"q": "b"}, "result": 2}], UNIVERSE["tools"])
    assert [r.args for r in frozen.recordings] == [{"q": "b"}]


def test_string_encoded_args_are_normalized_with_a_lint_warning() -> None:
    data = json.loads(json.dumps(UNIVERSE))
    data["recordings"][0]["args"] = json.dumps({"q": "a"})
    universe = load_universe(data)
    assert universe.recordings[0].args == {"q": "a"}
    (warning,) = lint_universe(universe)
    assert warning.path == "recordings[0].args" and "JSON-encoded string" in warning.message
    assert RecordedUniverse(universe).call("lookup", {"q": "a"}).match == "exact"


def test_args_that_are_not_an_encoded_object_still_fail() -> None:
    data = json.loads(json.dumps(UNIVERSE))
    data["recordings"][0]["args"] = "[1, 2]"
    (problem,) = validate_data("universe", data)
    assert problem.message.startswith("recordings[0].args must be an object")


def test_validate_cli_warns_and_exits_zero(tmp_path: Path) -> None:
    data = json.loads(json.dumps(UNIVERSE))
    data["recordings"][0]["args"] = '{"q": "a"}'
    path = tmp_path / "fixture.universe.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "WARN" in result.output and "JSON-encoded string" in result.output
