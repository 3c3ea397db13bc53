"""Automatic replay: the stage after the data dir that turns flagged incidents into replayed scenarios.

    store writes a session -> complete and flagged? -> import into <data-dir>/scenarios/<slug>/
                           -> queue (wt_otel.serve.replay_queue) -> worker: replay, score, ledger row, result spans

Registered as the `auto-replay` processor; `wt-otel serve` builds it from the
config's `replay` section when `replay.enabled` is true.

- The import is `wt-otel import`'s writer (the `scenario-dir` exporter), with
  the config's default outcome check written into scorer.py and the scenario
  marked `unreviewed` + `auto-replay`: it is evidence to triage, not a test.
- Only complete sessions are queued: a session flushed early (memory bound) is
  written incomplete and queued when a complete revision arrives.
- One worker per serve, since the config names one endpoint: replays run one
  at a time per endpoint, which is also what the fixed universe/LLM ports the
  agent was configured with allow.
- The worker calls the runner (`wt_otel.replay.runner.run_sweep`), not a copy of it,
  so a replay here writes exactly what `wt-otel run --runs-dir` writes: traces,
  score sidecars, summary.json, a ledger row; then the sweep goes out through
  the `result-spans` exporter when an endpoint is configured.
- Nothing is retried: a replay that errors is an ERROR ledger row and ERROR
  spans; a replay cut short (SIGTERM's bounded wait ran out, or kill -9 found
  at the next start) is closed as ERROR "interrupted". Re-run it by hand with
  `wt-otel run <data-dir>/scenarios/<slug>`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import field_validator

from wt_otel._util.fsutil import unique_slug
from wt_otel._util.otlp_env import resolve_otlp
from wt_otel._util.terminal import shown
from wt_otel.components import CompletedSession, StageContext, StageType, load_plugin
from wt_otel.components import load as load_component
from wt_otel.model.session import Session
from wt_otel.scoring.names import AUTO_REPLAY_SCORERS
from wt_otel.serve.config import ReplayConfig, ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.replay_queue import Job, QueueAdmission, ReplayQueue

if TYPE_CHECKING:  # the runner pulls in the MCP and cassette servers (seconds of imports): only when replaying,
    # so that the in-app SDK processor and a serve without replay, which plan this stage, stay light
    from wt_otel.components import Runtime
    from wt_otel.contracts.results import SweepResult as SweepRecord
    from wt_otel.replay.runner import RunOptions, SweepRun

log = logging.getLogger("wt_otel.auto_replay")

SCENARIOS = "scenarios"
LABEL = "auto-replay"
POLL_S = 0.5  # how often an idle worker checks whether it should stop


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


def incident_ref(session: Session) -> str:
    """The origin ref the queue deduplicates by: what the envelope's `source.ref` says (exporters/envelope.py)."""
    return session.flag_ref or (session.trace_ids[0] if session.trace_ids else session.key)


@dataclass
class _Target:
    """An agent to replay against and the services whose incidents it takes."""

    name: str
    services: list[str]
    runtime: Runtime
    universe_port: int
    llm_port: int

    def takes(self, service: str | None) -> bool:
        return service is not None and any(fnmatchcase(service, p) for p in self.services)


@dataclass
class _InFlight:
    """The job the worker is on, and its sweep once the runner returned (then only export is left)."""

    job: Job
    sweep: SweepRun | None = None
    ledger: Path | None = None


class AutoReplay:
    """Imports flagged sessions, queues them, and replays the queue on a worker thread."""

    def __init__(self, config: ReplayConfig, data_dir: Path, runs_dir: Path, metrics: Metrics | None = None, *,
                 emit: Callable[[str], None] = print, warn: Callable[[str], None] | None = None) -> None:
        """Validates the settings (ValueError: a bad runtime or OTLP endpoint) and reads the queue file."""
        self.config = config
        self.data_dir = Path(data_dir)
        self.runs_dir = Path(runs_dir)
        self.metrics = metrics or Metrics()
        self.emit = emit
        self.warn = warn or log.warning
        from wt_otel.replay.runtimes import resolve_runtime

        self.runtime: Runtime = resolve_runtime(config.runtime, url=config.inject_url)
        # replay targets per service: (name, patterns, runtime, universe port, llm port); the first match wins
        self.targets: list[_Target] = [_Target("default", list(config.services), self.runtime, config.universe_port,
                                               config.llm_port)]
        for n, target in enumerate(config.targets, 1):
            self.targets.append(_Target(f"target-{n}", list(target.services),
                                        resolve_runtime(target.runtime, url=target.inject_url), target.universe_port,
                                        target.llm_port))
        results = config.results
        self.exporter: Any = None
        settings = resolve_otlp(results.otlp_endpoint, results.otlp_protocol, results.otlp_headers or None,
                                explicit_source="replay.results.otlp_endpoint")
        if settings is not None:
            self.exporter = load_component("exporters", "result-spans").from_settings(
                settings, agent_name=results.agent_name, warn=self.warn)
        self.writer = load_plugin("sinks", "scenario-dir")(self.data_dir / SCENARIOS)
        self.queue = ReplayQueue(self.data_dir, config.queue_max)
        self._lock = threading.Lock()  # the in-flight job, between the worker and stop()
        self._current: _InFlight | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._work, name="wt-otel-auto-replay", daemon=True)
        self._closed = False
        self._depth()

    @classmethod
    def from_config(cls, config: ServeConfig, metrics: Metrics | None = None, **kwargs: Any) -> AutoReplay:
        return cls(config.replay, config.data_dir, config.runs_dir, metrics, **kwargs)

    @property
    def endpoint(self) -> str:
        return self.runtime.url or self.runtime.name

    @property
    def results_target(self) -> str:
        """Where result spans go, in words (printed at start, so nobody wonders where they went)."""
        if self.exporter is None:
            return ("not exported (no replay.results.otlp_endpoint / --results-otlp-endpoint / "
                    "OTEL_EXPORTER_OTLP_ENDPOINT; set one to send them to Phoenix, Jaeger, Tempo or any OTLP backend)")
        return f"{self.exporter.target.url} ({self.exporter.target.protocol})"

    def drop_exporter_if_self(self, ports: set[int]) -> str | None:
        """An exporter aimed at this serve's own receivers (OTEL_EXPORTER_OTLP_ENDPOINT set for the apps, and
        inherited by serve) would feed result spans back in; turn it off and say why."""
        if self.exporter is None:
            return None
        from urllib.parse import urlsplit

        url = urlsplit(self.exporter.target.url)
        if url.hostname in ("127.0.0.1", "localhost", "::1", "0.0.0.0") and url.port in ports:
            target, self.exporter = self.exporter.target.url, None
            return (f"result spans NOT exported: the endpoint {target} is this serve's own receiver "
                    "(set replay.results.otlp_endpoint or --results-otlp-endpoint to a tracing backend)")
        return None

    def start(self) -> AutoReplay:
        self._thread.start()
        return self

    # ---------------------------------------------------------------- the pipeline side

    def on_written(self, session: Session, written: Any) -> None:
        """Called after the store wrote a session revision; queues it when it is a complete incident."""
        if not (session.complete and session.flagged):
            return
        ref = incident_ref(session)
        if not session.content_captured or not session.user_turns:  # nothing to inject: not a replayable incident
            if not session.content_captured:
                setting = next((d.get("setting") for d in session.diagnostics if d.get("setting")), None)
                self._refuse(ref, "no conversation to replay: the session holds no message content (capture off "
                             f"or redacted in service {session.service_name or '(unknown)'})"
                             + (f"; turn it on with {setting}" if setting else ""))
            else:
                self._refuse(ref, "no conversation to replay: the session has no user turn with text")
            # counted once said: a reader that sees the count sees the warning and the queue's event too
            self.metrics.inc("wt_otel_replay_skipped_total", reason="no_conversation")
            return
        target = self.target_for(session)
        if target is None:  # kept in the data dir and said; never replayed against another service's agent
            configured = ", ".join(p for t in self.targets for p in t.services) or "none"
            why = (f"no replay target for service {shown(session.service_name or '(unknown)')} (replay.services / "
                   f"--replay-service name the services the agent at {self.endpoint} serves; configured: "
                   f"{configured})")
            self.queue.refuse(ref, why)
            self.warn(f"incident {shown(ref)} NOT replayed: {why}; its session stays in the data dir")
            self.metrics.inc("wt_otel_replay_skipped_total", reason="no_target")
            return
        admission = self.queue.admit(ref)
        if admission is QueueAdmission.DUPLICATE:
            job = self.queue.known(ref)
            self.metrics.inc("wt_otel_replay_duplicates_total")
            log.info("incident %s: revision %s not queued again (job %s, %s)", ref, written.revision,
                     job.id if job else "?", job.state if job else "?")
            return
        if admission is QueueAdmission.FULL:
            self._refuse(ref, f"the replay queue is full ({self.queue.max_pending} pending, replay.queue_max)")
            return
        t0 = time.perf_counter()
        taken = {p.name for p in self.writer.out.iterdir()} if self.writer.out.is_dir() else set()
        slug = unique_slug(ref, session.key, taken)
        try:
            self.writer.write(session, slug, outcome_scorers=list(self.config.outcome_scorers))
        except Exception as exc:  # a writer bug or a full disk: said, counted, never silently dropped
            self._refuse(ref, f"cannot import it into {SCENARIOS}/{slug}: {type(exc).__name__}: {exc}")
            return
        entry = getattr(written, "entry", {}) or {}
        job = self.queue.enqueue(ref, f"{SCENARIOS}/{slug}", session=entry.get("path"), key=session.key,
                                 target=target.name, service=session.service_name,
                                 revision=getattr(written, "revision", None), written_at=entry.get("written_at"),
                                 import_ms=_ms(t0))
        self.metrics.inc("wt_otel_replays_queued_total")
        self._depth()
        self.emit(f"queued incident {shown(ref)} for replay: {self.data_dir / job.scenario} (unreviewed; outcome "
                  f"{' + '.join(self.config.outcome_scorers)}; {self.queue.pending} pending)")

    def on_session(self, done: CompletedSession) -> None:
        """The session-stage face of `on_written`: after the `datadir` stage set `done.written`."""
        if done.written is None:
            raise RuntimeError("the auto-replay stage needs a stage that writes sessions (datadir) before it in "
                               "pipeline.stages")
        self.on_written(done.session, done.written)

    def close(self) -> None:
        """`stop()` once (with `replay.stop_timeout`); a no-op when already stopped."""
        if not self._closed:
            self.stop()

    def _refuse(self, ref: str, reason: str) -> None:
        self.queue.refuse(ref, reason)
        self.warn(f"incident {shown(ref)} NOT queued for replay: {shown(reason)}; its session stays in the data dir "
                  "(replay it by hand: wt-otel import / wt-otel run)")
        self.metrics.inc("wt_otel_replay_refused_total")

    def _depth(self) -> None:
        self.metrics.set("wt_otel_replay_queue_depth", self.queue.pending)

    # ---------------------------------------------------------------- the worker

    def target_for(self, session: Session) -> _Target | None:
        """The agent that replays this session's service, or None (the service has no replay target)."""
        return next((t for t in self.targets if t.takes(session.service_name)), None)

    def _options(self, job: Job | None = None) -> RunOptions:
        from wt_otel.replay.runner import RunOptions

        c = self.config
        name = (job.info.get("target") if job is not None else None) or "default"
        t = next((t for t in self.targets if t.name == name), self.targets[0])
        return RunOptions(runtime=t.runtime, runs_dir=self.runs_dir, runs=c.runs, llm=c.llm, llm_match=c.llm_match,
                          universe_port=t.universe_port, llm_port=t.llm_port, label=LABEL,
                          emit=lambda text: log.debug("%s", text), selection={"auto_replay": True},
                          ledger=False,  # appended here, so an abandoned replay cannot add a second row
                          synthesize=c.synthesize)

    def _work(self) -> None:
        for stale in self.queue.interrupted():
            self._close_interrupted(stale, "interrupted: a previous wt-otel serve stopped or was killed during this "
                                         "replay; not retried (re-run it with wt-otel run)")
        while not self._stopping.is_set():
            taken = self.queue.take(timeout=POLL_S)
            if taken is not None:
                self._replay(taken)

    def _replay(self, job: Job) -> None:
        with self._lock:
            self._current = _InFlight(job)
        from wt_otel.replay.runner import error_sweep, run_sweep
        from wt_otel.reporting.outputs import append_ledger

        scenario_dir = self.data_dir / job.scenario
        t0 = time.perf_counter()
        try:
            sweep = run_sweep([scenario_dir], self._options(job))
        except Exception as exc:  # the runner records failures itself; this is the last line
            log.exception("replay of %s crashed", job.ref)
            sweep = error_sweep(scenario_dir, self._options(job), f"the replay crashed: {type(exc).__name__}: {exc}")
        replay_ms = _ms(t0)
        with self._lock:
            if self._current is None or self._current.job is not job:  # stop() closed it already
                return
            self._current.sweep, self._current.ledger = sweep, append_ledger(self.runs_dir, _document(sweep))
        self._conclude(job, sweep, replay_ms=replay_ms)
        with self._lock:
            self._current = None

    def _conclude(self, job: Job, sweep: SweepRun, *, replay_ms: float | None = None, note: str = "") -> None:
        """Export the sweep's spans (bounded), then write the job's `done` line, the metrics and one line of news."""
        t0 = time.perf_counter()
        exported = None
        if self.exporter is not None:
            report = self.exporter.export_sweep(sweep)
            exported = report.describe()
        export_ms = _ms(t0)
        row = _document(sweep).scenarios[0]
        ledger = self.runs_dir / "ledger.ndjsonl"
        if not self.queue.finish(job, row.verdict, row.detail, sweep_id=sweep.sweep_id, traces=str(sweep.directory),
                                 ledger=str(ledger), replay_ms=replay_ms, export_ms=export_ms, exported=exported):
            return
        self.metrics.inc("wt_otel_replays_total", verdict=row.verdict)
        if row.verdict == "ERROR":
            self.metrics.inc("wt_otel_replay_errors_total")
        self._depth()
        detail = f": {row.detail}" if row.detail else ""
        self.emit(f"replayed incident {shown(job.ref)}: {row.verdict}{shown(detail)}{note}; traces "
                  f"{sweep.directory}/; ledger {ledger}; result spans {exported or self.results_target}")

    def _close_interrupted(self, job: Job, reason: str) -> None:
        """An ERROR trace, ledger row and spans for a replay that never finished, then its `done` line."""
        from wt_otel.replay.runner import error_sweep
        from wt_otel.reporting.outputs import append_ledger

        sweep = error_sweep(self.data_dir / job.scenario, self._options(job), reason)
        append_ledger(self.runs_dir, _document(sweep))
        self._conclude(job, sweep)

    def stop(self, timeout: float | None = None) -> None:
        """Let the replay in flight finish within `timeout` (default `replay.stop_timeout`), else close it as
        ERROR "interrupted"; waiting jobs stay queued on disk for the next start."""
        wait = self.config.stop_timeout if timeout is None else timeout
        self._closed = True
        self._stopping.set()
        self.queue.wake()
        if self._thread.is_alive():
            self._thread.join(wait)
        with self._lock:
            current, self._current = self._current, None
        if current is not None and self._thread.is_alive():
            if current.sweep is not None:  # replayed and in the ledger; only the export was still running
                self._conclude_quietly(current.job, current.sweep)
            else:
                with contextlib.suppress(Exception):
                    self._close_interrupted(current.job, f"interrupted: wt-otel serve stopped during this replay "
                                                         f"(waited {wait:g} s); not retried")
        for target in self.targets:
            with contextlib.suppress(Exception):
                target.runtime.close()
        self.queue.close()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for a worker `stop()` abandoned (its replay still ran); True once it ended. A process that
        embeds serve and starts another on the same data dir and ports must wait for this first."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _conclude_quietly(self, job: Job, sweep: SweepRun) -> None:
        row = _document(sweep).scenarios[0]
        self.queue.finish(job, row.verdict, row.detail, sweep_id=sweep.sweep_id, traces=str(sweep.directory),
                          exported="unknown: wt-otel serve stopped while the result spans were being exported")


class AutoReplayConfig(ReplayConfig):
    """The `replay:` section as this stage reads it: the core's model plus the checks only replay knows."""

    @field_validator("outcome_scorers")
    @classmethod
    def _known_scorers(cls, names: list[str]) -> list[str]:
        """Names become code in scorer.py: only the whitelisted factory names are accepted, never pasted text."""
        unknown = [n for n in names if n not in AUTO_REPLAY_SCORERS]
        if unknown:
            raise ValueError(f"unknown outcome scorer(s) {unknown}: choose from {sorted(AUTO_REPLAY_SCORERS)} "
                             "(wt_otel.scorers factories that take no arguments)")
        if not names:
            raise ValueError("name at least one outcome scorer (e.g. no_divergence), or the replay judges nothing")
        return list(dict.fromkeys(names))


def _create(config: AutoReplayConfig, ctx: StageContext, _next: None) -> AutoReplay | None:
    """None (no stage) unless `replay.enabled`; ValueError for a runtime or endpoint that cannot work."""
    if not config.enabled:
        return None
    serve = ctx.serve_config
    replay = AutoReplay(config, serve.data_dir, serve.runs_dir, ctx.metrics, emit=ctx.emit, warn=ctx.warn)
    ctx.recovery.extend(f"replay queue: {note}" for note in replay.queue.recovery)
    return replay


STAGE = StageType("auto-replay", "session", _create, AutoReplayConfig, section="replay",
                  description="import complete flagged sessions, queue them and replay them on a worker")


def _document(sweep: SweepRun) -> SweepRecord:
    """The sweep's results document: every finished sweep (`run_sweep`, `error_sweep`) has one."""
    if sweep.record is None:
        raise RuntimeError(f"sweep {sweep.sweep_id} has no results document")
    return sweep.record
