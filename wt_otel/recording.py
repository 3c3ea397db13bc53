"""Record your agent's conversations as OTel GenAI telemetry `wt-otel import` reads: the helpers a team
instruments its own agent with, shipped in the package (not only in a checkout's `examples/`).

    from wt_otel.recording import configure, current_incident

    telemetry = configure(service_name="crm", otlp_file="agent.otlp.jsonl")   # or otlp_endpoints=[...]
    current_incident.set("INC-1")        # optional: this turn is an incident (its root span gets wt.incident)
    ...                                  # run your OpenAI Agents SDK agent as usual
    telemetry.shutdown()                 # flush, then uninstrument

Spans come from real instrumentations, not from this module: the OTel contrib
`opentelemetry-instrumentation-genai-openai-agents` turns the Agents SDK's
tracing callbacks into `invoke_workflow` (the turn's root) > `invoke_agent` >
`execute_tool` spans, and `opentelemetry-instrumentation-genai-openai` patches
the openai client for the `chat` spans (input/output messages, system
instructions and tool definitions as semconv attributes). Both are in the
`demo` extra (`pip install 'wt-otel[demo]'`). Every span of a turn carries
`gen_ai.conversation.id` = the run's `group_id`, which is how `wt-otel import`
groups a session's turns.

The Agents SDK's own trace processors (which upload to OpenAI when an API key is
set) are always replaced, telemetry on or off. `set_tracing_disabled()` is not
used: it would silence the OTel bridge as well.

Both instrumentations patch process-wide state: configure once per process and
`shutdown()` (which uninstruments) before configuring again. For another
framework, use its own instrumentation with `OtlpJsonLinesExporter` (the
Collector `file` exporter's format) or an OTLP exporter to `wt-otel serve`.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

# Latest GenAI conventions, content on span attributes (what the importer reads best). Set before the
# instrumentations are imported, which read them once; an explicit environment setting wins.
SEMCONV_ENV = {
    "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
}
INCIDENT_ATTR = "wt.incident"

# The incident id of the turn being run (the reference agent sets it for a Contract C `"wt_incident": "<id>"`).
# The Agents SDK starts the turn's root span synchronously inside the turn's task, which inherits this context.
current_incident: ContextVar[str | None] = ContextVar("wt_incident", default=None)


class IncidentTagger(SpanProcessor):
    """Marks the root span of a flagged turn with `wt.incident` (`current_incident`), as an app that knows a
    run went wrong would: `wt-otel import --flagged-only` and serve's flagger take it as an incident."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        incident = current_incident.get()
        if incident and span.parent is None:
            span.set_attribute(INCIDENT_ATTR, incident)


class OtlpJsonLinesExporter(SpanExporter):
    """Appends one OTLP/JSON `ExportTraceServiceRequest` per export, as the Collector `file` exporter does.

    Encoded by the SDK's own OTLP protobuf encoder, then made OTLP/JSON-conformant:
    trace/span ids as lowercase hex (protobuf's JSON mapping gives base64) and enums as integers.
    """

    _ID_KEYS = {"traceId", "spanId", "parentSpanId"}

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        line = json.dumps(self._hex_ids(request), separators=(",", ":"))
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    @classmethod
    def _hex_ids(cls, node: Any) -> Any:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in cls._ID_KEYS and isinstance(value, str):
                    node[key] = base64.b64decode(value).hex()
                else:
                    cls._hex_ids(value)
        elif isinstance(node, list):
            for value in node:
                cls._hex_ids(value)
        return node


class Telemetry:
    """The configured pipeline; `provider` is None when telemetry is off."""

    def __init__(self, provider: TracerProvider | None = None, instrumentors: Sequence[Any] = ()) -> None:
        self.provider = provider
        self._instrumentors = list(instrumentors)

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def shutdown(self) -> None:
        """Flush and close the exporters, then uninstrument (so a later `configure` starts clean)."""
        if self.provider is not None:
            self.provider.shutdown()
        for instrumentor in reversed(self._instrumentors):
            instrumentor.uninstrument()
        self.provider, self._instrumentors = None, []


def configure(*, service_name: str, otlp_file: str | None = None, otlp_endpoints: Sequence[str] = (),
              otlp_protocol: str = "http/protobuf") -> Telemetry:
    """Replace the Agents SDK's uploaders; with an OTLP file or endpoint, instrument and export.

    `otlp_file`: OTLP/JSON lines, as the Collector `file` exporter writes them (`wt-otel import` input);
    written synchronously, so a turn's spans are on disk when it returns. `otlp_endpoints`: traces URLs
    (".../v1/traces" for http/protobuf, "host:port" for grpc), e.g. `wt-otel serve`'s receiver.
    Neither: telemetry off (still no uploads)."""
    try:
        from agents.tracing import set_trace_processors
    except ImportError as exc:
        raise RuntimeError(f"wt_otel.recording instruments the OpenAI Agents SDK, which is not installed ({exc}); "
                           "pip install 'wt-otel[demo]'") from exc

    set_trace_processors([])  # first: the instrumentor restores exactly this on uninstrument
    endpoints = [e for e in otlp_endpoints if e]
    if not (endpoints or otlp_file):
        return Telemetry()
    for key, value in SEMCONV_ENV.items():
        os.environ.setdefault(key, value)
    try:
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
        from opentelemetry.instrumentation.genai.openai_agents import OpenAIAgentsInstrumentor
    except ImportError as exc:
        raise RuntimeError(
            f"telemetry is configured but an instrumentation is missing ({exc}); install "
            "opentelemetry-instrumentation-genai-openai==1.3b0 and "
            "opentelemetry-instrumentation-genai-openai-agents==1.3b0 (both in wt-otel's `demo` extra)"
        ) from exc
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(IncidentTagger())
    if otlp_file:  # synchronous: a turn's spans are on disk when its reply leaves
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonLinesExporter(otlp_file)))
    for endpoint in endpoints:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(endpoint, otlp_protocol)))
    openai_instrumentor, agents_instrumentor = OpenAIInstrumentor(), OpenAIAgentsInstrumentor()
    openai_instrumentor.instrument(tracer_provider=provider)
    agents_instrumentor.instrument(tracer_provider=provider, disable_openai_trace_export=True)
    return Telemetry(provider, [openai_instrumentor, agents_instrumentor])


def _otlp_exporter(endpoint: str, protocol: str) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=endpoint)


__all__ = ["INCIDENT_ATTR", "SEMCONV_ENV", "IncidentTagger", "OtlpJsonLinesExporter", "Telemetry", "configure",
           "current_incident"]
