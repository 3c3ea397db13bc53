"""The cheap GenAI filter: drop what carries nothing GenAI-related, before any real work.

A collector often forwards everything (HTTP server spans, DB spans, app
logs). This stage looks only at attribute keys, span and event names, never
at values, so it costs a few string prefix checks per record.

A record is GenAI when it carries a GenAI attribute key (the table in
`wt_otel.ingest.keys`, shared with the rotel hooks), keys that name a model and count its tokens (a
model call in any namespace: `keys.model_call_bits`), a GenAI span name
(`chat ...`, `execute_tool ...`, `invoke_agent ...`),
a `gen_ai.*` span event, or is a `gen_ai.*` log event; or when it names a
conversation (`session.id`, any of `CONVERSATION_KEYS`) and carries user
feedback (a thumbs-down sent on its own, with only the session id). Once a record of a
trace is GenAI, the trace id goes into a bounded LRU and every other record
of that trace is kept too: a root `invoke_agent` or workflow span often has
no gen_ai attribute, and the assembler needs it to know the session ended.

Limitation (by design, to stay cheap and bounded): a non-GenAI span that
arrives in an earlier batch than the first GenAI record of its trace is
dropped (within one batch, order does not matter). Spans are exported when
they end and children end before parents, so a trace's root normally arrives
after its GenAI children; the cost of a miss is a session that completes by
idle timeout instead of root+grace.

In serve the filter also runs at receive time, when it is the pipeline's head: the receivers
ask it about a protobuf traces request before decoding it (`keep_traces`, on the traces of the span index's
entries, `wt_otel.ingest.spanindex`), so a span it would drop is never converted and a request
with nothing to keep is never parsed; the receivers tell it about everything they decode the
usual way (`note_decoded`). Both remember GenAI traces at once, under a lock shared with the
pipeline thread, so a request of a known trace is kept even while the one that made it known
still waits in the queue. The same rule then runs again on what is queued (`filter`), which is
what the in-app SDK processor, with no receivers, uses alone.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

from wt_otel.components import StageContext, StageType
from wt_otel.ingest.dialects.common import conversation_id
from wt_otel.ingest.flags import FEEDBACK_KEYS
from wt_otel.ingest.keys import (
    CONVERSATION_KEYS,
    GENAI_KEY_PREFIXES,
    GENAI_KEYS,
    GENAI_SPAN_NAME_PREFIXES,
    MODEL_CALL,
    is_genai_event_name,
    model_call_bits,
)
from wt_otel.model.spans import LogRecord, Record, SpanRefs
from wt_otel.serve.config import FilterConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Consumer

# The tables live in wt_otel.ingest.keys (shared with the rotel hooks); the old names stay importable.
PREFIXES = GENAI_KEY_PREFIXES
KEYS = GENAI_KEYS
SPAN_NAME_PREFIXES = GENAI_SPAN_NAME_PREFIXES


def is_genai(record: Record) -> bool:
    """Whether this record on its own carries GenAI evidence (keys and names only).

    A record that names a conversation (a usable id under `session.id`, ... : `dialects.common.conversation_id`)
    and carries user feedback (a key of the default flag rules) counts too: a thumbs-down sent as its own span,
    with only the session id, is what flags that session, and `wt-otel import` reads it so. The same rule as the
    receivers' on the span index (`genai or conversation and marks`)."""
    conversation = False
    model = 0
    for key in record.attributes:
        if key.startswith(PREFIXES) or key in KEYS:
            return True
        conversation = conversation or key in _CONVERSATION_KEYS
        if model != MODEL_CALL:
            model |= model_call_bits(key)
    if model == MODEL_CALL:  # a model call in a namespace of its own: it names the model and counts tokens
        return True
    if isinstance(record, LogRecord):
        name = record.event_name or str(record.attributes.get("event.name") or "")
        return is_genai_event_name(name) or (conversation and _feedback(record.attributes)
                                             and conversation_id(record.attributes) is not None)
    if record.name.startswith(SPAN_NAME_PREFIXES):
        return True
    return any(is_genai_event_name(e.name) for e in record.events) or (conversation and (
        _feedback(record.attributes) or any(_feedback(e.attributes) for e in record.events))
        and conversation_id(record.attributes) is not None)


_CONVERSATION_KEYS = frozenset(CONVERSATION_KEYS)


def _feedback(attributes: Mapping[str, object]) -> bool:
    """Whether any key is a feedback key of the default flag rules (the span index's marks; its incident keys are
    GenAI keys already)."""
    return any(fnmatchcase(k, p) for k in attributes for p in FEEDBACK_KEYS)


class GenAIFilter:
    """A pipeline `Consumer` that forwards GenAI records (and their traces) to `next`."""

    def __init__(self, next: Consumer, metrics: Metrics | None = None, max_known_traces: int = 100_000,
                 enabled: bool = True) -> None:
        self.next = next
        self.metrics = metrics or Metrics()
        self.max_known_traces = max_known_traces
        self.enabled = enabled
        self._known: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()  # the receivers' threads share `_known` with the pipeline thread

    @classmethod
    def from_config(cls, next: Consumer, config, metrics: Metrics | None = None) -> GenAIFilter:
        """From a `wt_otel.serve.config.FilterConfig`."""
        return cls(next, metrics, max_known_traces=config.max_known_traces, enabled=config.enabled)

    def _remember(self, trace_id: str) -> None:  # with self._lock held
        known = self._known
        if trace_id in known:
            known.move_to_end(trace_id)
            return
        known[trace_id] = None
        if len(known) > self.max_known_traces:
            known.popitem(last=False)

    def filter(self, records: Sequence[Record | SpanRefs]) -> list[Record | SpanRefs]:
        """The records to keep; two passes so order inside a batch does not matter. `SpanRefs` were
        screened at receive time (`keep_traces`): they are kept."""
        if not self.enabled:
            return list(records)
        with self._lock:
            for r in records:
                if not isinstance(r, SpanRefs) and r.trace_id and is_genai(r):
                    self._remember(r.trace_id)
            known = self._known
            kept = [r for r in records
                    if isinstance(r, SpanRefs) or (r.trace_id in known if r.trace_id else is_genai(r))]
        dropped = len(records) - len(kept)
        if dropped:
            self.metrics.inc("wt_otel_records_dropped_total", dropped, reason="not_genai")
        return kept

    def keep_traces(self, traces: dict[str, bool]) -> set[str] | None:
        """Receive time: which traces of a request not decoded yet `filter` would keep (`traces`: each trace id
        of the request, whether the span index saw a GenAI span of it); None when the filter is off (keep
        everything). Remembers the GenAI traces now. Per trace, not per span: a request holds few traces."""
        if not self.enabled:
            return None
        with self._lock:
            for trace_id, genai in traces.items():
                if genai:
                    self._remember(trace_id)
            known = self._known
            return {t for t in traces if t in known}

    def note_decoded(self, records: Sequence[Record]) -> None:
        """Receive time: remember the GenAI traces of records the receivers decoded without the index
        (logs, OTLP/JSON, a request the index refused), before they wait in the queue."""
        if not self.enabled:
            return
        with self._lock:
            for r in records:
                if r.trace_id and is_genai(r):
                    self._remember(r.trace_id)

    def consume(self, records: Sequence[Record | SpanRefs], now: float) -> None:
        kept = self.filter(records)
        if kept:
            self.next.consume(kept, now)

    def tick(self, now: float) -> None:
        self.next.tick(now)

    def close(self) -> None:
        self.next.close()


def _create(config: FilterConfig, ctx: StageContext, next: Consumer) -> GenAIFilter:
    return GenAIFilter.from_config(next, config, ctx.metrics)


STAGE = StageType("genai-filter", "records", _create, FilterConfig, section="filter",
                  description="drop records of traces that carry nothing GenAI-related")

__all__ = ["STAGE", "GenAIFilter", "KEYS", "PREFIXES", "is_genai"]
