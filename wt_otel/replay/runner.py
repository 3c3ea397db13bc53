"""`wt-otel run`: replay scenarios against an agent, hermetically, and record a Trace per run.

For each scenario the runner serves its universe as a real MCP server (and,
with `llm="replay"`, its cassette as an OpenAI-compatible server), then for
each run: rewinds both servers, resets the agent (`/wt/reset`, fatal when it
fails), probes its surface once, injects every user turn into one fresh
session, and reads back what the servers witnessed. The Trace is written
atomically to

    <runs_dir>/<sweep_id>/<scenario dir>/run-<n>.trace.json

with `summary.json` beside the scenario folders, listing every scenario of the
sweep, the ones that never ran included.

Why it is shaped this way (../shared/ARCHITECTURE.md, "Where the reference
design is weak", #1 and #5):

- the servers are ours and in-process, so the witnessed evidence (universe
  and cassette call logs) never depends on the agent's honesty; `verdict.py`
  compares it with what the agent reported and calls a bypass INVALID;
- nothing that goes wrong makes a scenario vanish: a bad fixture, a port in
  use, an endpoint down or a failed reset is a Trace with integrity ERROR and
  the reason, and three scenario ERRORs in a row stop the sweep (circuit
  breaker) instead of burning time on a dead endpoint, listing the rest as
  not run;
- the servers bind free ports unless told otherwise (a busy port never stops
  a sweep), and the agent learns where they are: an in-process (python
  runtime) agent from the environment (`WT_UNIVERSE_URL` and
  `WT_LLM_BASE_URL` are set while a scenario runs), an `http_inject` endpoint
  from every `/wt/reset` body (`universe_url`, `llm_base_url`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from wt_otel import __version__
from wt_otel._util.clock import compact_stamp, elapsed_ms, utc_now_iso
from wt_otel._util.fsutil import atomic_write
from wt_otel._util.hooks import HookError, load_hook
from wt_otel.contracts.inject import ContractViolation, ResetFailed
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.contracts.results import RunScore, ScenarioResult, SweepResult
from wt_otel.contracts.run import (
    TRACE_SUFFIX,
    Evidence,
    Integrity,
    McpCall,
    RunLLMCall,
    SurfaceProbe,
    Timings,
    Trace,
    Turn,
)
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.cassette_server import CassetteServer, MatchMode
from wt_otel.replay.mcp_server import MCP_PATH, UniverseMCPServer
from wt_otel.replay.misses import explain_tool_misses, hint_lines, tool_misses, universe_path_of
from wt_otel.replay.observations import SOURCE as OBSERVED
from wt_otel.replay.observations import universe_observations
from wt_otel.replay.packs import Membership, PackCache, model_and_sampler
from wt_otel.replay.record_budget import RecordBudget
from wt_otel.replay.recorder import RecordingProxy
from wt_otel.replay.runtimes import Runtime, describe_exception, new_session_id
from wt_otel.replay.scenarios import LoadedScenario, load_scenario_dir, recording_path
from wt_otel.replay.universe import RecordedUniverse
from wt_otel.reporting.outputs import append_ledger
from wt_otel.scoring.layers import score_scenario
from wt_otel.scoring.review import UNREVIEWED_TAG, mark_unreviewed
from wt_otel.scoring.triage import triage
from wt_otel.scoring.verdict import divergence_note, run_integrity

ENV_UNIVERSE_URL = "WT_UNIVERSE_URL"
ENV_LLM_BASE_URL = "WT_LLM_BASE_URL"
BREAKER = 3  # consecutive scenario ERRORs that stop a sweep
SUMMARY_FILE = "summary.json"
NOT_RUN = "not run: circuit breaker"  # the results record's detail for a scenario the breaker kept from running
GIT_TIMEOUT_S = 2.0
EMPTY_UNIVERSE: dict[str, Any] = {"windtunnel_universe": 1, "tools": [], "recordings": []}

LlmMode = Literal["auto", "live", "replay", "record"]
# the same in `run` and serve's auto-replay: a scenario with a cassette replays it (hermetic, free, the incident
# reproduced), one without runs live (with a warning in its trace)
DEFAULT_LLM: LlmMode = "auto"
DEFAULT_UPSTREAM = "https://api.openai.com/v1"  # --llm record without --llm-upstream or $OPENAI_BASE_URL


@dataclass
class RunOptions:
    """How to run a sweep. Ports: None or 0 picks a free port (the agent is told the URLs)."""

    runtime: Runtime
    runs_dir: Path = Path("runs")
    runs: int | None = None  # overrides each scenario's `runs`
    llm: LlmMode = DEFAULT_LLM
    llm_match: MatchMode = "exact"
    llm_upstream: str | None = None  # --llm record: the live provider [$OPENAI_BASE_URL, else DEFAULT_UPSTREAM]
    record_budget: RecordBudget | None = None  # --llm record: what one run may spend [RecordBudget's defaults]
    pace: bool = False  # with llm="replay": replay the recorded latencies (historical latency emulation)
    universe_port: int | None = None
    llm_port: int | None = None
    label: str | None = None
    host: str = "127.0.0.1"
    breaker: int = BREAKER
    emit: Callable[[str], None] = print  # one line of news (URLs, where traces went)
    progress: Callable[[str], None] | None = None  # "scenario x (1/3), run 2/5", for a live status line
    selection: dict[str, Any] = field(default_factory=dict)  # the selectors that chose the scenarios (recorded)
    ledger: bool = True  # append one row per scenario to <runs_dir>/ledger.ndjsonl at the end of the sweep
    perturbations: list[Perturbation] = field(default_factory=list)  # `--perturb`: robustness runs for every scenario
    synthesize: str | None = None  # MODULE:ATTR synthesize hook for scenarios that name none (serve's config)


@dataclass
class ScenarioRun:
    """One scenario in flight: its traces as they are written, then its judged `record`.

    Not a second result type: `record` (a `contracts.results.ScenarioResult`) is the result; this holds
    what only the sweep knows (where the traces went, how many runs were planned) and the summary's words.
    """

    id: str
    path: Path
    runs_planned: int
    traces: list[Trace] = field(default_factory=list)
    trace_paths: list[Path] = field(default_factory=list)
    record: ScenarioResult | None = None  # None: not judged yet; a not-run scenario gets an ERROR record
    ran: bool = False  # False: the circuit breaker stopped the sweep before this scenario
    verdict_detail: str | None = None  # the verdict's own detail (record.detail also carries the divergence note)
    perturbed: list[Trace] = field(default_factory=list)  # robustness runs, one per perturbation
    perturbed_paths: list[Path] = field(default_factory=list)
    universe_path: Path | None = None  # the scenario's universe file, where answers for its tool misses go

    @property
    def status(self) -> str:
        return self.record.verdict if self.ran and self.record else "NOT RUN"

    @property
    def detail(self) -> str | None:
        return self.verdict_detail if self.ran else "not run: the sweep stopped (circuit breaker)"

    @property
    def scores(self) -> list[RunScore]:
        """One per trace, also written as run-<n>.score.json."""
        return list(self.record.scores) if self.record else []

    @property
    def note(self) -> str | None:
        """Divergence across the runs: not part of the verdict yet, but never hidden."""
        return divergence_note(self.traces)


@dataclass
class SweepRun:
    """One sweep on disk: its directory, its scenarios' runs, and the results `record` written from them."""

    sweep_id: str
    directory: Path
    scenarios: list[ScenarioRun]
    stopped: str | None = None  # why the circuit breaker stopped the sweep
    record: SweepResult | None = None  # the results document (table, JUnit, JSON and ledger are made from it)
    ledger_path: Path | None = None

    @property
    def passed(self) -> bool:
        return self.stopped is None and all(s.status in ("PASS", "PASS_WITH_VARIANCE", "UNREVIEWED")
                                            for s in self.scenarios)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def miss_hints(self) -> list[str]:
        """Per tool call no universe could answer, the diff and the `wt-otel universe add` command that gives
        it one (then `universe record` for all of them): what `wt-otel run` prints last."""
        misses = [m for s in self.scenarios for m in tool_misses(s.id, s.universe_path, s.traces)]
        return hint_lines(misses, self.directory)


def new_sweep_id() -> str:
    """Sortable by time, unique across concurrent sweeps."""
    return f"{compact_stamp()}-{uuid.uuid4().hex[:6]}"


def _ms(since: float) -> float:
    return elapsed_ms(since)


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


def _membership_fields(member: Membership, traces: list[Trace]) -> dict[str, Any]:
    """What the pack a scenario belongs to adds to its record (scoring cannot know it)."""
    model, sampler = model_and_sampler(member.metadata)
    if model is None:  # replay: the cassette's model; live: what the endpoint reported answering with
        model = next((c.model for t in traces for c in t.llm_calls if c.model), None) or next(
            (turn.model for t in traces for turn in t.turns if turn.model), None)
    quant = member.metadata.get("quant") or next((turn.quant for t in traces for turn in t.turns if turn.quant),
                                                 None)
    return {"pack": member.pack, "owner": member.owner, "tags": member.tags, "origin": member.origin,
            "model": model, "quant": quant, "sampler": sampler}


def judged_record(scored: ScenarioResult, member: Membership, traces: list[Trace], *, label: str | None
                  ) -> ScenarioResult:
    """Scoring's judgement, completed with the scenario's pack and the divergence note.

    Divergence is evidence, not (yet) the verdict: it is carried in the detail so no output hides it.
    """
    note = divergence_note(traces)
    fields = {**scored.model_dump(), **_membership_fields(member, traces), "label": scored.label or label,
              "detail": f"{scored.detail}; {note}" if scored.detail and note else scored.detail or note,
              "warnings": list(dict.fromkeys(w for t in traces for w in t.warnings)),
              "triage": triage(scored.verdict, traces, scored.scores)}
    return ScenarioResult.model_validate(fields)


def not_run_record(scenario_id: str, member: Membership, *, label: str | None, stopped: str | None
                   ) -> ScenarioResult:
    """The ERROR record of a scenario the circuit breaker kept from running: nothing vanishes from the outputs."""
    return ScenarioResult.model_validate({
        "scenario_id": scenario_id, **_membership_fields(member, []), "label": label, "verdict": "ERROR",
        "detail": f"{NOT_RUN} ({stopped})" if stopped else NOT_RUN, "triage": triage("ERROR", [], [])})


# ---------------------------------------------------------------- servers


class WitnessingUniverseServer(UniverseMCPServer):
    """The universe MCP server, counting requests to its MCP endpoint.

    The call log proves which tools were called; the request count proves the
    agent talked to this server at all (an agent with cached tools that called
    none still lists or initializes), which is what `evidence.witness` reports.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mcp_requests = 0

    def app(self) -> Any:
        inner = super().app()

        async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].rstrip("/") == MCP_PATH:
                self.mcp_requests += 1
            await inner(scope, receive, send)

        return counted

    def reset(self) -> None:
        super().reset()
        self.mcp_requests = 0


class ServeFailed(RuntimeError):
    """A scenario's fixtures could not be served: the scenario is ERROR, the sweep goes on."""


class ScenarioServers:
    """The universe (always) and the cassette (with `--llm replay`) of one scenario, started together."""

    def __init__(self, loaded: LoadedScenario, options: RunOptions) -> None:
        self.warnings: list[str] = []
        universe = loaded.universe
        if universe is None:
            universe = load_universe(EMPTY_UNIVERSE)
            self.warnings.append("the scenario has no universe fixture: an empty universe was served, so any tool "
                                 "call the agent reports is unwitnessed")
        port = options.universe_port or 0
        hook_spec = (loaded.scenario.synthesize if loaded.scenario else None) or options.synthesize
        hook = None
        if hook_spec:
            try:
                hook = load_hook(hook_spec, "synthesize hook", extra_path=str(loaded.path.resolve()))
            except HookError as exc:
                raise ServeFailed(str(exc)) from exc
        self.universe = WitnessingUniverseServer(RecordedUniverse(universe, synthesize=hook), host=options.host,
                                                 port=port)
        self.cassette: CassetteServer | None = None
        self.recorder: RecordingProxy | None = None
        llm_port = options.llm_port or 0
        if loaded.cassette is not None:
            self.cassette = CassetteServer(loaded.cassette, host=options.host, port=llm_port, match=options.llm_match,
                                           pace=options.pace)
        elif options.llm == "auto":
            self.warnings.append("the scenario names no LLM cassette: the model ran live (--llm auto); record one "
                                 "with --llm record to replay it hermetically")
        elif options.llm == "record":
            upstream = options.llm_upstream or os.environ.get("OPENAI_BASE_URL") or DEFAULT_UPSTREAM
            try:
                self.recorder = RecordingProxy(upstream, recording_path(loaded), host=options.host, port=llm_port,
                                               scenario=loaded.id, budget=options.record_budget)
            except (OSError, ValueError) as exc:  # a bad upstream URL; a cassette there that is not one
                raise ServeFailed(f"cannot record into {recording_path(loaded)}: {exc}") from exc
        self.universe_url: str | None = None
        self.llm_url: str | None = None

    def start(self) -> None:
        """Raises `ServeFailed` naming the server and the address (a port in use, a server that did not start)."""
        try:
            self.universe_url = self.universe.start()
        except (OSError, RuntimeError) as exc:
            raise ServeFailed(f"the universe MCP server cannot listen on {self.universe.host}:{self.universe.port}: "
                              f"{exc} (free the port or pass --universe-port)") from exc
        llm = self.cassette or self.recorder
        if llm is not None:
            try:
                self.llm_url = llm.start()
            except (OSError, RuntimeError) as exc:
                self.universe.stop()
                what = "LLM cassette server" if self.cassette else "LLM recording proxy"
                raise ServeFailed(f"the {what} cannot listen on {llm.host}:{llm.port}: {exc} (free the port or "
                                  "pass --llm-port)") from exc

    def stop(self) -> None:
        self.universe.stop()
        if self.cassette is not None:
            self.cassette.stop()
        if self.recorder is not None:
            self.recorder.stop()

    def rewind(self) -> None:
        """A new run: call logs cleared, sequence tools and the cassette cursor rewound."""
        self.universe.reset()
        if self.cassette is not None:
            self.cassette.reset()
        if self.recorder is not None:
            self.recorder.reset()  # each run is a new run of the cassette's ring buffer (`end_recording` keeps it)

    def end_recording(self, trace: Trace) -> str | None:
        """With --llm record: write the run just traced into the cassette, once, unless it errored or went over
        budget (then the file is left as it was); a write that fails makes the run an ERROR. The line to print."""
        if self.recorder is None:
            return None
        try:
            ended = self.recorder.end_run(keep=trace.integrity.status != "ERROR")
        except (OSError, ValueError) as exc:  # ContractError: the file changed under us into one we cannot extend
            trace.integrity = Integrity(status="ERROR", detail=f"the recorded run was not written: {exc}")
            return f"error: {trace.scenario_id}: run {trace.run_index}: the recorded run was not written: {exc}"
        return f"{trace.scenario_id}: run {trace.run_index}: {ended.describe()}"

    def mcp_calls(self) -> list[McpCall]:
        return [McpCall.model_validate(e) for e in self.universe.call_log()]

    def llm_calls(self) -> list[RunLLMCall]:
        return [RunLLMCall.model_validate(e) for e in self.cassette.call_log()] if self.cassette else []


@contextlib.contextmanager
def _exported(servers: ScenarioServers, runtime: Runtime | None = None) -> Iterator[None]:
    """Tell the agent where its tools and model are, for the scenario's duration only: an in-process agent
    in the environment, an `http_inject` endpoint in every `/wt/reset` body (the ports are free ones)."""
    values = {ENV_UNIVERSE_URL: servers.universe_url, ENV_LLM_BASE_URL: servers.llm_url}
    saved = {k: os.environ.get(k) for k in values}
    urls: dict[str, str] | None = getattr(runtime, "replay_urls", None)  # an http_inject runtime's
    saved_urls = dict(urls or {})
    if urls is not None:
        urls.clear()
        urls.update(replay_urls(servers))
    for key, value in values.items():
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if urls is not None:
            urls.clear()
            urls.update(saved_urls)


def replay_urls(servers: ScenarioServers) -> dict[str, str]:
    """The `/wt/reset` fields (`contracts.inject.ResetRequest`) naming where the servers listen."""
    urls = {"universe_url": servers.universe_url, "llm_base_url": servers.llm_url}
    return {k: v for k, v in urls.items() if v}


# ---------------------------------------------------------------- one run


def _divergence_warnings(mcp_calls: list[McpCall], llm_calls: list[RunLLMCall]) -> list[str]:
    """Misses are evidence, not failures (yet): say them in the trace so no reader can overlook them."""
    out = []
    missed = [c for c in mcp_calls if c.divergence]
    if missed:
        calls = ", ".join(f"{c.tool_name}({json.dumps(c.args, sort_keys=True)}) -> {c.match}" for c in missed[:5])
        out.append(f"universe divergence: {len(missed)} tool call(s) matched no recording: {calls}")
    misses = [c for c in llm_calls if c.match == "miss"]
    if misses:
        d = misses[0].divergence or {}
        out.append(f"llm divergence: {len(misses)} model request(s) matched no cassette recording; the first at "
                   f"{d.get('at')}: expected {d.get('expected')!r}, received {d.get('received')!r}")
    return out


def divergence_report(trace: Trace) -> list[str]:
    """The first LLM divergence of a run as a readable diff of the request (which call, what changed), so the
    fix-to-green loop says what the fix changed, not only that the cassette missed."""
    misses = [c for c in trace.llm_calls if c.match == "miss"]
    if not misses:
        return []
    first = misses[0]
    d = first.divergence or {}
    nearest = d.get("nearest_recorded_index")
    head = (f"{trace.scenario_id}: run {trace.run_index}: LLM request #{(first.seq or 0) + 1} of the run matched no "
            "recording" + (f"; against the nearest recorded call #{nearest + 1}:" if nearest is not None else ":"))
    more = [f"  ({len(misses) - 1} more divergent request(s): GET the call log or read the trace)"] if len(
        misses) > 1 else []
    body = d.get("diff") or [f"at {d.get('at')}: expected {d.get('expected')!r}, received {d.get('received')!r}"]
    kind = d.get("kind")
    if kind == "reintroduced":
        why = (f"  this request is the one run {d.get('matches_run')} of the cassette recorded: the old behaviour "
               "is back (a regression, not a recording gap)")
    elif kind == "prompt_changed":
        why = (f"  the {' and '.join(d.get('changed') or ['prompt'])} changed since the recording: a deliberate "
               "change? re-record: wt-otel run ... --llm record (docs/fix-loop.md)")
    else:
        why = ("  the conversation took a path the recording never took (a deliberate change? record a new "
               "baseline: wt-otel run ... --llm record; docs/fix-loop.md)")
    return [head] + [f"  {line}" for line in body] + more + [why]


class _Run:
    """Collects one run's evidence as it happens; `trace()` seals it."""

    def __init__(self, loaded: LoadedScenario, index: int, options: RunOptions, sweep_id: str) -> None:
        self.loaded, self.index, self.options, self.sweep_id = loaded, index, options, sweep_id
        self.started_at = utc_now_iso()
        self.t0 = time.perf_counter()
        self.session_id: str | None = None
        self.turns: list[Turn] = []
        self.surface: SurfaceProbe | None = None
        self.timings: dict[str, float] = {}
        self.warnings: list[str] = list(options.runtime.warnings)
        self.error: str | None = None
        self.failed_turn: tuple[str, ContractViolation] | None = None  # a turn the agent failed (raised, 5xx)

    def drive(self) -> None:
        """Reset, probe, inject; the first failure ends the run as its `error`."""
        runtime = self.options.runtime
        turns = self.loaded.scenario.user_turns if self.loaded.scenario else []
        phase = "reset"
        try:
            t = time.perf_counter()
            runtime.reset()
            self.timings["reset_ms"] = _ms(t)
            phase, t = "surface", time.perf_counter()
            self.surface = runtime.surface()
            self.timings["surface_ms"] = _ms(t)
            if self.surface.status == "invalid":
                self.warnings.append(f"surface invalid (recorded as such, the run goes on): {self.surface.detail}")
            self.session_id = new_session_id()
            t = time.perf_counter()
            for n, text in enumerate(turns, 1):
                phase = f"turn {n} of {len(turns)}"
                self.turns.append(Turn.from_result(text, runtime.inject(self.session_id, text)))
            self.timings["turns_ms"] = _ms(t)
        except ResetFailed as exc:
            self.error = f"reset failed: {exc}"
        except ContractViolation as exc:
            self.error = f"{phase}: {exc}"
            if phase.startswith("turn ") and (exc.rule == "agent_raised" or (
                    exc.rule == "http_status" and (exc.status or 0) >= 500)):
                self.failed_turn = (turns[len(self.turns)], exc)
            if exc.__cause__ is not None:  # the agent's own exception: its traceback goes into the trace
                self.error_traceback = _traceback(exc.__cause__)
        except Exception as exc:  # a runtime bug must still leave a trace, not kill the sweep
            self.error = f"{phase}: the runtime raised {describe_exception(exc)}"
            self.error_traceback = _traceback(exc)

    def _miss_is_the_failure(self, mcp_calls: list[McpCall], llm_calls: list[RunLLMCall]) -> None:
        """One verdict for a miss under every runtime (docs/fix-loop.md, "Misses"): an agent that raised
        (python runtime) or answered 5xx (http_inject) in a run that left its recording failed *because of*
        the miss, as an agent reporting the error in its 200 answer did. That is the agent's scored outcome
        (FAIL, with the miss explained), not a run that could not be judged (ERROR)."""
        if self.failed_turn is None:
            return
        missed = any(c.match == "miss" for c in llm_calls) or any(
            c.is_error and c.match == "fail_call" for c in mcp_calls)
        if not missed:
            return
        text, exc = self.failed_turn
        self.turns.append(Turn(text=text, reply="", tool_calls=[], latency_ms=0.0,
                               error=f"the agent failed after a miss: {exc.message}"))
        self.warnings.append(f"the agent failed on a turn after a miss ({exc.rule}); scored as its outcome: {exc}")
        self.error, self.failed_turn = None, None  # the agent's traceback, if any, stays in the trace as evidence

    def trace(self, servers: ScenarioServers | None) -> Trace:
        mcp_calls = servers.mcp_calls() if servers else []
        llm_calls = servers.llm_calls() if servers else []
        explain_tool_misses(mcp_calls, self.loaded.universe)
        self._miss_is_the_failure(mcp_calls, llm_calls)
        if servers is not None and servers.recorder is not None and servers.recorder.stopped_by:
            self.error = (f"recording stopped: {servers.recorder.stopped_by}; nothing was written, "
                          f"{servers.recorder.cassette.path} is unchanged"
                          + (f" (the agent then failed: {self.error})" if self.error else ""))
        integrity, warnings = run_integrity(self.turns, mcp_calls, self.error)
        self.warnings += warnings + _divergence_warnings(mcp_calls, llm_calls)
        witnessed = servers is not None and servers.universe.mcp_requests > 0
        if servers is not None and not witnessed and self.error is None:
            self.warnings.append(f"the universe at {servers.universe_url} saw no MCP request during this run: is the "
                                 "agent configured with that URL? (only the agent's own report is evidence here)")
        if servers is not None:
            self.warnings = servers.warnings + self.warnings
        runtime = self.options.runtime
        return Trace(
            wt_trace=1, scenario_id=self.loaded.id, run_index=self.index,
            run_id=f"{self.sweep_id}/{self.loaded.id}/run-{self.index}", label=self.options.label,
            started_at=self.started_at, ended_at=utc_now_iso(), runtime=runtime.name, inject_url=runtime.url,
            session_id=self.session_id, universe_url=servers.universe_url if servers else None,
            llm_url=servers.llm_url if servers else None, surface=self.surface, turns=self.turns,
            mcp_calls=mcp_calls, llm_calls=llm_calls,
            observations={OBSERVED: universe_observations(mcp_calls, self.loaded.universe)} if servers else None,
            evidence=Evidence(witness="available" if witnessed else "unavailable",
                              llm="replay" if servers and servers.cassette else "live"),
            warnings=self.warnings, integrity=integrity, timings=Timings(total_ms=_ms(self.t0), **self.timings),
            **({"error_traceback": self.error_traceback} if getattr(self, "error_traceback", None) else {}),
        )


def _traceback(exc: BaseException, limit: int = 20_000) -> str:
    """The formatted traceback (exception groups with every sub-exception), bounded."""
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= limit else text[:limit // 2] + "\n[... cut ...]\n" + text[-limit // 2:]


def error_trace(loaded: LoadedScenario, options: RunOptions, sweep_id: str, reason: str) -> Trace:
    """The Trace of a scenario that could not even start its first run (bad fixture, port in use)."""
    run = _Run(loaded, 1, options, sweep_id)
    run.error = reason
    return run.trace(None)


# ---------------------------------------------------------------- the sweep


class Sweep:
    """One `wt-otel run` invocation: scenarios in order, traces on disk, a verdict per scenario."""

    def __init__(self, options: RunOptions, sweep_id: str | None = None) -> None:
        self.options = options
        self.sweep_id = sweep_id or new_sweep_id()
        self.directory = options.runs_dir / self.sweep_id
        self.started_at = utc_now_iso()
        self.packs = PackCache()  # each pack.yaml read once per sweep
        self._dirs: set[str] = set()

    def _progress(self, text: str) -> None:
        if self.options.progress is not None:
            self.options.progress(text)

    def _scenario_dir(self, loaded: LoadedScenario) -> Path:
        """The scenario's folder in the sweep: its id, made unique when two scenarios share one."""
        name, n = loaded.id, 2
        while name in self._dirs:
            name, n = f"{loaded.id}-{n}", n + 1
        self._dirs.add(name)
        return self.directory / name

    def _write(self, result: ScenarioRun, folder: Path, trace: Trace) -> None:
        path = folder / f"run-{trace.run_index}{TRACE_SUFFIX}"
        atomic_write(path, json.dumps(trace.to_dict(), indent=2, ensure_ascii=False) + "\n")
        result.traces.append(trace)
        result.trace_paths.append(path)

    def _membership(self, loaded: LoadedScenario) -> Membership:
        """Effective pack/owner/metadata; an invalid `pack.yaml` is ignored here (the CLI has already checked
        strictly before running, and a library caller's sweep must still record every scenario)."""
        return self.packs.membership(loaded.path, loaded.scenario, strict=False)

    def run_scenario(self, loaded: LoadedScenario, position: str) -> ScenarioRun:
        """Every run of one scenario; the first ERROR ends it (a broken endpoint or wipe will not heal)."""
        runs = self.options.runs or loaded.runs
        result = ScenarioRun(loaded.id, loaded.path, runs)
        result.universe_path = universe_path_of(loaded.path, loaded.scenario.fixtures.universe
                                                if loaded.scenario else None)
        folder = self._scenario_dir(loaded)
        if loaded.error:
            self._write(result, folder, error_trace(loaded, self.options, self.sweep_id, loaded.error))
            self._judge(result, loaded)
            return result
        try:
            servers = ScenarioServers(loaded, self.options)  # loads the synthesize hook, the recorder: may fail
            servers.start()
        except ServeFailed as exc:
            reason = f"cannot serve the scenario's fixtures: {exc}"
            self._write(result, folder, error_trace(loaded, self.options, self.sweep_id, reason))
            self._judge(result, loaded)
            return result
        self.options.emit(f"{loaded.id}: universe at {servers.universe_url}"
                          + (f", LLM cassette at {servers.llm_url}" if servers.cassette else "")
                          + (f", LLM recording proxy at {servers.llm_url} -> {servers.recorder.upstream} into "
                             f"{servers.recorder.cassette.path}" if servers.recorder else ""))
        try:
            with _exported(servers, self.options.runtime):
                for index in range(1, runs + 1):
                    self._progress(f"{position} {loaded.id}: run {index}/{runs}")
                    servers.rewind()
                    run = _Run(loaded, index, self.options, self.sweep_id)
                    run.drive()
                    trace = run.trace(servers)
                    for line in divergence_report(trace):
                        self.options.emit(line)
                    recorded = servers.end_recording(trace)
                    if recorded:
                        self.options.emit(recorded)
                    self._write(result, folder, trace)
                    if trace.integrity.status == "ERROR":
                        break
                else:
                    self._robustness(loaded, servers, result, folder, runs)
        finally:
            servers.stop()
        self._judge(result, loaded, skipped=runs - len(result.traces))
        return result

    def _robustness(self, loaded: LoadedScenario, servers: ScenarioServers, result: ScenarioRun, folder: Path,
                    runs: int) -> None:
        """One run per perturbation (the scenario's, then `--perturb`'s), after the ordinary runs held."""
        declared = list(loaded.scenario.perturbations) if loaded.scenario else []
        for k, perturbation in enumerate(declared + list(self.options.perturbations), 1):
            self._progress(f"{loaded.id}: robustness {k} ({perturbation.label})")
            servers.rewind()
            servers.universe.engine.perturbation = perturbation
            try:
                run = _Run(loaded, runs + k, self.options, self.sweep_id)
                run.drive()
                trace = run.trace(servers)
            finally:
                servers.universe.engine.perturbation = None
            trace.perturbation = perturbation.to_dict() | {"label": perturbation.label}
            trace.run_id = f"{self.sweep_id}/{loaded.id}/perturb-{k}"
            path = folder / f"perturb-{k}{TRACE_SUFFIX}"
            atomic_write(path, json.dumps(trace.to_dict(), indent=2, ensure_ascii=False) + "\n")
            result.perturbed.append(trace)
            result.perturbed_paths.append(path)

    def _judge(self, result: ScenarioRun, loaded: LoadedScenario, skipped: int = 0) -> None:
        """Score every run (writing `run-<n>.score.json` beside each trace) and record the scenario's result."""
        scored = score_scenario(loaded.id, None if loaded.error else loaded.scenario, loaded.path, result.traces,
                                result.trace_paths, perturbed=result.perturbed, perturbed_paths=result.perturbed_paths,
                                extra_perturbations=bool(self.options.perturbations), universe=loaded.universe)
        if scored.verdict == "ERROR" and skipped > 0:
            scored.detail = f"{scored.detail} ({skipped} later run(s) skipped)"
        if not loaded.error and loaded.scenario is not None and UNREVIEWED_TAG in (loaded.scenario.tags or []):
            mark_unreviewed(scored, result.traces, loaded.path)
        result.ran, result.verdict_detail = True, scored.detail
        result.record = judged_record(scored, self._membership(loaded), result.traces, label=self.options.label)

    def _not_run(self, loaded: LoadedScenario, stopped: str) -> ScenarioRun:
        result = ScenarioRun(loaded.id, loaded.path, self.options.runs or loaded.runs)
        result.record = not_run_record(loaded.id, self._membership(loaded), label=self.options.label,
                                       stopped=stopped)
        return result

    def run(self, scenarios: list[LoadedScenario]) -> SweepRun:
        results: list[ScenarioRun] = []
        stopped: str | None = None
        errors_in_a_row = 0
        probe = getattr(self.options.runtime, "unreachable", None)
        why = probe() if callable(probe) and scenarios else None
        if why is not None:  # checked once: each scenario is a short ERROR (trace + row) naming the URL given
            reason = f"the agent at {self.options.runtime.url} is unreachable ({why}); nothing was run"
            self.options.emit(f"error: {reason}. Start the agent there, or point --url at it")
            for loaded in scenarios:
                result = ScenarioRun(loaded.id, loaded.path, self.options.runs or loaded.runs)
                self._write(result, self._scenario_dir(loaded),
                            error_trace(loaded, self.options, self.sweep_id, reason))
                self._judge(result, loaded)
                results.append(result)
            return self.finish(results)
        for i, loaded in enumerate(scenarios, 1):
            if stopped:
                results.append(self._not_run(loaded, stopped))
                continue
            result = self.run_scenario(loaded, f"[{i}/{len(scenarios)}]")
            results.append(result)
            errors_in_a_row = errors_in_a_row + 1 if result.status == "ERROR" else 0
            if errors_in_a_row >= self.options.breaker and i < len(scenarios):
                stopped = (f"circuit breaker: {errors_in_a_row} consecutive scenarios errored (the last: "
                           f"{result.detail}); {len(scenarios) - i} scenario(s) not run")
        return self.finish(results, stopped)

    def record_error(self, loaded: LoadedScenario, reason: str) -> SweepRun:
        """This sweep as one scenario that could not run, for `reason` (see `error_sweep`)."""
        result = ScenarioRun(loaded.id, loaded.path, self.options.runs or loaded.runs)
        self._write(result, self._scenario_dir(loaded), error_trace(loaded, self.options, self.sweep_id, reason))
        self._judge(result, loaded)
        return self.finish([result])

    def finish(self, results: list[ScenarioRun], stopped: str | None = None) -> SweepRun:
        """The output stage: `summary.json`, the results record, and the ledger rows (not-run ones included)."""
        sweep = SweepRun(self.sweep_id, self.directory, results, stopped)
        self.write_summary(sweep)
        records = [s.record for s in results if s.record is not None]
        sweep.record = SweepResult(sweep_id=self.sweep_id, started_at=self.started_at, finished_at=utc_now_iso(),
                                   selection=self.options.selection or {}, label=self.options.label,
                                   git_sha=git_sha(), wt_version=__version__, scenarios=records, stopped=stopped)
        if self.options.ledger:
            sweep.ledger_path = append_ledger(self.options.runs_dir, sweep.record)
        return sweep

    def write_summary(self, sweep: SweepRun) -> None:
        """`summary.json`: every scenario with its verdict, runs and trace files, not-run ones included."""
        data = {
            "sweep_id": sweep.sweep_id, "label": self.options.label, "runtime": self.options.runtime.name,
            "llm": self.options.llm, "stopped": sweep.stopped, "passed": sweep.passed,
            "scenarios": [{
                "id": s.id, "path": str(s.path), "verdict": s.status, "detail": s.detail, "note": s.note,
                "runs_planned": s.runs_planned, "runs_recorded": len(s.traces),
                "traces": [str(p.relative_to(sweep.directory)) for p in s.trace_paths],
            } for s in sweep.scenarios],
        }
        atomic_write(sweep.directory / SUMMARY_FILE, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def load_all(dirs: list[Path], llm: LlmMode) -> list[LoadedScenario]:
    """Load every scenario directory; a broken one comes back with `error` set, never raised."""
    return [load_one(d, llm) for d in dirs]


def load_one(directory: Path, llm: LlmMode) -> LoadedScenario:
    """replay needs the cassette, auto takes it when the scenario names one, live and record leave it."""
    loaded = load_scenario_dir(directory, need_cassette=llm == "replay")
    if llm == "auto" and loaded.error is None and loaded.scenario and loaded.scenario.fixtures.cassette:
        loaded = load_scenario_dir(directory, need_cassette=True)
    return loaded


def run_sweep(scenario_dirs: list[Path], options: RunOptions) -> SweepRun:
    """`wt-otel run` without the command line: load, replay, score, write summary and ledger rows.

    For callers that pick their scenarios themselves (`wt-otel serve`'s automatic replay): no selection,
    every directory is run, a broken one is an ERROR row like any other.
    """
    return Sweep(options).run(load_all(scenario_dirs, options.llm))


def error_sweep(scenario_dir: Path, options: RunOptions, reason: str) -> SweepRun:
    """A sweep of one scenario that did not run, for `reason`: an ERROR trace, its score and a ledger row.

    So that a replay that never finished (serve stopped or killed mid-run) still leaves the same record
    as one that failed, instead of vanishing from the ledger.
    """
    return Sweep(options).record_error(load_scenario_dir(scenario_dir, need_cassette=False), reason)


__all__ = ["BREAKER", "ENV_LLM_BASE_URL", "ENV_UNIVERSE_URL", "RunOptions", "ScenarioRun", "ScenarioServers",
           "Sweep", "SweepRun", "WitnessingUniverseServer", "error_sweep", "error_trace", "git_sha", "load_all",
           "new_sweep_id", "run_sweep"]
