"""What a sweep produces, as data: layer results, run scores, scenario results, the sweep.

The scoring side (`wt_otel.scorers`, `wt_otel.scoring.assertions`, `wt_otel.scoring.verdict`)
fills these; the reporting side (terminal table, JUnit, JSON, ledger, spans)
only reads them. They are also file formats (`results.json`, the ledger row,
the per-run score sidecar), hence pydantic models with generated schemas.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LAYERS = ("outcome", "trajectory", "constraint", "robustness", "integrity")
SCORE_SUFFIX = ".score.json"  # the per-run score sidecar, beside `run-<n>.trace.json`
# UNREVIEWED: an auto-imported incident whose default checks passed; it is not a pass (wt_otel.scoring.review)
Verdict = Literal["PASS", "FAIL", "PASS_WITH_VARIANCE", "INVALID", "ERROR", "UNREVIEWED"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class LayerResult(_Model):
    """One layer of one run: did it pass, and why (the detail names the evidence used)."""

    passed: bool
    detail: str = ""


class RunScore(_Model):
    """The per-run score sidecar (`run-<n>.score.json` next to `run-<n>.trace.json`)."""

    wt_score: Literal[1] = 1
    scenario_id: str
    run_index: int
    run_id: str
    layers: dict[str, LayerResult] = Field(default_factory=dict)
    gate: list[str] = Field(default_factory=lambda: ["outcome"])
    passed: bool = False  # every gated layer passed and integrity held
    trace_path: str | None = None


class ScenarioResult(_Model):
    """One scenario over its runs in one sweep: one ledger row, one JUnit testcase."""

    scenario_id: str
    pack: str | None = None
    owner: str | None = None
    label: str | None = None
    tags: list[str] = Field(default_factory=list)
    origin: str | None = None
    model: str | None = None
    quant: str | None = None
    sampler: dict[str, Any] = Field(default_factory=dict)
    verdict: Verdict
    detail: str | None = None
    triage: str | None = None  # who must act on a non-pass: see wt_otel.scoring.triage
    warnings: list[str] = Field(default_factory=list)  # what the runs recorded (surface invalid, divergence...)
    runs: int = 0
    runs_passed: int = 0
    layer_pass_rates: dict[str, float] = Field(default_factory=dict)
    gate: list[str] = Field(default_factory=lambda: ["outcome"])
    run_ids: list[str] = Field(default_factory=list)
    scores: list[RunScore] = Field(default_factory=list)
    robustness: list[dict[str, Any]] = Field(
        default_factory=list, description="one entry per perturbation run: {perturbation, kind, tool, passed, "
                                        "status (PASS, FAIL, or ERROR: it tested nothing), detail, run_id}")
    duration_s: float = 0.0
    reviewed: bool = True  # False: tagged unreviewed (its outcome check is a default, not a person's)
    reproduced: bool | None = None  # unreviewed only: same final answer and tool trajectory as the incident


class SweepResult(_Model):
    """A whole `wt-otel run` / `wt-otel check`: the `--format json` document."""

    wt_results: Literal[1] = 1
    sweep_id: str
    started_at: str
    finished_at: str | None = None
    selection: dict[str, Any] = Field(default_factory=dict)
    label: str | None = None
    git_sha: str | None = None
    wt_version: str | None = None
    scenarios: list[ScenarioResult] = Field(default_factory=list)
    stopped: str | None = None  # why the sweep stopped early (circuit breaker), if it did

    @property
    def ok(self) -> bool:
        """Nothing failed (UNREVIEWED is not a failure, nor a pass: it waits for a person)."""
        return self.stopped is None and all(s.verdict in ("PASS", "PASS_WITH_VARIANCE", "UNREVIEWED")
                                            for s in self.scenarios)


class LedgerRow(_Model):
    """One line of `<runs-dir>/ledger.ndjsonl`: one scenario in one sweep, ERROR rows included.

    The ledger is the queryable index over time (trends, flakiness, "green
    since"), so a row carries everything a report groups or filters by and
    never the deep evidence (that stays in the per-run trace and score files,
    reachable through `run_ids`). Readers tolerate unknown keys, so later
    versions can add fields without breaking older reports.
    """

    wt_ledger: Literal[1] = 1
    ts: str  # when this row was written (ISO 8601, UTC)
    sweep_id: str
    scenario_id: str
    pack: str | None = None
    owner: str | None = None
    label: str | None = None
    model: str | None = None
    quant: str | None = None
    sampler: dict[str, Any] = Field(default_factory=dict)
    verdict: Verdict
    detail: str | None = None
    triage: str | None = None
    runs: int = 0
    runs_passed: int = 0
    layer_pass_rates: dict[str, float] = Field(default_factory=dict)
    run_ids: list[str] = Field(default_factory=list)
    origin: str | None = None
    git_sha: str | None = None
    wt_version: str | None = None
    reviewed: bool = True
    reproduced: bool | None = None

    @classmethod
    def from_result(cls, sweep: SweepResult, result: ScenarioResult, ts: str) -> LedgerRow:
        return cls(ts=ts, sweep_id=sweep.sweep_id, scenario_id=result.scenario_id, pack=result.pack,
                   owner=result.owner, label=result.label or sweep.label, model=result.model, quant=result.quant,
                   sampler=result.sampler, verdict=result.verdict, detail=result.detail, triage=result.triage,
                   runs=result.runs, runs_passed=result.runs_passed,
                   layer_pass_rates=result.layer_pass_rates, run_ids=result.run_ids, origin=result.origin,
                   git_sha=sweep.git_sha, wt_version=sweep.wt_version, reviewed=result.reviewed,
                   reproduced=result.reproduced)
