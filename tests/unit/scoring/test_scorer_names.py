"""`wt_otel.scoring.names` lists scorer names without importing the scorers; the names stay real.

Why: the importer (and each of its pass-2 workers) only writes the names into `scorer.py`; importing
the scorer library for them cost every `wt-otel import` its start-up share.
"""

from __future__ import annotations

import subprocess
import sys

import wt_otel.scorers as scorers
from wt_otel.scoring.names import AUTO_REPLAY_SCORERS


def test_every_name_is_a_factory_that_needs_no_argument() -> None:
    assert scorers.AUTO_REPLAY_SCORERS is AUTO_REPLAY_SCORERS  # the public path re-exports the one list
    for name in AUTO_REPLAY_SCORERS:
        assert name in scorers.__all__
        assert callable(getattr(scorers, name)())


def test_rendering_a_scenario_does_not_import_the_scorers() -> None:
    code = ("import sys, wt_otel.exporters.scenario_dir, wt_otel.processors.auto_replay; "
            "print(sorted(m for m in ('wt_otel.scorers', 'wt_otel.scoring.scorers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
