"""What the importer did not understand, said per session (and why an import found nothing).

Each finding is a `Diagnostic` with a `kind` (a stable name, counted by serve's
`wt_otel_session_warnings_total{kind}`), a message that names the span and the
attribute, and, for content capture off, the producer setting that turns it on.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from wt_otel.ingest import dialects
from wt_otel.ingest.messages import looks_serialized
from wt_otel.ingest.otlp import ESCAPED_TEXT
from wt_otel.model.session import LLMCall, Session
from wt_otel.model.spans import SpanRecord

KINDS = ("no_user_turn", "serialized_turn", "unread_attributes", "content_off", "tool_call_without_result",
         "unknown_shape", "text_escaped")

# Where conversation content usually sits, in any convention: a span carrying one of these that no
# dialect read is reported by name.
_CONVERSATION_KEY = re.compile(r"messages|prompt|completion|choices|instructions|input|output|content|response\.text")
_METADATA_KEY = re.compile(r"token|usage|mime_type|count|model|finish|\.type$|\.id$|\.name$|length|size")
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
        if v in (None, "", [], {}) or not _CONVERSATION_KEY.search(k) or _METADATA_KEY.search(k):
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
    if "anthropic" in scope and "instrumentation" not in scope:  # the SDK's own spans (com.anthropic.sdk.python)
        return "Anthropic SDK spans: ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE=content"
    if any(k.startswith("traceloop.") for k in a) or "llm.request.type" in a or "traceloop" in scope:
        return "OpenLLMetry: TRACELOOP_TRACE_CONTENT=true (Traceloop.init(trace_content=True))"
    if scope == "ai" or any(k.startswith("ai.") for k in a):
        return "Vercel AI SDK: experimental_telemetry { isEnabled: true, recordInputs: true, recordOutputs: true }"
    if "litellm" in scope or any(k.startswith("litellm.") for k in a):
        return ("LiteLLM: leave litellm.turn_off_message_logging off and set "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (OpenTelemetryConfig.capture_message_content)")
    if "pydantic" in scope or "logfire" in scope:
        return "pydantic-ai: InstrumentationSettings(include_content=True)"
    if "strands" in scope:
        return ("Strands Agents: content is always recorded; set OTEL_SEMCONV_STABILITY_OPT_IN="
                "gen_ai_latest_experimental for the message attributes")
    if "openai_agents" in scope or "openai.agents" in scope:
        return ("OpenAI Agents SDK: RunConfig(trace_include_sensitive_data=True) and "
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY (or SPAN_AND_EVENT)")
    if scope.startswith(("opentelemetry.instrumentation.genai.", "opentelemetry.util.genai")):
        # the opentelemetry-util-genai based packages: `true` is not one of their values (it turns capture off)
        return ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY (or SPAN_AND_EVENT / EVENT_ONLY; "
                "these instrumentations do not take `true`)")
    return ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (SPAN_ONLY / SPAN_AND_EVENT with "
            "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental)")


def warn(session: Session, d: Diagnostic) -> None:
    """Record a finding once, as a plain warning and as structured metadata."""
    if any(x.get("kind") == d.kind and x.get("message") == d.message for x in session.diagnostics):
        return
    session.diagnostics.append(d.as_dict())
    session.warnings.append(d.message)


MAX_REMEMBERED_SESSIONS = 10_000


def fresh_diagnostics(session: Session, seen: OrderedDict[str, set[str]]) -> list[dict[str, Any]]:
    """The diagnostics of `session` not reported before for the same session key (serve writes
    revisions of a session as late spans arrive: each finding is logged once). `seen` is bounded."""
    known = seen.setdefault(session.key, set())
    seen.move_to_end(session.key)
    while len(seen) > MAX_REMEMBERED_SESSIONS:
        seen.popitem(last=False)
    fresh = [d for d in session.diagnostics if d["message"] not in known]
    known.update(d["message"] for d in fresh)
    return fresh


def diagnose(session: Session, spans: list[SpanRecord], calls: list[LLMCall], unread: list[SpanRecord]) -> None:
    """Add a `Diagnostic` for everything in this session that the importer could not vouch for."""
    by_id = {s.span_id: s for s in spans}
    if not session.llm_calls and not session.messages:
        names = ", ".join(sorted({repr(s.name) for s in spans})[:4])
        warn(session, Diagnostic(
            "no_model_call", f"no model call in this session, only spans such as {names}: nothing says what the "
            "user asked, which tools the model was offered or what it answered. The model client is probably "
            "not instrumented (an agent framework's instrumentation alone may record agents and tools only): "
            "instrument the client too, e.g. opentelemetry-instrumentation-genai-openai for the OpenAI client",
            spans[0].span_id))
    elif not session.content_captured and not session.messages:
        span = next((by_id[c.span_id] for c in session.llm_calls if c.span_id in by_id), spans[0])
        setting = content_setting(span)
        warn(session, Diagnostic(
            "content_off", f"message content was not captured on span {span.name!r} ({span.span_id}): content "
            f"capture is off in the instrumentation (or it dropped the content); turn it on with {setting}. "
            "Until then user turns and the final answer must be written by hand", span.span_id, None, setting))
    if session.messages and not session.user_turns:
        warn(session, Diagnostic("no_user_turn", "the transcript holds no user turn with text: the scenario has "
                                 "nothing to ask; check the first model call's input"))
    for i, m in enumerate(session.messages):
        for p in m["parts"]:
            if p.get("type") == "text" and m["role"] in ("assistant", "user") and looks_serialized(p.get("content")):
                head = str(p.get("content"))[:60]
                warn(session, Diagnostic(
                    "serialized_turn", f"{m['role']} message {i} looks like a serialized object, not words for a "
                    f"person ({head!r}...): the producer wrote str(obj) and the shape is not one wt-otel knows"))
    named = {w.tool_call_id for w in session.witnessed_calls if w.tool_name}
    for i, m in enumerate(session.messages):
        for p in m["parts"]:
            if p.get("type") == "tool_call" and not p.get("name") and p.get("id") not in named:
                warn(session, Diagnostic(
                    "tool_call_without_name", f"tool call {p.get('id')!r} in message {i} has no tool name the "
                    "importer could read (written as 'unknown_tool'): the producer keeps it under a key wt-otel "
                    "does not know; name the tool by hand"))
            if p.get("type") == "tool_call_response" and not p.get("id"):
                warn(session, Diagnostic(
                    "tool_result_without_id", f"a tool result in message {i} names no tool call (no id the importer "
                    "could read): it answers the first call not yet answered (id_guessed), or, with none, goes to "
                    "omitted_parts; check it"))
    answered = {p.get("id") for m in session.messages for p in m["parts"] if p.get("type") == "tool_call_response"}
    answered |= {w.tool_call_id for w in session.witnessed_calls if w.result is not None or w.error}
    for m in session.messages:
        for p in m["parts"]:
            if p.get("type") == "tool_call" and p.get("id") not in answered:
                warn(session, Diagnostic(
                    "tool_call_without_result", f"tool call {p.get('name')!r} ({p.get('id')}) has no result in "
                    "the transcript and no tool span witnessed one: the universe cannot answer it"))
    for span in spans:
        events = ((e.attributes, f"event {e.name!r} of span") for e in span.events)
        for holder, what in [(span.attributes, "span"), *events]:
            if isinstance(escaped := holder.get(ESCAPED_TEXT), str):
                warn(session, Diagnostic(
                    "text_escaped", f"{what} {span.name!r} ({span.span_id}): {escaped} held text that is not valid "
                    "Unicode (a lone surrogate: the producer cut a character in half); kept with each surrogate as "
                    "its \\udXXX escape text", span.span_id, ESCAPED_TEXT))
    strong = not session.messages or not session.user_turns
    unread_ids = {s.span_id for s in unread}
    read_traces = {s.trace_id for s in spans if s.span_id not in unread_ids}
    for span in unread:
        if not strong and span.trace_id in read_traces and session.messages:
            continue  # e.g. LiteLLM's raw_gen_ai_request reprs beside the litellm_request span that was read
        keys = [k for k in conversation_attributes(span) if strong or _strong(k)]
        if keys:
            warn(session, Diagnostic(
                "unread_attributes", f"span {span.name!r} ({span.span_id}) looks like GenAI telemetry, but no "
                f"dialect read its conversation attributes: {', '.join(keys[:6])}", span.span_id, keys[0]))
    for call in calls:
        call_span = by_id.get(call.span_id)
        if call_span is None or call.input_messages or call.output_messages or call.is_transcript:
            continue
        for key in ("gen_ai.input.messages", "gen_ai.output.messages", "llm.input_messages", "input.value"):
            if key == "input.value" and not strong:
                continue  # a raw payload (e.g. LlamaIndex's prompt-preparation span) beside spans that were read
            if call_span.attributes.get(key) not in (None, "", "[]"):
                warn(session, Diagnostic(
                    "unknown_shape", f"span {call_span.name!r} ({call_span.span_id}): attribute {key} holds messages "
                    "of a shape wt-otel does not know; nothing was read from it", call_span.span_id, key))
                break


def _strong(key: str) -> bool:
    return any(w in key for w in ("messages", "prompt", "completion", "choices", "system_instructions"))


def explain_group(spans: list[SpanRecord]) -> tuple[int, str]:
    """(how telling, why) a group's spans (logs attached) yielded no GenAI session, in words a user
    can act on. Ranked: content capture off (3) > conversation attributes of an unknown shape (2) >
    set-up or metadata-only GenAI spans (1) > no GenAI spans at all (0)."""
    genai = [s for s in spans if looks_genai(s)]
    if not genai:
        return 0, (f"no GenAI spans at all ({len(spans)} span(s) without gen_ai.*, llm.*, ai.* or OpenInference "
                   "attributes): is a GenAI instrumentation installed and exporting here?")
    for span in genai:
        for obs in dialects.observe(span):
            if isinstance(obs, LLMCall) and not obs.content_captured and not obs.is_transcript:
                return 3, (f"GenAI spans without message content (e.g. span {span.name!r}): content capture is "
                           f"off; turn it on with {content_setting(span)}")
    keys = sorted({k for s in genai for k in conversation_attributes(s)})
    if keys:
        return 2, (f"GenAI spans of a shape wt-otel does not read (e.g. span {genai[0].name!r}); "
                   f"conversation attributes seen: {', '.join(keys[:8])}")
    return 1, (f"GenAI spans without a conversation or a tool run (e.g. span {genai[0].name!r}: set-up or "
               "metadata-only traces)")
