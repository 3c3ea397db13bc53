"""Admission control in isolation (issue 13, items 2-4): fair shares, byte budget, per-client quota, health."""

from __future__ import annotations

from tests.support.hostile import genai_session, tid
from wt_otel.serve.budget import AdmissionControl, BudgetConfig, Verdict


def _traces(n: int, first: int = 0) -> list:
    return [genai_session(tid(first + i))[3] for i in range(n)]


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_under_pressure_the_heavy_client_backs_off_and_the_others_get_in():
    clock = _Clock()
    control = AdmissionControl(BudgetConfig(max_sessions_per_client=10, session_window=30, max_records=1000),
                               clock=clock)
    assert control.check(_traces(8), 0, 0, "a").verdict is Verdict.ADMIT
    assert control.check(_traces(5, 100), 0, 0, "a").verdict is Verdict.ADMIT  # no pressure: nobody throttled
    busy = 600  # records queued: the budgets are more than half full
    assert control.check(_traces(9, 400), 0, busy, "a").verdict is Verdict.ADMIT  # alone: nobody to be fair to
    assert control.check(_traces(1, 500), 0, busy, "b").verdict is Verdict.ADMIT
    refused = control.check(_traces(5, 200), 0, busy, "a")
    assert refused.verdict is Verdict.FULL and "started more than 10 traces" in refused.reason
    assert control.check(_traces(5, 200), 0, busy, "b").verdict is Verdict.ADMIT  # another client is not locked out
    clock.now = 31  # the window has passed: a's count starts over
    assert control.check(_traces(5, 300), 0, busy, "a").verdict is Verdict.ADMIT


def test_a_batch_beyond_its_share_is_too_large_not_retryable():
    control = AdmissionControl(BudgetConfig(max_records=4000, max_sessions_per_client=100_000))
    decision = control.check(_traces(1001), 0, 0, None)
    assert decision.verdict is Verdict.TOO_LARGE and "split" in decision.reason
    assert control.check(_traces(1000), 0, 0, None).verdict is Verdict.ADMIT


def test_bytes_held_by_queue_and_sessions_count_against_the_budget():
    held = {"n": 0}
    control = AdmissionControl(BudgetConfig(max_bytes=1_000_000), held=lambda: held["n"])
    spans = genai_session(tid(1))
    assert control.check(spans, 0, 0, None).verdict is Verdict.ADMIT
    held["n"] = 999_000
    decision = control.check(spans, 0, 0, None)
    assert decision.verdict is Verdict.FULL and "memory budget" in decision.reason
    assert control.check(spans, 999_000, 1, None).verdict is Verdict.FULL  # queued bytes count too


def test_degraded_refuses_everything_until_cleared():
    control = AdmissionControl()
    control.set_degraded("data dir", "No space left on device")
    decision = control.check(genai_session(tid(1)), 0, 0, None)
    assert decision.verdict is Verdict.UNAVAILABLE and "No space left" in decision.reason
    control.set_degraded("data dir", None)
    assert control.check(genai_session(tid(1)), 0, 0, None).verdict is Verdict.ADMIT


def test_clients_tracked_are_bounded():
    control = AdmissionControl(BudgetConfig(max_clients=3))
    for i in range(10):
        control.check(_traces(1), 0, 0, f"c{i}")
    assert len(control._clients) == 3
