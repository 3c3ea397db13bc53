"""Scorer names that configs and generated files may refer to, without importing the scorers.

The importer and serve's auto-replay stage check a config's `outcome_scorers` against this list and
write the names into `scorer.py`; only the replay that runs that file needs the scorers themselves
(`wt_otel.scoring.scorers`, with the run and result models: ~10 ms more at every `wt-otel import`
start and in every pass-2 worker). `wt_otel.scoring.scorers` re-exports the list, and a test checks that
every name is one of its factories.
"""

from __future__ import annotations

__all__ = ["AUTO_REPLAY_SCORERS"]

# Factories that need no argument, so a config may name them as a default outcome check and the importer
# can write `all_of(no_divergence(), ...)` into a generated scorer.py. A whitelist, because the names
# become code: anything else in a config is rejected, never pasted.
AUTO_REPLAY_SCORERS = frozenset({"no_divergence", "substantiated_by_tools"})
