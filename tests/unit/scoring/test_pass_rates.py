"""One place computes layer pass rates; the runner, check and the ledger all read it."""

from __future__ import annotations

from wt_otel.contracts.results import LayerResult, RunScore
from wt_otel.scoring.layers import layer_pass_rates


def score(index: int, **layers: bool) -> RunScore:
    return RunScore(scenario_id="s", run_index=index, run_id=f"r{index}",
                    layers={k: LayerResult(passed=v) for k, v in layers.items()})


def test_rates_follow_layer_order_and_skip_layers_no_run_scored() -> None:
    scores = [score(1, integrity=True, outcome=True, trajectory=False), score(2, outcome=False, integrity=True),
              score(3, outcome=True, integrity=False)]
    rates = layer_pass_rates(scores)
    assert list(rates) == ["outcome", "trajectory", "integrity"]  # no constraint: nothing declared it
    assert rates == {"outcome": 0.6667, "trajectory": 0.0, "integrity": 0.6667}


def test_rates_of_no_run_are_empty_and_unknown_layers_come_last_sorted() -> None:
    assert layer_pass_rates([]) == {}
    assert list(layer_pass_rates([score(1, zeta=True, alpha=False, outcome=True)])) == ["outcome", "alpha", "zeta"]
