"""Layers, gates and verdicts: from a scenario's runs to one ScenarioResult.

Each run is scored in four layers:

- outcome: structural checks first (the agent gave a final reply; a
  `requires_tool_use` scenario used a tool), then the scenario's `scorer.py`
  `outcome(trace)` and its `output` assertions;
- trajectory: `tool-sequence` / `tool-arguments` assertions, `must_call`, `forbidden_calls`;
- constraint: `policy` assertions (`no-divergence` among them);
- integrity: the replay's own check (ERROR: could not run; INVALID: left the universe).

Layers with nothing declared are left out of the run's score rather than
counted as passes, so a pass rate always means something was checked. The
gate (`Scenario.gate()`) is inferred from what the scenario declares and may
only be widened by `gates:`. Over N runs the verdict is ERROR if any run
could not run, INVALID if any left the universe, PASS if every run passed the
gate, PASS_WITH_VARIANCE if `variance_allowed` and at least one did, else FAIL.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wt_otel._util.fsutil import atomic_write
from wt_otel.contracts.assertions import Assertion, parse_assertions
from wt_otel.contracts.results import LAYERS, SCORE_SUFFIX, LayerResult, RunScore, ScenarioResult, Verdict
from wt_otel.contracts.run import TRACE_SUFFIX, Trace
from wt_otel.contracts.scenario import Scenario
from wt_otel.contracts.universe import Universe
from wt_otel.scoring.assertions import evaluate
from wt_otel.scoring.evidence import EvidenceView, from_trace
from wt_otel.scoring.robustness import robustness
from wt_otel.scoring.scorers import constraint_capture, run_scorer

OUTCOME_FN = "outcome"

__all__ = ["SCORE_SUFFIX", "ScenarioChecks", "aggregate", "layer_pass_rates", "load_outcome", "score_path",
           "score_run", "score_scenario", "write_score"]


# ---------------------------------------------------------------- what a scenario declares


def load_outcome(path: Path) -> Callable[[Trace], Any]:
    """`outcome` from a scenario's scorer.py, imported by path (never by module name, so two scenarios'
    scorer.py files cannot shadow each other). Raises with the reason when it cannot be loaded."""
    name = "wt_otel_scorer_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling inside the scorer look their module up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    fn = getattr(module, OUTCOME_FN, None)
    if not callable(fn):
        raise AttributeError(f"{path.name} defines no {OUTCOME_FN}(trace) function")
    return fn


@dataclass
class ScenarioChecks:
    """A scenario's checks, parsed and loaded once for all its runs."""

    scenario: Scenario
    assertions: list[Assertion] = field(default_factory=list)
    outcome_fn: Callable[[Trace], Any] | None = None
    outcome_error: str | None = None  # scorer.py declared but not loadable: every run's outcome fails with it

    @classmethod
    def of(cls, scenario: Scenario, directory: Path | None) -> ScenarioChecks:
        checks = cls(scenario, parse_assertions([a.model_dump(mode="python") for a in scenario.assertions]))
        if scenario.scorer:
            path = (directory or Path(".")) / scenario.scorer
            try:
                checks.outcome_fn = load_outcome(path)
            except Exception as exc:  # user code: a SyntaxError, an ImportError, anything at import time
                checks.outcome_error = f"{scenario.scorer} could not be loaded: {type(exc).__name__}: {exc}"
        return checks

    def by_layer(self, layer: str) -> list[Assertion]:
        return [a for a in self.assertions if a.layer == layer]


# ---------------------------------------------------------------- one run


def _combine(results: Sequence[LayerResult]) -> LayerResult:
    failed = [r.detail for r in results if not r.passed]
    if failed:
        return LayerResult(passed=False, detail="; ".join(failed))
    return LayerResult(passed=True, detail="; ".join(r.detail for r in results if r.detail))


def _structure(trace: Trace, view: EvidenceView, scenario: Scenario) -> LayerResult | None:
    """The checks every outcome starts with; a failure here skips the scorer (it would only add noise)."""
    if not trace.turns:
        return LayerResult(passed=False, detail="no turn was recorded: there is no outcome to judge")
    last = trace.turns[-1]
    if not last.reply.strip():
        error = f" (the agent reported: {last.error})" if last.error else ""
        return LayerResult(passed=False, detail=f"the agent gave no final reply{error}")
    if scenario.requires_tool_use and not view.calls:
        return LayerResult(passed=False, detail=f"requires_tool_use: the agent used no tool ({view.describe()})")
    return None


def outcome_layer(trace: Trace, view: EvidenceView, checks: ScenarioChecks,
                  constraint: list[LayerResult] | None = None) -> LayerResult:
    """The outcome; constraint-layer predicates the scorer calls (no_divergence) land in `constraint`."""
    broken = _structure(trace, view, checks.scenario)
    if broken is not None:
        return broken
    results: list[LayerResult] = []
    if checks.outcome_error:
        results.append(LayerResult(passed=False, detail=checks.outcome_error))
    elif checks.outcome_fn is not None:
        label = checks.scenario.scorer
        with constraint_capture() as diverted:
            scored = run_scorer(checks.outcome_fn, trace, f"{label}:{OUTCOME_FN}")
        if constraint is not None:
            constraint += [LayerResult(passed=r.passed, detail=f"{label}: {r.detail}") for r in diverted]
        said = scored.detail or ("passed" if scored.passed else "failed")
        results.append(LayerResult(passed=scored.passed, detail=f"{label}: {said}"))
    results += [r for _, r in evaluate(checks.by_layer("outcome"), view, trace)]
    if not results:
        return LayerResult(passed=True, detail="the agent replied; no outcome check is declared (write scorer.py "
                                               "or an output assertion)")
    return _combine(results)


def trajectory_layer(view: EvidenceView, checks: ScenarioChecks) -> LayerResult | None:
    scenario = checks.scenario
    results: list[LayerResult] = []
    called = set(view.names)
    for name in scenario.must_call:
        ok = name in called
        results.append(LayerResult(passed=ok, detail=f"must_call {name!r}: {'called' if ok else 'never called'} "
                                                     f"(calls: {view.names}; {view.describe()})"))
    for name in scenario.forbidden_calls:
        n = view.names.count(name)
        results.append(LayerResult(passed=n == 0, detail=f"forbidden_calls {name!r}: "
                                   + (f"called {n} time(s)" if n else "not called") + f" ({view.describe()})"))
    results += [r for _, r in evaluate(checks.by_layer("trajectory"), view)]
    return _combine(results) if results else None


def constraint_layer(trace: Trace, view: EvidenceView, checks: ScenarioChecks,
                     from_scorer: Sequence[LayerResult] = ()) -> LayerResult | None:
    results = [r for _, r in evaluate(checks.by_layer("constraint"), view, trace)] + list(from_scorer)
    return _combine(results) if results else None


def score_run(trace: Trace, checks: ScenarioChecks | None, trace_path: Path | None = None) -> RunScore:
    """Every layer of one run. A run that could not run (integrity ERROR) or a scenario that could not be
    loaded is scored on integrity alone; an INVALID run is still scored, for the record."""
    integrity = LayerResult(passed=trace.integrity.status == "PASS", detail=trace.integrity.detail or "")
    layers: dict[str, LayerResult] = {}
    gate = ["outcome"]
    if checks is not None and trace.integrity.status != "ERROR":
        view = from_trace(trace)
        gate = [g for g in checks.scenario.gate() if g != "robustness"]  # judged over the perturbation runs
        diverted: list[LayerResult] = []
        layers["outcome"] = outcome_layer(trace, view, checks, diverted)
        if diverted and "constraint" not in gate:  # a policy in scorer.py is a declared policy, as in YAML
            gate = [g for g in ("outcome", "trajectory", "constraint") if g in {*gate, "constraint"}]
        for name, result in (("trajectory", trajectory_layer(view, checks)),
                             ("constraint", constraint_layer(trace, view, checks, diverted))):
            if result is not None:
                layers[name] = result
        for name in gate:  # a widened gate over a layer with nothing declared: say so, do not fake a pass
            layers.setdefault(name, LayerResult(passed=True, detail=f"no {name} check is declared"))
    layers["integrity"] = integrity
    passed = integrity.passed and bool(layers.keys() - {"integrity"}) and all(layers[g].passed for g in gate)
    return RunScore(scenario_id=trace.scenario_id, run_index=trace.run_index, run_id=trace.run_id, layers=layers,
                    gate=gate, passed=passed, trace_path=str(trace_path) if trace_path else None)


def score_path(trace_path: Path) -> Path:
    """`run-<n>.score.json` next to `run-<n>.trace.json`."""
    name = trace_path.name.removesuffix(TRACE_SUFFIX) if trace_path.name.endswith(TRACE_SUFFIX) else trace_path.stem
    return trace_path.with_name(name + SCORE_SUFFIX)


def write_score(score: RunScore, trace_path: Path) -> Path:
    path = score_path(trace_path)
    atomic_write(path, json.dumps(score.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n")
    return path


# ---------------------------------------------------------------- over N runs


def _first_failure(score: RunScore) -> str:
    for name in score.gate:
        layer = score.layers.get(name)
        if layer is not None and not layer.passed:
            return f"run {score.run_index}: {name}: {layer.detail}"
    return f"run {score.run_index}: failed"


def aggregate(traces: Sequence[Trace], scores: Sequence[RunScore], variance_allowed: bool = False
              ) -> tuple[Verdict, str | None]:
    """The scenario's verdict over its runs and the detail a report prints (the failing layer's detail)."""
    if not traces:
        return "ERROR", "no run was recorded"
    statuses: tuple[Verdict, ...] = ("ERROR", "INVALID")  # ERROR first: an unfinished run proves nothing
    for status in statuses:
        bad = [t for t in traces if t.integrity.status == status]
        if bad:
            return status, f"run {bad[0].run_index}: {bad[0].integrity.detail}"
    failed = [s for s in scores if not s.passed]
    if not failed:
        return "PASS", None
    detail = _first_failure(failed[0])
    if len(scores) > 1:
        detail = f"{len(scores) - len(failed)}/{len(scores)} runs passed; {detail}"
    if variance_allowed and len(failed) < len(scores):
        return "PASS_WITH_VARIANCE", detail
    return "FAIL", detail


def layer_pass_rates(scores: Sequence[RunScore]) -> dict[str, float]:
    """Per layer: the fraction of scored runs that passed it, in LAYERS order (then any other layer, sorted).

    The one place a pass rate is computed: the runner, `wt-otel check` and the ledger all read it from here.
    Layers no run scored are left out, so a rate always means something was checked.
    """
    names = [n for n in LAYERS if any(n in s.layers for s in scores)]
    names += sorted({n for s in scores for n in s.layers} - set(names))
    rates: dict[str, float] = {}
    for name in names:
        scored = [s.layers[name].passed for s in scores if name in s.layers]
        rates[name] = round(sum(scored) / len(scored), 4)
    return rates


def score_scenario(scenario_id: str, scenario: Scenario | None, directory: Path | None, traces: Sequence[Trace],
                   trace_paths: Sequence[Path] | None = None, *, write: bool = True,
                   perturbed: Sequence[Trace] = (), perturbed_paths: Sequence[Path] = (),
                   extra_perturbations: bool = False, universe: Universe | None = None) -> ScenarioResult:
    """Score every run, write each `run-<n>.score.json` beside its trace (with `write`), and judge the scenario.

    `scenario` None means it could not be loaded: its (ERROR) traces are scored on integrity alone.
    Pack, owner, tags and origin are left to the caller, which knows the pack a scenario belongs to.
    """
    checks = ScenarioChecks.of(scenario, directory) if scenario is not None else None
    paths = list(trace_paths or [])
    scores = []
    for i, trace in enumerate(traces):
        path = paths[i] if i < len(paths) else None
        score = score_run(trace, checks, path)
        if write and path is not None:
            write_score(score, path)
        scores.append(score)
    verdict, detail = aggregate(traces, scores, scenario.variance_allowed if scenario else False)
    gate = scenario.gate() if scenario else ["outcome"]
    rates = layer_pass_rates(scores)
    entries = robustness(perturbed, universe)
    if entries:
        if extra_perturbations and "robustness" not in gate:  # `run --perturb` declares them for this sweep
            gate = [*gate, "robustness"]
        rates["robustness"] = round(sum(e["passed"] for e in entries) / len(entries), 4)
        for entry, path in zip(entries, perturbed_paths, strict=False):
            if write:
                layer = LayerResult(passed=entry["passed"], detail=entry["detail"])
                write_score(RunScore(scenario_id=scenario_id, run_index=0, run_id=entry["run_id"],
                                     layers={"robustness": layer}, gate=["robustness"], passed=layer.passed,
                                     trace_path=str(path)), path)
        # a perturbation that tested nothing (status ERROR) proves nothing: never a PASS; one tested and not
        # handled is a finding, and FAIL says it first
        untested = [e for e in entries if e.get("status") == "ERROR"]
        unhandled = [e for e in entries if not e["passed"] and e.get("status") != "ERROR"]
        if "robustness" in gate and verdict in ("PASS", "PASS_WITH_VARIANCE") and (unhandled or untested):
            verdict = "FAIL" if unhandled else "ERROR"
            worst = unhandled or untested
            detail = f"robustness: {len(worst)}/{len(entries)} perturbation(s) " + \
                ("not handled" if unhandled else "not tested")
            if unhandled and untested:
                detail += f" ({len(untested)} more not tested)"
            detail += "; " + worst[0]["detail"]
    return ScenarioResult(
        scenario_id=scenario_id, label=traces[0].label if traces else None, verdict=verdict, detail=detail,
        runs=len(traces), runs_passed=sum(s.passed for s in scores), layer_pass_rates=rates,
        gate=gate, run_ids=[t.run_id for t in traces], scores=scores, robustness=entries,
        duration_s=round(sum(t.timings.total_ms or 0 for t in [*traces, *perturbed]) / 1000, 3))
