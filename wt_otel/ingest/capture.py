"""Which setting turns message-content capture on, for the instrumentation a session came from.

Every official GenAI instrumentation records no message content by default,
so the most common first session is one with spans and no conversation.
Saying so, with the one setting to change in that service, saves the user
from replaying an empty incident and wondering why it expected "(no message)".
"""

from __future__ import annotations

from wt_otel.model.session import Session

__all__ = ["CAPTURE_SETTINGS", "capture_hint"]

# dialect (wt_otel.ingest.dialects NAME) -> the setting, in the producer's own words
CAPTURE_SETTINGS = {
    "semconv": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY (official OTel GenAI "
               "instrumentations; `true` before opentelemetry-util-genai 1.0), or TRACELOOP_TRACE_CONTENT=true "
               "(OpenLLMetry)",
    "events": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (GenAI event instrumentations)",
    "content_events": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true",
    "openllmetry": "TRACELOOP_TRACE_CONTENT=true (OpenLLMetry / Traceloop SDK)",
    "openinference": "unset OPENINFERENCE_HIDE_INPUTS, OPENINFERENCE_HIDE_OUTPUTS, OPENINFERENCE_HIDE_INPUT_MESSAGES "
                     "and OPENINFERENCE_HIDE_OUTPUT_MESSAGES (or TraceConfig(hide_inputs=False, ...))",
    "pydantic_ai": "InstrumentationSettings(include_content=True) in Agent.instrument_all(...)",
    "agents": "RunConfig(trace_include_sensitive_data=True) or OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA=true "
              "(OpenAI Agents SDK)",
}


def capture_hint(session: Session) -> str:
    """`service X records no message content: set …` for the dialects the session was read with."""
    # the import's diagnostics know the producer from its spans (wt_otel.ingest.diagnostics.content_setting);
    # the session's dialects are the fallback
    settings = [str(d["setting"]) for d in session.diagnostics if d.get("setting")]
    settings = settings or [CAPTURE_SETTINGS[d] for d in session.dialects if d in CAPTURE_SETTINGS]
    if not settings:
        settings = [CAPTURE_SETTINGS["semconv"]]
    service = session.service_name or "(unknown service)"
    return (f"service {service} records no message content (content capture is off by default in GenAI "
            f"instrumentations); to capture it set {'; or '.join(dict.fromkeys(settings))} in that service")
