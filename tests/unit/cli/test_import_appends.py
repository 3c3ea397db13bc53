"""`wt-otel import --force` of a session whose cassette exists appends its run to the ring buffer."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from click.testing import CliRunner

from tests.support.paths import PRODUCERS
from wt_otel.cli import main
from wt_otel.contracts.cassette import HISTORY_CAP, add_run, load_cassette

SPAN_ATTRS = PRODUCERS / "openai-v2-span-attrs" / "dump.otlp.jsonl"


def _import(out: Path, *extra: str) -> None:
    r = CliRunner().invoke(main, ["import", str(SPAN_ATTRS), "--out", str(out), *extra], catch_exceptions=False)
    assert r.exit_code == 0, r.output


def test_reimport_keeps_recorded_runs_and_replaces_only_its_own(tmp_path: Path):
    out = tmp_path / "out"
    _import(out)
    [scenario] = list(out.iterdir())
    path = scenario / "llm.cassette.json"
    data = json.loads(path.read_text())
    [imported] = data["history_keys"]
    recorded = [f"{n:032x}" for n in range(1, HISTORY_CAP)]  # runs a record session added after the import
    for key in recorded:
        add_run(data, {**copy.deepcopy(data["traces"][imported]), "trace_id": key})
    path.write_text(json.dumps(data))

    _import(out, "--force")
    after = load_cassette(json.loads(path.read_text()))
    assert after.history_keys == recorded + [imported], "the re-imported run is the newest; nothing evicted"
    assert after.latest_trace_id == imported

    add_run(data, {**copy.deepcopy(data["traces"][imported]), "trace_id": "f" * 32})
    path.write_text(json.dumps(data))  # now the buffer is full with another run newest
    _import(out, "--force")
    after = load_cassette(json.loads(path.read_text()))
    assert len(after.history_keys) == HISTORY_CAP and after.history_keys[-1] == imported
    assert recorded[0] not in after.traces, "the oldest run is evicted"


def test_force_replaces_an_invalid_cassette(tmp_path: Path):
    out = tmp_path / "out"
    _import(out)
    [scenario] = list(out.iterdir())
    (scenario / "llm.cassette.json").write_text("{not json")
    _import(out, "--force")
    assert len(load_cassette(json.loads((scenario / "llm.cassette.json").read_text())).history_keys) == 1
