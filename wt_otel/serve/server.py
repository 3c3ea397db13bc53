"""`wt-otel serve`'s parts, wired from a `ServeConfig`: `build_pipeline()`, and one object to start and stop.

    receivers -> queue -> genai-filter -> assembler -> flagger -> redactor -> datadir [-> auto-replay]

The stage order is data (`pipeline.stages`, the default above), and every stage is built the
same way: its `StageType` (a type name, a config model, a factory) is found by name in the
`wt_otel.stages` entry-point group, its config section is validated with its model, and the
factory builds it (back to front, as the Collector builds consumers). `build_pipeline()` is
what serve and the in-app SDK processor (`processors/sdk.py`) both call; the core still
imports no processor or exporter.

The command line is a thin shell over `Server` (parse flags, print, map failures to exit
codes); the demo, the benchmark and the tests run the very same wiring in-process.

Stop order matters and is the point of having it in one place: receivers stop taking data,
the queue drains what was acknowledged and the assembler writes every open session (which
may queue more incidents), then the session stages close in reverse order: the replay worker
finishes or abandons its replay within a bounded wait, and only then is the data dir closed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wt_otel._util.terminal import shown
from wt_otel._util.tuning import memory_return
from wt_otel.components import (
    CompletedSession,
    IndexedSession,
    PluginError,
    StageContext,
    check_plugin,
)
from wt_otel.ingest import spanindex
from wt_otel.ingest.capture import capture_hint
from wt_otel.ingest.sessions import attach_logs, build_session
from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord, count
from wt_otel.serve.budget import AdmissionControl
from wt_otel.serve.config import PlannedStage, ServeConfig, StageConfigError, stage_plan
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline

log = logging.getLogger("wt_otel.serve.server")

_BY_REFERENCE_STAGES = frozenset({"flagger", "datadir", "auto-replay"})  # need nothing of an unflagged session

__all__ = ["ServeStartError", "Server", "SessionPipeline", "StageConfigError", "build_pipeline", "stage_plan"]

MAX_NAMED_SERVICES = 100  # services named in wt_otel_sessions_without_content_total and the log
OTHER_SERVICES = "(other services)"


@dataclass
class SessionPipeline:
    """What `build_pipeline()` returns: the records head, the stages by name, and their shared context."""

    head: Any  # RecordConsumer: what the queue feeds
    stages: dict[str, Any]  # by name, in pipeline order (session stages turned off by config are absent)
    context: StageContext
    assembler: Any
    session_stages: list[tuple[str, Any]] = field(default_factory=list)
    session_types: list[str] = field(default_factory=list)  # each session stage's type name, in order
    queue: Pipeline | None = None
    no_content_services: set[str] = field(default_factory=set)  # named (at most MAX_NAMED_SERVICES)
    others_without_content: bool = False  # past that: said once, counted as OTHER_SERVICES
    admission: AdmissionControl | None = None  # what the queue admits (wt_otel.serve.budget), once started
    on_health_change: Callable[[], None] | None = None  # the store's health changed (wakes the receiver process's feed)
    probe_every: int = 1000  # of the sessions kept by reference, the first and then one in this many are built too
    probe_interval: float = 1.0  # and at most one a second (time.monotonic)
    kept: int = field(default=0, init=False)
    _probed_at: float = field(default=float("-inf"), init=False)

    @property
    def store(self) -> Any:
        return self.context.store

    @property
    def recovery(self) -> list[str]:
        return self.context.recovery

    def emit_session(self, session: Session, spans: list[SpanRecord]) -> None:
        """The assembler's sink: each completed session through the session stages, in order.

        One conversation can carry several incidents (flagged at different turns, each with its own id):
        each id other than the session's first goes through the stages after the flagger as a session of
        its own (key `<key>+<id>`), so every incident is its own scenario and none folds into another."""
        done = CompletedSession(session, spans)
        after_flagger = self._run_stages(done)
        if after_flagger is None:
            return
        self._say_if_no_content(session)
        if not after_flagger:
            return
        for ref in session.flag_refs:
            if ref == session.flag_ref:
                continue
            other = dataclasses.replace(session, key=f"{session.key}+{ref}", flag_ref=ref, flag_refs=[ref],
                                        flag_reason=f"{session.flag_reason} (a later incident, {ref}, in the "
                                                    f"conversation of {session.flag_ref})")
            self._run_stages(CompletedSession(other, spans), start=after_flagger)

    def _run_stages(self, done: CompletedSession, start: int = 0) -> int | None:
        """The session stages from `start` on; the index after the flagger (0: none), None when halted."""
        session, spans = done.session, done.spans
        after_flagger = 0
        for n, (name, stage) in enumerate(self.session_stages[start:], start):
            try:
                stage.on_session(done)
            except Exception as exc:
                store = self.store
                if done.written is not None or store is None or not hasattr(store, "quarantine"):
                    raise  # already stored (a later stage failed): the assembler logs and counts it
                # hostile content must cost this session a stage, not its data
                log.exception("session %s: stage %s failed", shown(session.key), name)
                store.quarantine(session, spans, f"stage {name} failed: {type(exc).__name__}: {exc}")
                return None
            if done.halted:  # the store deferred or quarantined it: nothing after it has a `written`
                return None
            if name == "flagger":
                after_flagger = n + 1
            if done.pending:  # finished later (a render worker): the stage calls `resume` for the rest
                done.resume = functools.partial(self._resume, done, n + 1)
                return after_flagger
        return after_flagger

    def _resume(self, done: CompletedSession, start: int) -> None:
        done.pending = False
        done.resume = None  # done -> resume -> done: a cycle that kept the session's records until a full GC
        self._run_stages(done, start)

    def _say_if_no_content(self, session: Session) -> None:
        """Content capture off (the default of GenAI instrumentations): said once per service, with the
        setting that turns it on, and counted per service. The service name is trace content: past
        `MAX_NAMED_SERVICES` names (a producer that puts an id in `service.name`, say) the rest are counted
        as one, said once, so neither /metrics nor the log grows without end."""
        if session.content_captured or not session.llm_calls:
            return
        service = session.service_name or "(unknown service)"
        if service not in self.no_content_services:
            if len(self.no_content_services) < MAX_NAMED_SERVICES:
                self.no_content_services.add(service)
                self.context.warn(shown(capture_hint(session)))
            else:
                if not self.others_without_content:  # a flag, not the set: a service may be named "(other services)"
                    self.others_without_content = True
                    self.context.warn(f"more than {MAX_NAMED_SERVICES} services record no message content; the "
                                      f"others are counted together as {OTHER_SERVICES!r} and not named in the log")
                service = OTHER_SERVICES
        self.context.metrics.inc("wt_otel_sessions_without_content_total", service=service)

    def start_queue(self, *, max_queued_records: int, tick_interval: float) -> Pipeline:
        """The bounded queue in front of `head`, with admission control (`serve.queue`) and, when there is a
        data dir, its health: a full disk stops acknowledging until deferred writes go through."""
        q = self.context.serve_config.queue
        held = getattr(self.assembler, "held_bytes", None)
        self.admission = AdmissionControl(dataclasses.replace(q.budget(), max_records=max_queued_records),
                                          held=held if callable(held) else None)
        housekeeping: list[Callable[[], object]] = [memory_return.maybe]  # freed heap pages back after large requests
        store = self.store
        if store is not None and hasattr(store, "retry_deferred"):
            store.on_health = self._store_health
            housekeeping.append(store.retry_deferred)
        if store is not None and hasattr(store, "take_flag_requests"):
            housekeeping.append(self._flag_requested)
        self.queue = Pipeline(self.head, self.context.metrics, max_queued_records=max_queued_records,
                              tick_interval=tick_interval, admission=self.admission,
                              housekeeping=housekeeping,
                              writer_lag=getattr(self.assembler, "write_backlog", None),
                              write_cost=getattr(self.assembler, "write_cost", None)).start()
        return self.queue

    def _flag_requested(self) -> None:
        """`wt-otel flag` while serve runs: the store flags what it asked for (each tick), and each session it
        built goes through the stages after the store (auto-replay), as a session flagged on arrival would."""
        requests = self.store.take_flag_requests()
        if not requests:
            return
        after = next((n + 1 for n, (_, stage) in enumerate(self.session_stages) if stage is not None
                      and getattr(stage, "store", None) is self.store), len(self.session_stages))
        for session, written in requests:
            self._run_stages(CompletedSession(session, [], written=written), start=after)

    def _store_health(self, reason: str | None) -> None:
        """The data dir became unwritable (stop acknowledging) or writable again."""
        if self.admission is not None:
            self.admission.set_degraded("data dir", reason)
        if self.on_health_change is not None:
            self.on_health_change()  # the receiver process learns it with the next status, sent now
        self.context.metrics.set("wt_otel_datadir_degraded", 1 if reason else 0)
        if reason:
            self.context.warn(f"data dir cannot be written ({reason}): refusing exports until it can")
        else:
            log.info("data dir writable again: accepting exports")

    def keep_by_reference(self, indexed: IndexedSession) -> bool:
        """The assembler's hook for a completed session of refs only with no flag key: the store indexes it.

        What only a built session shows (content capture off, the importer's diagnostics) is still said: the
        first kept session, then one in `probe_every` but at most one in `probe_interval` seconds, is also
        decoded and built, not rendered. (One in 1,000 alone was ~2% of serve's GIL at 10k sessions a second:
        each probe reads and parses its whole request back from the segment log.)"""
        if self.kept % self.probe_every == 0 and (now := time.monotonic()) - self._probed_at >= self.probe_interval:
            self._probed_at = now
            self._probe(indexed)
        self.kept += 1
        return bool(self.store.keep_indexed(indexed))

    def _probe(self, indexed: IndexedSession) -> None:
        try:
            session = build_session(attach_logs(self.assembler.decode_refs(indexed.refs)), key=indexed.key)
        except Exception:  # a probe must cost nothing but its log line
            log.exception("session %s: built to check its content, and failed", shown(indexed.key))
            return
        if session is not None:
            self.assembler.report(session)
            self._say_if_no_content(session)

    def by_reference_blocker(self) -> str | None:
        """Why unflagged sessions cannot be kept by reference into the segment log (None: they can).

        Kept by reference, a session is never decoded nor built: only its index line is written. That is
        right only when no stage needs more of an unflagged session: the store renders only flagged ones,
        the flag rules look only at keys the span index reports (`SpanRefs.marks`; a session with any is
        built and flagged as usual), and no other stage (the redactor, a plug-in) sees every session."""
        store = self.store
        if store is None or not callable(getattr(store, "keep_indexed", None)):
            return "no data-dir store"
        if getattr(store, "render_mode", "all") != "flagged":
            return "datadir.render is all"
        others = [t for t, (_, stage) in zip(self.session_types, self.session_stages, strict=True)
                  if t not in _BY_REFERENCE_STAGES and getattr(getattr(stage, "config", None), "enabled", True)]
        if others:
            return f"stage(s) {', '.join(others)} see every session"
        for _, stage in self.session_stages:
            rules = getattr(stage, "rules", None)
            if rules is None or not rules.enabled:
                continue
            for rule in rules.rules:
                r = rule.rule
                if r.kind != "attribute" or not set(r.keys) <= spanindex.MARK_KEYS:
                    return f"flag rule {r.name!r} looks at more than the span index reports"
        head = getattr(self, "head", None)
        if not callable(getattr(head, "keep_traces", None)) or spanindex.implementation() == "off":
            return "no span index in front of the pipeline"
        return None

    def start_stages(self) -> None:
        """Start the session stages that run threads of their own (auto-replay's worker)."""
        for _, stage in self.session_stages:
            start = getattr(stage, "start", None)
            if callable(start):
                start()

    def flush(self, now: float | None = None) -> int:
        """Write every open session now (force_flush), render workers included."""
        n = self.assembler.flush(time.time() if now is None else now)
        self.drain_stages()
        return n

    def close_stages(self) -> None:
        """Close the session stages in reverse order (the replay worker before the data dir it reads)."""
        for name, stage in reversed(self.session_stages):
            try:
                stage.close()
            except Exception:  # one stage failing to close must not keep the others open
                log.exception("stage %s: close failed", name)

    def stop(self, timeout: float | None = None) -> None:
        """Drain the queue (the assembler then writes every open session), then close the session stages."""
        if self.queue is not None:
            self.queue.stop(timeout)
        else:
            self.head.close()
        self.drain_stages()
        self.close_stages()

    def drain_stages(self, timeout: float | None = None) -> None:
        """Let stages that finish sessions later (render workers) finish them, in order, before any stage closes;
        `timeout`: seconds each may take (None: the stage's own bound)."""
        for name, stage in self.session_stages:
            drain = getattr(stage, "drain", None)
            if callable(drain):
                try:
                    drain() if timeout is None else drain(timeout)
                except Exception:
                    log.exception("stage %s: drain failed", name)


def build_pipeline(config: ServeConfig, metrics: Metrics | None = None, *, emit: Callable[[str], None] = print,
                   warn: Callable[[str], None] | None = None, quiet: bool = False,
                   on_written: Sequence[Callable[[Any], None]] = ()) -> SessionPipeline:
    """Every stage of `config.pipeline.stages`, built from its config section and wired back to front.

    Raises `ServeStartError`: exit code 2 for settings that cannot work (an unknown stage, a bad
    section, a stage factory's ValueError), 1 otherwise (a locked data dir, a port, a disk).
    Stages built before a failure are closed again.
    """
    try:
        plan = stage_plan(config)
    except StageConfigError as exc:
        raise ServeStartError(str(exc), exit_code=2) from exc
    ctx = StageContext(serve_config=config, metrics=metrics or Metrics(), emit=emit, warn=warn or log.warning,
                       quiet=quiet, on_written=list(on_written))
    at = next(i for i, p in enumerate(plan) if p.type.kind == "assembler")
    built = SessionPipeline(head=None, stages={}, context=ctx, assembler=None)
    for planned in plan[at + 1:]:  # session stages first: the store they create is what the assembler asks
        stage = _create(planned, ctx, None, built, "session stage")
        if stage is not None:
            built.session_stages.append((planned.name, stage))
            built.session_types.append(planned.type.type_name)
    assembler = head = _create(plan[at], ctx, built.emit_session, built, "records stage")
    record_stages = []
    for planned in reversed(plan[:at]):
        head = _create(planned, ctx, head, built, "records stage")
        record_stages.append((planned.name, head))
    built.head, built.assembler = head, assembler
    by_name = dict(reversed(record_stages))
    by_name[plan[at].name] = assembler
    by_name.update(built.session_stages)
    built.stages = {p.name: by_name[p.name] for p in plan if p.name in by_name}
    return built


def _create(planned: PlannedStage, ctx: StageContext, next: Any, built: SessionPipeline, check_as: str) -> Any:
    """One stage from its factory, checked against its interface; on failure the stages built so far close."""
    label = planned.type.config_key
    try:
        stage = planned.type.create(planned.config, ctx, next)
        if stage is None and check_as == "session stage":
            return None  # its config turned it off
        return check_plugin(stage, check_as, planned.name)
    except (PluginError, ValueError) as exc:  # settings or a plug-in that cannot work (a runtime spec, ...): exit 2
        built.close_stages()
        raise ServeStartError(f"{label}: {exc}", exit_code=2) from exc
    except (OSError, RuntimeError) as exc:
        built.close_stages()
        raise ServeStartError(f"{label}: {exc}") from exc
    except BaseException:
        built.close_stages()
        raise


class ServeStartError(RuntimeError):
    """serve cannot start; `exit_code` is 2 for bad settings, 1 for everything else (port in use, locked dir)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Server:
    """The running pipeline. `start()` raises `ServeStartError`; `stop()` is safe to call once started."""

    def __init__(self, config: ServeConfig, metrics: Metrics | None = None, *, quiet: bool = False,
                 emit: Callable[[str], None] = print, warn: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.metrics = metrics or Metrics()
        self.quiet = quiet
        self.emit = emit
        self.warn = warn or log.warning
        self.stages: SessionPipeline | None = None
        self.pipeline: Pipeline | None = None
        self.receivers: Any = None
        self.recovery: list[str] = []  # what the data dir and the queue repaired at start, for the log
        self.segments: Any = None  # wt_otel.serve.segments.SegmentLog when durability.enabled (and a data dir)
        self.feed: Any = None  # wt_otel.serve.feed.ReceiverProcess when the receivers run in a process of their own
        self._no_content_services: set[str] = set()

    @property
    def store(self) -> Any:
        """The data-dir store (exporters/datadir.DataDirStore), once started."""
        return self.stages.store if self.stages else None

    @property
    def replay(self) -> Any:
        """processors/auto_replay.AutoReplay when replay.enabled, once started; else None."""
        return self.stages.stages.get("auto-replay") if self.stages else None

    @property
    def admission(self) -> AdmissionControl | None:
        """What the queue admits (byte budget, fair shares, store health), once started."""
        return self.stages.admission if self.stages else None

    @property
    def grpc_port(self) -> int | None:
        return self.receivers.grpc_port if self.receivers else None

    @property
    def http_port(self) -> int | None:
        return self.receivers.http_port if self.receivers else None

    @property
    def http_url(self) -> str | None:
        """The OTLP/HTTP base URL (`/v1/traces` goes after it), once started."""
        if self.http_port is None:
            return None
        scheme = "https" if self.config.receivers.tls_cert else "http"
        host = (self.config.receivers.http_endpoint or "").rpartition(":")[0]  # set: http_port is
        return f"{scheme}://{host}:{self.http_port}"

    def start(self) -> Server:
        """Start every part. If a step fails, what had started is stopped and closed before the error goes on: the
        receiver process would otherwise outlive it in a process that goes on (serve as a library), holding the
        data dir, so no later `Server` on it could start."""
        try:
            self._start()
        except BaseException:
            self._abort_start()
            raise
        return self

    def _start(self) -> None:
        config = self.config
        self.stages = build_pipeline(config, self.metrics, emit=self.emit, warn=self.warn, quiet=self.quiet)
        self.recovery += self.stages.recovery
        shortest = min(config.assembler.idle_timeout, config.assembler.grace or config.assembler.idle_timeout)
        self.pipeline = self.stages.start_queue(max_queued_records=config.queue.max_queued_records,
                                                tick_interval=min(0.5, max(0.02, shortest / 4)))
        from wt_otel.serve.receivers import start_receivers

        durable = config.durability.enabled and self.store is not None
        try:
            if config.processes.receiver_processes(durable):
                self._start_receiver_process()
            else:
                if durable:
                    self._start_segments()
                self.receivers = start_receivers(config.receivers, self.pipeline, self.metrics)
        except (OSError, RuntimeError, ValueError) as exc:
            raise ServeStartError(f"cannot start the receivers: {exc}") from exc
        if self.replay is not None:
            ports = {p for p in (self.grpc_port, self.http_port) if p}
            if note := self.replay.drop_exporter_if_self(ports):
                self.warn(note)
        self.stages.start_stages()

    def _abort_start(self) -> None:
        """Undo a start that failed midway: `stop()` what had started (a replay in flight is not waited for), then
        forget it, so the failed start's error is what the caller sees and a `stop()` after it does nothing."""
        try:
            if self.replay is not None:
                self.replay.stop(0)
            self.stop(grace=0)
        except Exception:  # the start's own error matters more: say this one, raise that one
            log.exception("cleaning up after a failed start")
        self.stages = self.pipeline = self.receivers = self.feed = self.segments = None

    @property
    def failed(self) -> str | None:
        """Why serve cannot go on (its receiver process exited on its own), or None."""
        return self.feed.failed if self.feed is not None else None

    def stop(self, grace: float = 5) -> None:
        """Receivers, then the queue and assembler (writes open sessions), then the stages in reverse order.

        With the segment log, open sessions are written until `durability.shutdown_deadline`; the rest stay
        in the log past the last checkpoint, and the next start completes them."""
        if self.receivers is not None:
            self.receivers.stop(grace=grace)
        if self.stages is None:
            return
        if self.feed is not None and self.stages.queue is not None:
            deadline = time.monotonic() + self.config.durability.shutdown_deadline
            self.stages.assembler.close_deadline = self.stages.queue.drain_deadline = deadline
            self.stages.queue.stop()
            self.stages.drain_stages(max(0.0, deadline - time.monotonic()))
            self.feed.close(self._needed_position())
            self.stages.close_stages()
            return
        if self.segments is None or self.stages.queue is None:
            self.stages.stop()
            return
        deadline = time.monotonic() + self.config.durability.shutdown_deadline
        self.stages.assembler.close_deadline = self.stages.queue.drain_deadline = deadline
        self.stages.queue.stop()
        self.stages.drain_stages(max(0.0, deadline - time.monotonic()))
        needed = self._needed_position()  # sessions still with the render workers included
        self.stages.close_stages()
        self.segments.close(needed)

    # ------------------------------------------------------------------ the segment log

    def _start_segments(self) -> None:
        """Open the log (repairing torn tails), replay what is past the checkpoint into the queue, then let the
        receivers append: before they open, so replayed records come first."""
        from wt_otel.serve.segments import SegmentLog, SpanReader

        dur, assert_queue = self.config.durability, self.pipeline
        assert assert_queue is not None and self.stages is not None
        segments = self.segments = SegmentLog(
            self.config.data_dir, commit_interval=dur.commit_interval, segment_bytes=dur.segment_bytes,
            segment_max_age=dur.segment_max_age, max_bytes=dur.max_bytes, metrics=self.metrics,
            stall_timeout=dur.fsync_stall_timeout)
        self.recovery += segments.recovery
        queue, assembler, store = assert_queue, self.stages.assembler, self.store
        queue.on_consumed = segments.release
        store.kept_by_log = True
        start = segments.checkpoint_position
        assembler.replay_below = store.replayed_below = segments.replay_end
        assembler.resumable = lambda key: store.replayable(key, start)
        queue.housekeeping.append(lambda: segments.checkpoint(self._needed_position()))
        queue.housekeeping.append(segments.probe)
        segments.on_health = self._segments_health
        segments.check_writable()  # a full disk at start: degraded from the outset, not once an export fails
        assembler.decode_refs = SpanReader(segments.dir)
        blocker = self.stages.by_reference_blocker()
        if blocker is None:
            assembler.keep_by_reference = self.stages.keep_by_reference
            segments.retain_age, segments.retain_bytes = dur.retain_age, dur.retain_bytes
            queue.by_reference = True
            log.info("unflagged sessions are kept by reference into the segment log (datadir.render: flagged)")
        elif store is not None and getattr(store, "render_mode", "all") == "flagged":
            log.info("unflagged sessions are kept as records, not by reference: %s", blocker)
        self._replay(segments, queue)
        queue.segments = segments  # from now on export() appends before it acknowledges

    def _start_receiver_process(self) -> None:
        """The receivers in a process of their own (`wt_otel.serve.receiver_process`): it opens the segment log,
        and this process, the session core, is fed from it (`wt_otel.serve.feed`), replayed entries first. Kept as
        `receivers` and `feed` from the outset, so that `stop()` ends it whichever step after it fails."""
        from wt_otel.serve.feed import ReceiverProcess
        from wt_otel.serve.receivers.common import screen_of
        from wt_otel.serve.segments import SEGMENTS, SpanReader

        queue, stages = self.pipeline, self.stages
        assert queue is not None and stages is not None
        assembler, store = stages.assembler, self.store
        feed = self.receivers = self.feed = ReceiverProcess(self.config, self.metrics)
        start, replay_end, repaired = feed.open()
        self.recovery += repaired
        store.kept_by_log = True
        assembler.replay_below = store.replayed_below = replay_end
        assembler.resumable = lambda key: store.replayable(key, start)
        assembler.decode_refs = SpanReader(self.config.data_dir / SEGMENTS)
        blocker = stages.by_reference_blocker()
        if blocker is None:
            assembler.keep_by_reference = stages.keep_by_reference
            queue.by_reference = True
            log.info("unflagged sessions are kept by reference into the segment log (datadir.render: flagged)")
        elif getattr(store, "render_mode", "all") == "flagged":
            log.info("unflagged sessions are kept as records, not by reference: %s", blocker)
        feed.start(queue, screen_of(queue) if blocker is None else None, blocker is None, self._needed_position,
                   self._core_state)
        stages.on_health_change = feed.report_now
        self.recovery += feed.recovery
        log.info("OTLP receivers run in process %s; the session core in this one (%s)", feed.pid, os.getpid())

    def _core_state(self) -> tuple[float, int, float, dict[str, str]]:
        """What the receiver process admits on: (the writer's backlog in seconds, bytes held, seconds per session,
        the degraded components)."""
        assembler, admission = self.stages.assembler if self.stages else None, self.admission
        lag = getattr(assembler, "write_backlog", None)
        held = getattr(assembler, "held_bytes", None)
        cost = getattr(assembler, "write_cost", None)
        return (lag() if callable(lag) else 0.0, held() if callable(held) else 0, cost(1) if callable(cost) else 0.0,
                admission.degraded if admission is not None else {})

    def _segments_health(self, reason: str | None) -> None:
        """The segment log cannot be written (refuse exports before decoding, /healthz degraded) or can again."""
        admission = self.stages.admission if self.stages is not None else None
        if admission is not None:
            admission.set_degraded("segment log", reason)
        if reason:
            log.warning("segment log cannot be written (%s): refusing exports until it can", reason)
        else:
            log.info("segment log writable again: accepting exports")

    def _replay(self, segments: Any, queue: Pipeline) -> None:
        from wt_otel.serve.feed import entry_records
        from wt_otel.serve.receivers.common import screen_of

        start = segments.checkpoint_position
        segments.pin(start)  # nothing replayed from is deleted while replaying
        requests = records = bad = 0
        screen = screen_of(queue) if queue.by_reference else None
        try:
            for signal, pos, data in segments.replay():
                kept = entry_records(signal, pos, data, screen, self.metrics)  # as the receiver process's feed does
                if kept is None:
                    bad += 1
                    log.warning("segment entry %d (%s) is not an OTLP request; skipped", pos, signal)
                    continue
                if not kept:
                    continue
                while queue.queued > queue.max_queued_records // 2:  # bounded memory: let the worker catch up
                    time.sleep(0.01)
                segments.pin(pos)
                queue.put(kept, pos)
                requests += 1
                records += count(kept)
        finally:
            segments.release(start)
        self.metrics.inc("wt_otel_segment_replayed_requests_total", requests)
        if requests or bad:
            note = f"replayed {requests} request(s), {records} record(s), from the segment log past its checkpoint"
            self.recovery.append(note + (f"; {bad} unreadable entr(ies) skipped" if bad else ""))

    def _needed_position(self) -> int:
        """The lowest segment position the assembler or the store (deferred writes) still needs; -1: none."""
        held = [p for p in (self.stages.assembler.needed_position() if self.stages else -1,
                            self.store.pinned_position() if self.store is not None else -1) if p >= 0]
        return min(held, default=-1)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
