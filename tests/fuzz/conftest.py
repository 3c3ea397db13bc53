"""Hypothesis profiles for the fuzzing suite (issue 13).

`fast` (the default `pytest` run): few examples, derandomized, so `make test` stays quick and never
flakes. `long` (`pytest -m fuzz`, `make test-fuzz`, CI): many examples, random seeds, the example
database kept in `.hypothesis/` so a failure found once is replayed first next time.
`WT_OTEL_FUZZ_EXAMPLES` overrides the long profile's example count.

Every generated case is counted; the terminal summary says how many ran.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.support.fuzzing import CASES

settings.register_profile("fast", max_examples=15, derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", max_examples=int(os.environ.get("WT_OTEL_FUZZ_EXAMPLES", "1500")),
                          deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def pytest_configure(config: pytest.Config) -> None:
    markexpr = config.getoption("markexpr", "") or ""
    long = "fuzz" in markexpr and "not fuzz" not in markexpr
    settings.load_profile("long" if long else "fast")
    config._wt_fuzz_profile = "long" if long else "fast"  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    if CASES:
        profile = getattr(config, "_wt_fuzz_profile", "fast")
        main = {k: v for k, v in CASES.items() if ":" not in k}  # "name:built" are sub-counts of a property
        terminalreporter.write_line(f"fuzz ({profile} profile): {sum(main.values())} generated cases over "
                                    f"{len(main)} properties: " + ", ".join(f"{k}={v}" for k, v in
                                                                          sorted(CASES.items())))
