"""`wt-otel serve`'s parts, wired from a `ServeConfig`: one object to start and stop.

    receivers -> pipeline -> GenAI filter -> assembler -> flagger -> redactor -> data dir [-> auto-replay]

The command line is a thin shell over this (parse flags, print, map failures to
exit codes); the demo, the benchmark and the tests run the very same wiring
in-process. Components are found by type name (`wt_otel.components`), so the
core still imports no processor or exporter.

Stop order matters and is the point of having it in one place: receivers stop
taking data, the pipeline drains what was acknowledged and writes every open
session (which may queue more incidents), the replay worker finishes or
abandons its replay within a bounded wait, and only then is the data dir closed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from wt_otel.components import load as load_component
from wt_otel.ingest.capture import capture_hint
from wt_otel.model.session import Session
from wt_otel.serve.config import ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline

log = logging.getLogger("wt_otel.serve.server")

__all__ = ["ServeStartError", "Server"]


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
        self.store: Any = None
        self.replay: Any = None  # processors/auto_replay.AutoReplay when replay.enabled
        self.pipeline: Pipeline | None = None
        self.receivers: Any = None
        self.recovery: list[str] = []  # what the data dir and the queue repaired at start, for the log
        self._no_content_services: set[str] = set()

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
        return f"{scheme}://{self.config.receivers.http_endpoint.rpartition(':')[0]}:{self.http_port}"

    def start(self) -> Server:
        config = self.config
        try:
            self.store = load_component("exporters", "datadir")(config.data_dir, self.metrics)
        except (OSError, RuntimeError) as exc:
            raise ServeStartError(str(exc)) from exc
        self.recovery += list(self.store.recovery)
        if config.replay.enabled:
            try:
                self.replay = load_component("processors", "auto-replay").from_config(
                    config, self.metrics, emit=self.emit, warn=self.warn)
            except ValueError as exc:  # a runtime spec or OTLP endpoint that cannot work: a settings error
                self.store.close()
                raise ServeStartError(f"replay: {exc}", exit_code=2) from exc
            except OSError as exc:
                self.store.close()
                raise ServeStartError(f"replay: {exc}") from exc
            self.recovery += [f"replay queue: {note}" for note in self.replay.queue.recovery]
        stages = [load_component("processors", "flagger")(config.flagger, self.metrics),
                  load_component("processors", "redactor")(config.redactor)]

        def write(session: Session, spans: Any) -> None:
            for stage in stages:
                stage.process(session, spans)
            store(session)
            for ref in session.flag_refs:  # another incident flagged in the same conversation: its own session
                if ref != session.flag_ref:
                    store(dataclasses.replace(session, key=f"{session.key}+{ref}", flag_ref=ref,
                                              flag_reason=f"{session.flag_reason} (a later incident, {ref}, "
                                                          f"in the conversation of {session.flag_ref})",
                                              flag_refs=[ref]))

        def store(session: Session) -> None:
            written = self.store.write(session)
            if not session.content_captured and session.llm_calls:
                service = session.service_name or "(unknown service)"
                self.metrics.inc("wt_otel_sessions_without_content_total", service=service)
                if service not in self._no_content_services:  # once per service, not once per session
                    self._no_content_services.add(service)
                    self.warn(capture_hint(session))
            if not self.quiet:
                state = "complete" if session.complete else "INCOMPLETE"
                flag = f", flagged {session.flag_ref}" if session.flagged else ""
                self.emit(f"wrote {written.path} (revision {written.revision}, {state}{flag})")
            if self.replay is not None:
                self.replay.on_written(session, written)

        assembler = load_component("processors", "assembler").from_config(write, config.assembler, self.metrics,
                                                                            is_written=self.store.has_key)
        consumer = load_component("processors", "genai-filter").from_config(assembler, config.filter, self.metrics)
        shortest = min(config.assembler.idle_timeout, config.assembler.grace or config.assembler.idle_timeout)
        self.pipeline = Pipeline(consumer, self.metrics, max_queued_records=config.queue.max_queued_records,
                                 tick_interval=min(0.5, max(0.02, shortest / 4))).start()
        from wt_otel.serve.receivers import start_receivers

        try:
            self.receivers = start_receivers(config.receivers, self.pipeline, self.metrics)
        except (OSError, RuntimeError, ValueError) as exc:
            self.pipeline.stop()
            if self.replay is not None:
                self.replay.stop(0)
            self.store.close()
            raise ServeStartError(f"cannot start the receivers: {exc}") from exc
        if self.replay is not None:
            ports = {p for p in (self.grpc_port, self.http_port) if p}
            if note := self.replay.drop_exporter_if_self(ports):
                self.warn(note)
            self.replay.start()
        return self

    def stop(self, grace: float = 5) -> None:
        """Receivers, then the pipeline (writes open sessions), then the replay worker, then the data dir."""
        if self.receivers is not None:
            self.receivers.stop(grace=grace)
        if self.pipeline is not None:
            self.pipeline.stop()
        if self.replay is not None:
            self.replay.stop()
        if self.store is not None:
            self.store.close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
