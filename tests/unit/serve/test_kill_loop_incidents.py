"""Issue 31 item 3: after kill -9 a flagged incident could be written twice, as `KEY` (`recovered: true`) and as
`KEY~2` with the same spans (a second kill before the replayed revision of a re-indexed directory was indexed).
A key whose latest line was re-indexed from its directory now stays resumable by the replay at every later start.

Kill loop: serve in real processes (`tests/support/crashloop.py`), stopped by `os._exit` at each step of writing
a flagged incident (`WT_OTEL_CRASH_AT`), then again at that step during the recovery, then started clean: every
incident is in exactly one directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.crashloop import INCIDENTS, STEPS
from tests.support.paths import ROOT


def _kill_loop(tmp_path: Path, workers: int, steps: tuple[str, ...]) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.support.crashloop", str(tmp_path), str(workers), *steps],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("workers", "steps"), [(0, STEPS[:4]), (0, STEPS[4:]), (2, ("index.appending",))],
                         ids=["inline-directory-steps", "inline-index-steps", "render-workers-index-step"])
def test_every_flagged_incident_is_in_exactly_one_directory_after_kills_at_every_step(tmp_path, workers, steps):
    report = _kill_loop(tmp_path, workers, steps)
    for step in steps:
        found = report[step]
        assert found["exits"][0] == 137, f"{step}: the first kill did not land ({found['trail']})"
        assert found["exits"][2] == 0, f"{step}: the clean start did not write every incident ({found['trail']})"
        assert len(found["directories"]) == INCIDENTS, f"{step}: {found['directories']} ({found['trail']})"
        twice = {trace: dirs for trace, dirs in found["directories"].items() if len(dirs) != 1}
        assert not twice, f"{step}: incidents in more than one directory: {twice} ({found['trail']})"
