"""Results as OTel spans: one sweep, through the OpenTelemetry SDK, to any OTLP backend.

Registered as the `result-spans` exporter (entry point group `wt_otel.exporters`):

    exporter = load("exporters", "result-spans")("http://127.0.0.1:6006", "http/protobuf", ["k=v"])
    exporter = ResultSpansExporter.from_settings(resolve_otlp(...))   # flags/config, then OTEL_EXPORTER_OTLP_*
    report = exporter.export_sweep(sweep)        # the runner's SweepRun (record + traces + scenario dirs)
    report = exporter.export(record, evidence)   # or a results record with its evidence, e.g. from serve

The span tree and every attribute are built in `exporters.span_plan`; this
module only turns that plan into SDK spans and ships them. Why it is built
this way:

- its own `TracerProvider`, never the global one: wt-otel may run inside an
  instrumented process (the pytest plugin, `serve`), whose provider has its
  own exporters and sampler. Results must neither leak into the user's
  telemetry nor be sampled away, hence also an explicit ALWAYS_ON sampler.
- explicit start and end times from the traces, so the UI shows when the
  replay happened, not when it was exported;
- export never blocks or fails a sweep: the ledger, JUnit and JSON are the
  record, spans are a view of it. Construction validates the settings (a typo
  in `--otlp-endpoint` is a usage error before anything runs), but `export`
  never raises, waits at most `timeout_s` (plus a short grace) however many
  batches there are, stops trying after the first failed batch, and reports
  an unreachable endpoint as one warning instead of the SDK's retry chatter.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, Tracer, set_span_in_context

from wt_otel import __version__
from wt_otel._util.otlp_env import OtlpSettings
from wt_otel.contracts.results import SweepResult
from wt_otel.exporters.span_plan import IncidentLink, PlannedSpan, ScenarioEvidence, incident_link, plan_sweep

if TYPE_CHECKING:
    from wt_otel.replay.runner import SweepRun

__all__ = ["DEFAULT_TIMEOUT_S", "PROTOCOLS", "ExportReport", "OtlpTarget", "ResultSpansExporter", "ScenarioEvidence",
           "evidence_of", "parse_headers", "read_incident"]

log = logging.getLogger("wt_otel.exporters.result_spans")

PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_TIMEOUT_S = 5.0
GRACE_S = 1.0  # on top of the exporter's own timeout, for the SDK's shutdown bookkeeping
HTTP_TRACES_PATH = "/v1/traces"
SCOPE = "wt_otel.exporters.result_spans"
_RETRYING = re.compile(r",? *retrying in [0-9.]+ ?s\.?")
ENVELOPE_FILE = "incident.wtin.json"
# The SDK loggers that narrate a failing export (one line per retry); captured while we export.
SDK_LOGGERS = ("opentelemetry.exporter.otlp.proto.grpc.exporter", "opentelemetry.exporter.otlp.proto.http",
               "opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.exporter.otlp.common.http",
               "opentelemetry.sdk._shared_internal", "opentelemetry.sdk.trace.export", "opentelemetry.sdk.trace")


# ---------------------------------------------------------------- settings


def parse_headers(headers: Mapping[str, str] | Iterable[str] | None) -> dict[str, str]:
    """`K=V` strings (as `--otlp-header` takes them) or a mapping, to a dict. Keys are lowercased:
    gRPC rejects upper-case metadata keys, and HTTP header names are case-insensitive anyway."""
    if headers is None:
        return {}
    if isinstance(headers, Mapping):
        return {str(k).strip().lower(): str(v) for k, v in headers.items()}
    out: dict[str, str] = {}
    for item in headers:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"OTLP header {item!r} must be KEY=VALUE (e.g. --otlp-header authorization='Bearer T')")
        out[key.strip().lower()] = value.strip()
    return out


@dataclass(frozen=True)
class OtlpTarget:
    """Where the spans go. `endpoint` is a base URL as in OTEL_EXPORTER_OTLP_ENDPOINT: for http/protobuf
    `/v1/traces` is appended unless already there; for grpc a bare HOST:PORT means plaintext (http://)."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: Mapping[str, str] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    signal_path: bool = True  # False: an http endpoint is a full URL (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"OTLP protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)} "
                             "(OTLP/JSON is not supported: Phoenix, for one, refuses it)")
        if not self.endpoint or not self.endpoint.strip():
            raise ValueError("the OTLP endpoint is empty (e.g. http://127.0.0.1:4318 or, for grpc, 127.0.0.1:4317)")
        if "://" in self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"OTLP endpoint {self.endpoint!r} must be an http:// or https:// URL")
        if self.protocol == "http/protobuf" and "://" not in self.endpoint:
            raise ValueError(f"OTLP endpoint {self.endpoint!r} needs a scheme for http/protobuf "
                             f"(e.g. http://{self.endpoint})")
        if self.timeout_s <= 0:
            raise ValueError(f"OTLP timeout must be positive, not {self.timeout_s}")

    @property
    def url(self) -> str:
        """The address the exporter actually uses."""
        endpoint = self.endpoint.strip()
        if self.protocol == "grpc":
            return endpoint if "://" in endpoint else f"http://{endpoint}"
        if not self.signal_path:
            return endpoint
        base = endpoint.rstrip("/")
        return base if base.endswith(HTTP_TRACES_PATH) else base + HTTP_TRACES_PATH

    def span_exporter(self) -> SpanExporter:
        """The SDK's OTLP exporter for this target (imported here: only an export needs the packages)."""
        headers = dict(self.headers or {})
        if self.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            url = self.url
            return GrpcExporter(endpoint=url, insecure=url.startswith("http://"), headers=headers,
                                timeout=self.timeout_s)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter(endpoint=self.url, headers=headers, timeout=self.timeout_s)


@dataclass
class ExportReport:
    """What one export did; `error` is None only when every span was accepted."""

    endpoint: str
    protocol: str
    spans: int = 0
    sent: int = 0
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        if self.ok:
            return f"{self.sent} result span(s) sent to {self.endpoint} ({self.protocol})"
        return (f"result spans were not exported to {self.endpoint} ({self.protocol}): {self.error}; "
                "the sweep's results are unaffected")


# ---------------------------------------------------------------- evidence


def read_incident(scenario_dir: Path | None) -> IncidentLink | None:
    """The incident link of a scenario directory: its envelope (scenario.yaml `fixtures.envelope`, else
    incident.wtin.json) provenance. None, quietly, when there is none: authored scenarios have no incident."""
    if scenario_dir is None:
        return None
    name = ENVELOPE_FILE
    with contextlib.suppress(OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, TypeError):
        declared = (yaml.safe_load((scenario_dir / "scenario.yaml").read_text(encoding="utf-8")) or {})
        name = declared.get("fixtures", {}).get("envelope") or ENVELOPE_FILE
    try:
        envelope = json.loads((scenario_dir / name).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return incident_link(envelope) if isinstance(envelope, dict) else None


def evidence_of(sweep: SweepRun) -> list[ScenarioEvidence]:
    """The runner's sweep as evidence, in sweep order (its `record` lists the scenarios in the same order)."""
    return [ScenarioEvidence(list(s.traces), read_incident(s.path)) for s in sweep.scenarios]


# ---------------------------------------------------------------- the SDK side


class _Guard(SpanExporter):
    """Wraps the OTLP exporter: counts what was accepted and, after one failed batch, fails the rest at once,
    so a dead endpoint costs one timeout, not one per batch."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.sent = 0
        self.failed = False
        self.error: str | None = None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.failed:
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must not reach the sweep
            self.error = f"the OTLP exporter raised {type(exc).__name__}: {exc}"
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.sent += len(spans)
        else:
            self.failed = True
        return result

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        with contextlib.suppress(Exception):
            if "timeout_millis" in inspect.signature(self.inner.shutdown).parameters:
                self.inner.shutdown(timeout_millis=timeout_millis)  # type: ignore[call-arg]
            else:
                self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class _Capture(logging.Filter):
    """Swallows the SDK's per-retry log lines and keeps the first warning or error as the reason to report
    (the first symptom names the cause, e.g. "Connection refused"; the last is often a generic "gave up"),
    minus the "retrying in N s" that no longer applies."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        with contextlib.suppress(Exception):
            message = record.getMessage()
            log.debug("otel sdk: %s", message)
            if self.reason is None and record.levelno >= logging.WARNING:
                self.reason = _RETRYING.sub(".", message).strip().rstrip(".")
        return False


@contextlib.contextmanager
def _captured_sdk_logs() -> Iterator[_Capture]:
    capture = _Capture()
    loggers = [logging.getLogger(name) for name in SDK_LOGGERS]
    for logger in loggers:  # first in line: the SDK's own DuplicateFilter would hide a repeat export's reason
        logger.filters.insert(0, capture)
    try:
        yield capture
    finally:
        for logger in loggers:
            logger.removeFilter(capture)


def _link(target: IncidentLink) -> Link:
    context = SpanContext(trace_id=int(target.trace_id, 16), span_id=int(target.span_id, 16), is_remote=True,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    attrs = {"wt.link.type": "incident"}
    if target.origin_ref:
        attrs["wt.origin.ref"] = target.origin_ref
    return Link(context, attrs)


def _emit(tracer: Tracer, planned: PlannedSpan, parent: Context) -> None:
    """Start the span at its recorded time, emit its children under it, end it at its recorded time."""
    span = tracer.start_span(planned.name, context=parent, kind=SpanKind.CLIENT if planned.kind == "client"
                             else SpanKind.INTERNAL, attributes=planned.attributes,
                             links=[_link(t) for t in planned.links], start_time=planned.start_ns)
    inner = set_span_in_context(span, parent)
    for child in planned.children:
        _emit(tracer, child, inner)
    if planned.status == "ERROR":
        span.set_status(Status(StatusCode.ERROR, planned.status_detail))
    elif planned.status == "OK":
        span.set_status(Status(StatusCode.OK))
    span.end(end_time=planned.end_ns)


def _shutdown_within(provider: TracerProvider, seconds: float) -> bool:
    """Flush and shut the provider down on a daemon thread; False when it is not done within `seconds`
    (the thread is abandoned: a stuck exporter must not hold the sweep, nor the interpreter's exit)."""
    done = threading.Event()

    def shutdown() -> None:
        try:
            provider.shutdown()
        except Exception as exc:  # the SDK catches its own; this is the last line
            log.debug("result spans: provider shutdown raised %r", exc)
        finally:
            done.set()

    threading.Thread(target=shutdown, name="wt-otel-result-spans", daemon=True).start()
    return done.wait(seconds)


def resource() -> Resource:
    """service.name=wt-otel and its version; OTEL_RESOURCE_ATTRIBUTES may add to it, never override these."""
    return Resource.create({SERVICE_NAME: "wt-otel", SERVICE_VERSION: __version__})


# ---------------------------------------------------------------- the exporter


class ResultSpansExporter:
    """Exports sweeps as spans to one OTLP endpoint. Raises ValueError on bad settings; `export` never raises."""

    def __init__(self, endpoint: str, protocol: str = "http/protobuf",
                 headers: Mapping[str, str] | Iterable[str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 *, agent_name: str | None = None, warn: Callable[[str], None] | None = None,
                 signal_path: bool = True) -> None:
        self.target = OtlpTarget(endpoint, protocol, parse_headers(headers), timeout_s, signal_path)
        self.agent_name = agent_name
        self.warn = warn or log.warning

    @classmethod
    def from_settings(cls, settings: OtlpSettings, *, agent_name: str | None = None,
                      warn: Callable[[str], None] | None = None) -> ResultSpansExporter:
        """From `wt_otel._util.otlp_env.resolve_otlp`'s answer (flags and config, then the OTel env vars).
        A bad value is a ValueError that names where it came from (the flag, or the environment variable)."""
        try:
            return cls(settings.endpoint, settings.protocol, settings.headers,
                       settings.timeout_s or DEFAULT_TIMEOUT_S, agent_name=agent_name, warn=warn,
                       signal_path=settings.signal_path)
        except ValueError as exc:
            if settings.source.startswith("OTEL_"):
                raise ValueError(f"{settings.source}={settings.endpoint}: {exc}") from None
            raise

    def export_sweep(self, sweep: SweepRun) -> ExportReport:
        """The runner's sweep: its results record plus the traces and scenario directories behind it."""
        record = getattr(sweep, "record", None)
        if not isinstance(record, SweepResult):
            return self._done(ExportReport(self.target.url, self.target.protocol,
                                           error="the sweep has no results record to export"), time.monotonic())
        try:
            evidence = evidence_of(sweep)
        except Exception as exc:  # a half-built sweep still exports what the record says
            log.debug("result spans: no evidence from the sweep: %r", exc)
            evidence = []
        return self.export(record, evidence)

    def export(self, record: SweepResult, evidence: Sequence[ScenarioEvidence] = ()) -> ExportReport:
        """Emit the sweep's span tree and wait (bounded) until it is sent; one warning when it is not."""
        t0 = time.monotonic()
        report = ExportReport(self.target.url, self.target.protocol)
        try:
            tree = plan_sweep(record, evidence, self.agent_name)
            report.spans = tree.count()
            guard = _Guard(self.target.span_exporter())
            provider = TracerProvider(resource=resource(), sampler=ALWAYS_ON, shutdown_on_exit=False)
            provider.add_span_processor(BatchSpanProcessor(guard, max_queue_size=max(2048, report.spans + 1),
                                                           export_timeout_millis=self.target.timeout_s * 1000))
            with _captured_sdk_logs() as capture:
                _emit(provider.get_tracer(SCOPE, __version__), tree, Context())
                finished = _shutdown_within(provider, self.target.timeout_s + GRACE_S)
            report.sent = guard.sent
            if not finished:
                report.error = f"the export did not finish within {self.target.timeout_s + GRACE_S:g} s (abandoned)"
            elif guard.sent < report.spans:
                report.error = (guard.error or capture.reason
                                or f"{report.spans - guard.sent} of {report.spans} span(s) were not accepted")
        except Exception as exc:  # export never fails a sweep
            report.error = f"{type(exc).__name__}: {exc}"
        return self._done(report, t0)

    def _done(self, report: ExportReport, t0: float) -> ExportReport:
        report.seconds = round(time.monotonic() - t0, 3)
        if report.error is not None:
            with contextlib.suppress(Exception):
                self.warn(report.describe())
        return report
