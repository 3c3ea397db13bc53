"""Around a sweep: which scenarios it covers, and what it leaves behind.

Before: selection (`wt_otel.replay.selection`) over loaded scenarios, with each
scenario's effective pack and owner (`wt_otel.replay.packs`).

After: the sweep as a `results.SweepResult` (the one document the terminal
table, JUnit, JSON and the ledger are all written from), the ledger rows
appended, and `--format junit|json --out F` written. Writers are found by name
through entry points (`wt_otel.components`), so the core never imports
`exporters/`, and a third-party package can add a format by registering one.

Nothing vanishes here either: a scenario the circuit breaker kept from running
becomes an ERROR record ("not run: ...") in every output, because a CI
dashboard that only shows what ran hides exactly the outage that matters.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wt_otel import __version__
from wt_otel.components import load as load_component
from wt_otel.contracts.results import LAYERS, RunScore, ScenarioResult, SweepResult
from wt_otel.replay.packs import Membership, PackCache, model_and_sampler
from wt_otel.replay.selection import Candidate, Selected, Selection, select

if TYPE_CHECKING:  # the runner imports this module
    from wt_otel.replay.runner import ScenarioResult as RunnerScenario
    from wt_otel.replay.runner import SweepResult as RunnerSweep
    from wt_otel.replay.scenarios import LoadedScenario

LEDGER_FILE = "ledger.ndjsonl"
FORMATS = ("junit", "json")
NOT_RUN = "not run: circuit breaker"
GIT_TIMEOUT_S = 2.0


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def git_sha(cwd: Path | None = None) -> str | None:
    """The commit under test, best-effort: $GITHUB_SHA (CI checkouts may be shallow or detached), else
    `git rev-parse HEAD` (with a timeout: a hung git must not hang a sweep), else None outside a repo."""
    env = os.environ.get("GITHUB_SHA", "").strip()
    if env:
        return env
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else None


# ---------------------------------------------------------------- before: selection


def membership(loaded: LoadedScenario, packs: PackCache, *, strict: bool = False) -> Membership:
    """Effective pack/owner/metadata; an invalid `pack.yaml` raises with `strict`, else is ignored (library
    callers have already been told by the CLI, which checks strictly before running)."""
    return packs.membership(loaded.path, loaded.scenario, strict=strict)


def select_scenarios(scenarios: Sequence[LoadedScenario], selection: Selection,
                     packs: PackCache | None = None) -> Selected[LoadedScenario]:
    """`selection` applied to loaded scenarios (their effective pack and owner included).

    Raises `PackError` for an invalid `pack.yaml` and `EmptySelection` when nothing is left.
    """
    packs = packs or PackCache()

    def key(loaded: LoadedScenario) -> Candidate:
        m = membership(loaded, packs, strict=True)
        return Candidate(loaded.id, tuple(m.tags), m.pack, m.owner)

    if selection.empty:
        for loaded in scenarios:  # still check every pack.yaml: a broken one is a usage error either way
            key(loaded)
        if not scenarios:
            return select(scenarios, selection, key)
        return Selected(list(scenarios))
    return select(scenarios, selection, key)


# ---------------------------------------------------------------- after: the record


def _rates(scores: Sequence[RunScore], integrity: Sequence[bool]) -> dict[str, float]:
    """Per layer: the fraction of recorded runs that passed it (layers no run scored are left out)."""
    rates: dict[str, float] = {}
    names = [n for n in LAYERS if any(n in s.layers for s in scores)]
    names += sorted({n for s in scores for n in s.layers} - set(names))
    for name in names:
        scored = [s.layers[name].passed for s in scores if name in s.layers]
        rates[name] = round(sum(scored) / len(scored), 4)
    if "integrity" not in rates and integrity:
        rates["integrity"] = round(sum(integrity) / len(integrity), 4)
    return rates


def scenario_record(result: RunnerScenario, member: Membership, *, label: str | None,
                    stopped: str | None) -> ScenarioResult:
    """The results-model record of one runner scenario.

    Scoring attaches `result.scores` (one `RunScore` per run) or a whole `result.record`; both are
    optional here, so today's integrity-only verdicts produce complete records too.
    """
    traces = list(result.traces)
    scores: list[RunScore] = list(getattr(result, "scores", None) or [])
    integrity = [t.integrity.status == "PASS" for t in traces]
    model, sampler = model_and_sampler(member.metadata)
    if model is None:
        model = next((c.model for t in traces for c in t.llm_calls if c.model), None)
    verdict, detail = result.status, result.detail
    if verdict == "NOT RUN":
        verdict, detail = "ERROR", (f"not run: {stopped}" if stopped and not stopped.startswith("circuit breaker")
                                    else f"{NOT_RUN} ({stopped})" if stopped else NOT_RUN)
    note = getattr(result, "note", None)
    if note:  # divergence is evidence, not (yet) the verdict: carried in the detail so no output hides it
        detail = f"{detail}; {note}" if detail else note
    fields: dict[str, Any] = {
        "scenario_id": result.id, "pack": member.pack, "owner": member.owner, "label": label,
        "tags": member.tags, "origin": member.origin, "model": model, "sampler": sampler,
        "verdict": verdict, "detail": detail, "runs": len(traces),
        "runs_passed": sum(s.passed for s in scores) if scores else sum(integrity),
        "layer_pass_rates": _rates(scores, integrity), "run_ids": [t.run_id for t in traces],
        "scores": scores, "duration_s": round(sum((t.timings.total_ms or 0) for t in traces) / 1000, 3),
    }
    if scores:
        fields["gate"] = list(scores[0].gate)
    base = getattr(result, "record", None)
    if isinstance(base, ScenarioResult):  # scoring built it: keep its judgement, fill in what it cannot know
        judged = {k: v for k, v in base.model_dump(exclude_unset=True).items() if v not in (None, [], {})}
        fields = {**fields, **judged, "detail": f"{base.detail}; {note}" if base.detail and note
                  else base.detail or note}
    return ScenarioResult.model_validate(fields)


def sweep_record(sweep: RunnerSweep, scenarios: Sequence[LoadedScenario], *, started_at: str,
                 label: str | None = None, selection: dict[str, Any] | None = None,
                 packs: PackCache | None = None) -> SweepResult:
    """The whole sweep as one `SweepResult`, in sweep order, the not-run scenarios included."""
    packs = packs or PackCache()
    loaded_of = {str(loaded.path): loaded for loaded in scenarios}
    records = []
    for result in sweep.scenarios:
        loaded = loaded_of.get(str(result.path))
        member = membership(loaded, packs) if loaded is not None else Membership()
        records.append(scenario_record(result, member, label=label, stopped=sweep.stopped))
    return SweepResult(sweep_id=sweep.sweep_id, started_at=started_at, finished_at=now_iso(),
                       selection=selection or {}, label=label, git_sha=git_sha(), wt_version=__version__,
                       scenarios=records, stopped=sweep.stopped)


def append_ledger(runs_dir: Path, record: SweepResult) -> Path:
    """One ledger row per scenario of the sweep, ERROR rows included; returns the ledger's path."""
    path = runs_dir / LEDGER_FILE
    load_component("exporters", "ledger")(path).append_sweep(record)
    return path


def write_results(record: SweepResult, fmt: str, out: Path) -> None:
    """`--format junit|json --out F`: the writer registered under `fmt` writes `record` to `out`."""
    writer: Callable[[SweepResult, Path], None] = load_component("exporters", fmt)
    writer(record, out)


def infer_format(fmt: str | None, out: Path | None) -> str | None:
    """`--out results.xml` alone means junit, `.json` json; `--format` without `--out` is a usage error."""
    if fmt and out is None:
        raise ValueError(f"--format {fmt} needs --out FILE")
    if fmt or out is None:
        return fmt
    suffix = out.suffix.lower()
    if suffix == ".xml":
        return "junit"
    if suffix == ".json":
        return "json"
    raise ValueError(f"--out {out}: say --format junit or --format json (the suffix {suffix!r} does not tell)")
