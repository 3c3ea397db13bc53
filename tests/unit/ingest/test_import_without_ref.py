"""`wt-otel import` of an envelope without source.ref leaves the origin unset and says so (0001, Contract A)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from wt_otel.cli import main

ENVELOPE = {
    "windtunnel_interchange": 1,
    "session": {"model": "gpt-example-1", "provider": "openai"},
    "messages": [
        {"role": "user", "parts": [{"type": "text", "content": "Email on file for Bluewing?"}]},
        {"role": "assistant", "parts": [{"type": "text", "content": "ops@bluewing.example"}]},
    ],
}


def imported(tmp_path: Path, envelope: dict) -> tuple[object, Path]:
    src = tmp_path / "my-export-file.wtin.json"
    src.write_text(json.dumps(envelope))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["import", str(src), "--out", str(out)])
    assert result.exit_code == 0, result.output
    (scenario_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return result, scenario_dir


def test_no_ref_means_no_origin_and_a_warning(tmp_path: Path) -> None:
    result, d = imported(tmp_path, ENVELOPE)
    scenario = yaml.safe_load((d / "scenario.yaml").read_text())
    assert not [t for t in scenario["tags"] if t.startswith("origin:")]
    env = json.loads((d / "incident.wtin.json").read_text())
    assert "ref" not in env["source"]
    assert "has no source.ref" in result.output  # said on stderr (CliRunner mixes it in)
    assert "has no source.ref" in (d / "IMPORTED.md").read_text()


def test_a_ref_still_becomes_the_origin(tmp_path: Path) -> None:
    result, d = imported(tmp_path, {**ENVELOPE, "source": {"ref": "incident-412"}})
    assert "origin:incident-412" in yaml.safe_load((d / "scenario.yaml").read_text())["tags"]
    assert "source.ref" not in result.output
