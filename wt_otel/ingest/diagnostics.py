"""What the importer did not understand, said per session (and why an import found nothing).

Each finding is a `Diagnostic` with a `kind` (a stable name, counted by serve's
`wt_otel_session_warnings_total{kind}`), a message that names the span and the
attribute, and, for content capture off, the producer setting that turns it on.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from wt_otel.model.spans import SpanRecord

KINDS = ("no_user_turn", "serialized_turn", "unread_attributes", "content_off", "tool_call_without_result",
         "unknown_shape")

# Where conversation content usually sits, in any convention: a span carrying one of these that no
# dialect read is reported by name.
_CONVERSATION_KEY = re.compile(
    r"(^|\.)(input\.messages|output\.messages|input_messages|output_messages|messages|prompt|prompts|"
    r"completion|completions|choices|system_instructions|input\.value|output\.value|response\.text|"
    r"response\.toolCalls|prompt\.messages|content)(\.|$)")
_GENAI_PREFIXES = ("gen_ai.", "llm.", "ai.", "openinference.", "traceloop.", "lc.", "langchain.", "crewai.",
                   "litellm.", "strands.", "mlflow.", "logfire.", "pydantic_ai.", "input.value", "output.value")


@dataclass(slots=True)
class Diagnostic:
    kind: str
    message: str
    span_id: str | None = None
    attribute: str | None = None
    setting: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def looks_genai(span: SpanRecord) -> bool:
    return any(k.startswith(_GENAI_PREFIXES) for k in span.attributes) or any(
        e.name.startswith("gen_ai.") for e in span.events)


def conversation_attributes(span: SpanRecord) -> list[str]:
    """Attribute names on a GenAI-looking span that look like conversation content."""
    if not looks_genai(span):
        return []
    out = []
    for k, v in span.attributes.items():
        if v in (None, "", [], {}) or not _CONVERSATION_KEY.search(k):
            continue
        if k.startswith(("gen_ai.", "llm.", "ai.", "input.", "output.")) or "message" in k or "prompt" in k:
            out.append(k)
    return sorted(out)


def content_setting(span: SpanRecord) -> str:
    """The setting that turns message content capture on, for the producer that made `span`."""
    a = span.attributes
    scope = (span.scope_name or "").lower()
    if "openinference" in scope or "openinference.span.kind" in a:
        return ("OpenInference: unset OPENINFERENCE_HIDE_INPUTS / OPENINFERENCE_HIDE_OUTPUTS / "
                "OPENINFERENCE_HIDE_INPUT_MESSAGES / OPENINFERENCE_HIDE_OUTPUT_MESSAGES (TraceConfig)")
    if scope.startswith("anthropic") or scope == "anthropic":
        return "Anthropic SDK spans: ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE=content"
    if any(k.startswith("traceloop.") for k in a) or "llm.request.type" in a or "traceloop" in scope:
        return "OpenLLMetry: TRACELOOP_TRACE_CONTENT=true (Traceloop.init(trace_content=True))"
    if scope == "ai" or any(k.startswith("ai.") for k in a):
        return "Vercel AI SDK: experimental_telemetry { isEnabled: true, recordInputs: true, recordOutputs: true }"
    if "pydantic" in scope or "logfire" in scope:
        return "pydantic-ai: InstrumentationSettings(include_content=True)"
    if "strands" in scope:
        return ("Strands Agents: content is always recorded; set OTEL_SEMCONV_STABILITY_OPT_IN="
                "gen_ai_latest_experimental for the message attributes")
    if "openai_agents" in scope or "openai.agents" in scope:
        return ("OpenAI Agents SDK: RunConfig(trace_include_sensitive_data=True) and "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true")
    return ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (SPAN_ONLY / SPAN_AND_EVENT with "
            "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental)")
