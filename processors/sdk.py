"""`WtOtelSpanProcessor`: wt-otel inside an app, for teams without a collector.

    provider.add_span_processor(WtOtelSpanProcessor("wt-data"))

Each ended span is converted to a `SpanRecord` and handed to the same stages
`wt-otel serve` runs, built by the same `build_pipeline()` (GenAI filter ->
session assembler -> incident flagger -> redactor -> data-dir store, or the
config's `pipeline.stages`), so the data dir looks exactly like the server's.
No network. `on_end` only converts and enqueues (never blocks the
app, never writes files on its thread): a worker thread does the rest, as in
the server's pipeline; when the queue is full the span is dropped and counted
(`wt_otel_records_dropped_total{reason="queue_full"}`), like the SDK's own
BatchSpanProcessor. `force_flush` waits for the queue and writes every open
session (late spans then make revision 2); `shutdown` does the same and stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from wt_otel.exporters.datadir import Written
from wt_otel.model.spans import Event, Link, SpanRecord
from wt_otel.serve.config import ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import PipelineAdmission
from wt_otel.serve.server import build_pipeline


def _value(v: Any) -> Any:
    return [_value(x) for x in v] if isinstance(v, tuple | list) else v


def _attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: _value(v) for k, v in (attrs or {}).items()}


def span_to_record(span: ReadableSpan) -> SpanRecord:
    """A finished SDK span as wt-otel's record: ids as lowercase hex, arrays as lists."""
    ctx = span.context
    parent = span.parent
    scope = span.instrumentation_scope
    return SpanRecord(
        trace_id=format(ctx.trace_id, "032x"),
        span_id=format(ctx.span_id, "016x"),
        name=span.name,
        parent_span_id=format(parent.span_id, "016x") if parent is not None and parent.span_id else None,
        kind=span.kind.name,
        start_ns=span.start_time or 0,
        end_ns=span.end_time or 0,
        attributes=_attrs(span.attributes),
        events=[Event(name=e.name, time_ns=e.timestamp or 0, attributes=_attrs(e.attributes)) for e in span.events],
        links=[Link(trace_id=format(lk.context.trace_id, "032x"), span_id=format(lk.context.span_id, "016x"),
                    attributes=_attrs(lk.attributes)) for lk in span.links],
        status_code=span.status.status_code.name,
        status_message=span.status.description or "",
        resource=_attrs(span.resource.attributes if span.resource else None),
        scope_name=scope.name if scope else "",
        scope_version=(scope.version or "") if scope else "",
    )


class WtOtelSpanProcessor(SpanProcessor):
    """An OTel SDK SpanProcessor that writes agent sessions to a local data dir.

    The stages are `build_pipeline()`'s, from the same `ServeConfig` serve reads (its
    `pipeline.stages` too); only the receivers are missing, since spans arrive through `on_end`.
    """

    def __init__(self, data_dir: Path | str = "wt-data", *, config: ServeConfig | None = None,
                 idle_timeout: float | None = None, grace: float | None = None, metrics: Metrics | None = None,
                 on_written: Callable[[Written], None] | None = None, tick_interval: float = 0.5) -> None:
        # in-process rendering (datadir.workers: 0): worker processes inside a user's app would surprise it;
        # every session rendered (render: all): in an app, with no segment log, the volume is one user's
        config = config or ServeConfig(data_dir=Path(data_dir), datadir={"workers": 0, "render": "all"})
        updates = {k: v for k, v in (("idle_timeout", idle_timeout), ("grace", grace)) if v is not None}
        if updates:
            config = config.model_copy(update={"assembler": config.assembler.model_copy(update=updates)})
        self.config = config
        self.metrics = metrics or Metrics()
        self.on_written = on_written
        self.stages = build_pipeline(config, self.metrics, quiet=True, on_written=[self._written])
        self.store = self.stages.store
        self.assembler = self.stages.assembler
        self.pipeline = self.stages.start_queue(max_queued_records=config.queue.max_queued_records,
                                                tick_interval=tick_interval)
        self.stages.start_stages()
        self._shut = False

    def _written(self, written: Written) -> None:
        if self.on_written:
            self.on_written(written)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        admission = self.pipeline.offer([span_to_record(span)])
        if admission is not PipelineAdmission.ACCEPTED:
            self.metrics.inc("wt_otel_records_dropped_total", reason=f"queue_{admission.value}")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Wait until every ended span is processed, then write all open sessions."""
        deadline = time.monotonic() + timeout_millis / 1000
        while self.pipeline.queued and time.monotonic() < deadline:
            time.sleep(0.005)
        self.stages.flush(time.time())
        return not self.pipeline.queued

    def shutdown(self) -> None:
        if self._shut:
            return
        self._shut = True
        self.stages.stop()  # drains the queue, the assembler writes every open session, then the stages close
