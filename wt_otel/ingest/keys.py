"""What marks telemetry as GenAI: attribute keys, span names, event names. Standard library only.

One table for every place that decides "is this GenAI?" or "which attribute holds what": the
serve filter (`processors/genai_filter.py`), the rotel hooks (`processors/rotel.py`, which run in
rotel's embedded Debian python3.11 without the venv's packages, so nothing here may import
anything beyond the standard library), the dialects and the session builder. Before this
module the filter and rotel each had a copy, and the copies drifted.

The tests only look at keys and names, never at values: a few string prefix checks per record.
"""

from __future__ import annotations

# Attribute key prefixes of the producers wt-otel reads: GenAI semconv, OpenLLMetry (llm., traceloop.),
# OpenInference (llm., openinference., tool.), pydantic-ai, the OpenAI Agents SDK and generic JSONL imports.
# The Vercel AI SDK's `ai.*` attributes (AI SDK 4-6, and 7 without @ai-sdk/otel) too, and the namespaces of the
# LLM observability SDKs that export OTLP in attributes of their own (Langfuse, MLflow, Haystack, LlamaIndex).
GENAI_KEY_PREFIXES = ("gen_ai.", "llm.", "traceloop.", "openinference.", "pydantic_ai", "tool.", "openai_agents.",
                      "generic.", "ai.", "langfuse.", "mlflow.", "haystack.", "llamaindex.")

# Incident markers a producer sets on a span (`wt.incident.id` also names the incident).
FLAG_KEYS = ("wt.incident", "wt.incident.id", "wt.flag", "incident.id")

# Whole keys that carry GenAI content without a GenAI prefix (Logfire's `events`, OpenInference's
# input/output values), plus the incident markers.
GENAI_KEYS = frozenset({"events", "all_messages_events", "input.value", "output.value", *FLAG_KEYS})

# Span names of GenAI operations (`chat gpt-4o`, `execute_tool lookup`, `invoke_agent triage`).
GENAI_SPAN_NAME_PREFIXES = ("chat", "execute_tool", "invoke_agent")

# Span event and log event names of GenAI events (`gen_ai.user.message`, `gen_ai.choice`, ...).
GENAI_EVENT_PREFIX = "gen_ai."

# Attributes that tie separate traces into one conversation (plain chat instrumentations make every
# LLM call its own trace).
CONVERSATION_KEYS = (
    "gen_ai.conversation.id",
    "session.id",
    "gen_ai.session.id",
    "traceloop.association.properties.session_id",
    "traceloop.association.properties.conversation_id",
    "traceloop.association.properties.thread_id",
    "traceloop.association.properties.chat_id",
    "openai_agents.group_id",
    "generic.group_id",
    "thread.id",
    "langfuse.session.id",
    "ai.settings.context.sessionId",  # Vercel AI SDK runtime context
    "ai.telemetry.metadata.sessionId",
    "ai.telemetry.metadata.session_id",
    # MLflow's standard session metadata key, where an exporter or the app puts it on spans (MLflow's own
    # OTLP span processor keeps trace metadata off the spans)
    "mlflow.trace.session",
    "metadata.mlflow.trace.session",
)


# A model call in any namespace, known by its keys alone: one names the model, another counts its tokens
# (`acme.model.name`, `acme.usage.input_tokens`): the shape reader's span role and serve's filter alike,
# so a producer nobody wrote a prefix for reaches the session builder in serve too. `_spanindex.c` has
# the same words.
MODEL_WORD = "model"
TOKEN_WORDS = ("token", "usage")
COUNT_WORDS = ("input", "output", "prompt", "completion", "total")
NAMES_MODEL, COUNTS_TOKENS = 1, 2
MODEL_CALL = NAMES_MODEL | COUNTS_TOKENS


def model_call_bits(key: str | bytes) -> int:
    """NAMES_MODEL | COUNTS_TOKENS as the key says (case-insensitive); a span whose keys give both is a model
    call."""
    k = (key if isinstance(key, bytes) else key.encode("utf-8", "surrogatepass")).lower()  # ASCII only, as in C
    bits = NAMES_MODEL if _MODEL_B in k else 0
    if any(w in k for w in _TOKEN_B) and any(w in k for w in _COUNT_B):
        bits |= COUNTS_TOKENS
    return bits


_MODEL_B = MODEL_WORD.encode()
_TOKEN_B = tuple(w.encode() for w in TOKEN_WORDS)
_COUNT_B = tuple(w.encode() for w in COUNT_WORDS)


def is_genai_key(key: str) -> bool:
    """Whether an attribute key on its own marks GenAI telemetry."""
    return key.startswith(GENAI_KEY_PREFIXES) or key in GENAI_KEYS


def is_genai_span_name(name: str) -> bool:
    return name.startswith(GENAI_SPAN_NAME_PREFIXES)


def is_genai_event_name(name: str) -> bool:
    """For span event names, log `event_name` and the `event.name` attribute alike."""
    return name.startswith(GENAI_EVENT_PREFIX)


__all__ = [
    "CONVERSATION_KEYS",
    "COUNTS_TOKENS",
    "FLAG_KEYS",
    "GENAI_EVENT_PREFIX",
    "GENAI_KEYS",
    "GENAI_KEY_PREFIXES",
    "GENAI_SPAN_NAME_PREFIXES",
    "MODEL_CALL",
    "NAMES_MODEL",
    "is_genai_event_name",
    "is_genai_key",
    "is_genai_span_name",
    "model_call_bits",
]
