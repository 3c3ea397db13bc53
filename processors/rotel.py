"""The wt-otel processor for rotel: tag GenAI traffic (and, if asked, drop everything else) inside the collector.

rotel (PyPI `rotel`, a Rust OpenTelemetry collector) loads a Python file given with
`--otlp-with-trace-processor FILE` / `--otlp-with-logs-processor FILE` and calls its
`process_spans(resource_spans)` / `process_logs(resource_logs)` with rotel's own mutable
objects (`rotel_sdk.open_telemetry.*`). `collector-config/rotel_processor.py` is that file;
it re-exports the two hooks below.

What the hooks do: a span is GenAI when its name, one of its attribute *keys* or one of its event
names says so, by the table in `wt_otel.ingest.keys` that `wt-otel serve`'s filter uses too (no
values are decoded, so the test stays cheap). Trace ids of GenAI spans go into a bounded LRU,
so the rest of a GenAI trace (a root `invoke_agent`/workflow span, HTTP spans) is recognised
too. Every span or log record of a GenAI trace gets `wt.pipeline = "rotel"`. Records of
non-GenAI traces pass untouched, or are dropped when `WT_ROTEL_DROP_NON_GENAI=1`.

Facts about rotel 0.0.1a15 (binary 0.0.1-alpha10) that shape this module:

- An exception escaping a hook kills the whole collector, so each hook catches everything,
  counts and logs it, and lets the batch through as it stands (nothing is ever dropped on error).
- Its embedded interpreter is Debian's libpython3.11, not the venv: stdlib only here.
- After the call it unwraps its shared objects and panics if Python still holds one: nothing
  from a batch is kept except trace ids copied as `bytes`.
- When it converts objects back it reverses every array value (`Vec::pop` in a loop) in each
  attribute list Python touched, in the resource attributes and in every log body. Pre-reversing
  those arrays here (`restore_array_order`) makes the data leave rotel in its original order;
  `WT_ROTEL_FIX_ARRAY_ORDER=0` turns that off for a rotel that no longer has the bug.

Configuration comes from the environment (see `collector-config/rotel.env`):
`WT_ROTEL_DROP_NON_GENAI` (default 0), `WT_ROTEL_MAX_TRACES` (default 100000),
`WT_ROTEL_FIX_ARRAY_ORDER` (default 1).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from wt_otel.ingest.keys import (
    GENAI_KEY_PREFIXES,
    GENAI_SPAN_NAME_PREFIXES,
    is_genai_event_name,
    is_genai_key,
    is_genai_span_name,
)

log = logging.getLogger("wt_otel.processors.rotel")

# What is GenAI comes from the one table the serve filter uses too: `wt_otel.ingest.keys` is standard
# library only (and `wt_otel`, `wt_otel.ingest` import nothing at package level), so rotel's interpreter
# can load it. tests/unit/processors/test_genai_keys.py checks both agree on the producer fixtures.
GENAI_SPAN_NAMES = GENAI_SPAN_NAME_PREFIXES
TAG_KEY = "wt.pipeline"
TAG_VALUE = "rotel"


@dataclass(frozen=True)
class Settings:
    drop_non_genai: bool = False
    max_traces: int = 100_000
    fix_array_order: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        values: Mapping[str, str] = os.environ if env is None else env
        return cls(
            drop_non_genai=values.get("WT_ROTEL_DROP_NON_GENAI", "0").strip().lower() in ("1", "true", "yes"),
            max_traces=max(1, int(values.get("WT_ROTEL_MAX_TRACES", "100000"))),
            fix_array_order=values.get("WT_ROTEL_FIX_ARRAY_ORDER", "1").strip().lower() not in ("0", "false", "no"),
        )


def _rotel_sdk() -> SimpleNamespace:
    """rotel's object types; the module only exists inside a running rotel."""
    from rotel_sdk.open_telemetry.common.v1 import ArrayValue, KeyValue, KeyValueList

    return SimpleNamespace(ArrayValue=ArrayValue, KeyValue=KeyValue, KeyValueList=KeyValueList)


def restore_array_order(value: Any, sdk: SimpleNamespace) -> None:
    """Reverse every array nested in `value` in place, so rotel's reversing conversion restores it."""
    if isinstance(value, sdk.ArrayValue):
        items = [value[i] for i in range(len(value))]
        for item in items:
            if item is not None:
                restore_array_order(item.value, sdk)
        for i, item in enumerate(reversed(items)):
            value[i] = item
    elif isinstance(value, sdk.KeyValueList):
        for kv in value:
            if kv.value is not None:
                restore_array_order(kv.value.value, sdk)


_is_genai_key = is_genai_key

__all__ = ["GENAI_KEY_PREFIXES", "RotelGenAIProcessor", "Settings", "process_logs", "process_spans"]


class RotelGenAIProcessor:
    """The two rotel hooks plus the state they share (the GenAI trace LRU and counters)."""

    def __init__(self, settings: Settings | None = None, sdk: SimpleNamespace | None = None) -> None:
        self.settings = settings or Settings()
        self._sdk = sdk
        self._genai_traces: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()

    @property
    def sdk(self) -> SimpleNamespace:
        if self._sdk is None:
            self._sdk = _rotel_sdk()
        return self._sdk

    # -- the hooks rotel calls ------------------------------------------------------------------

    def process_spans(self, resource_spans: Any) -> None:
        self.stats["span_batches"] += 1
        try:
            self._process_spans(resource_spans)
        except BaseException:  # noqa: B036 - anything escaping kills rotel 0.0.1a15
            self._failed("spans")

    def process_logs(self, resource_logs: Any) -> None:
        self.stats["log_batches"] += 1
        try:
            self._process_logs(resource_logs)
        except BaseException:  # noqa: B036 - anything escaping kills rotel 0.0.1a15
            self._failed("logs")

    # -- spans ----------------------------------------------------------------------------------

    def _process_spans(self, resource_spans: Any) -> None:
        scopes = list(resource_spans.scope_spans)
        # Pass 1, read only: classify, so that a failure here leaves the batch as it came.
        plan = []
        for scope in scopes:
            rows = []
            for span in scope.spans:
                attrs = span.attributes
                rows.append((span, attrs, bytes(span.trace_id), self.span_is_genai(span, attrs)))
            plan.append((scope, rows))
        self._remember(tid for _, rows in plan for _, _, tid, genai in rows if genai)

        # Pass 2: repair array order, tag, and (only if configured) drop.
        self._fix_resource(resource_spans)
        for scope, rows in plan:
            kept = []
            for span, attrs, tid, genai in rows:
                self.stats["spans"] += 1
                self.stats["genai_spans"] += genai
                self._fix_attributes(attrs)
                if genai or self._known(tid):
                    self._tag(attrs)
                    self.stats["tagged_spans"] += 1
                    kept.append(span)
                elif not self.settings.drop_non_genai:
                    kept.append(span)
            if len(kept) != len(rows):
                self.stats["dropped_spans"] += len(rows) - len(kept)
                scope.spans = kept

    # -- logs -----------------------------------------------------------------------------------

    def _process_logs(self, resource_logs: Any) -> None:
        scopes = list(resource_logs.scope_logs)
        plan = []
        for scope in scopes:
            rows = []
            for record in scope.log_records:
                attrs = record.attributes
                rows.append((record, attrs, bytes(record.trace_id), self._log_is_genai(record, attrs)))
            plan.append((scope, rows))
        self._remember(tid for _, rows in plan for _, _, tid, genai in rows if genai and tid)

        self._fix_resource(resource_logs)
        for scope, rows in plan:
            kept = []
            for record, attrs, tid, genai in rows:
                self.stats["log_records"] += 1
                self.stats["genai_log_records"] += genai
                self._fix_attributes(attrs)
                if self.settings.fix_array_order and record.body is not None:
                    restore_array_order(record.body.value, self.sdk)
                if genai or (tid and self._known(tid)):
                    self._tag(attrs)
                    self.stats["tagged_log_records"] += 1
                    kept.append(record)
                elif not self.settings.drop_non_genai:
                    kept.append(record)
            if len(kept) != len(rows):
                self.stats["dropped_log_records"] += len(rows) - len(kept)
                scope.log_records = kept

    @staticmethod
    def span_is_genai(span: Any, attrs: Any = None) -> bool:
        """The filter's rule (`genai_filter.is_genai`) on rotel's span objects: name, keys, event names."""
        if is_genai_span_name(span.name):
            return True
        if any(is_genai_key(kv.key) for kv in (span.attributes if attrs is None else attrs)):
            return True
        return any(is_genai_event_name(e.name) for e in getattr(span, "events", None) or ())

    @staticmethod
    def _log_is_genai(record: Any, attrs: Any) -> bool:
        if is_genai_event_name(record.event_name or ""):
            return True
        for kv in attrs:
            if _is_genai_key(kv.key):
                return True
            if kv.key == "event.name" and kv.value is not None and is_genai_event_name(str(kv.value.value)):
                return True
        return False

    # -- helpers --------------------------------------------------------------------------------

    def _remember(self, trace_ids: Any) -> None:
        with self._lock:
            known = self._genai_traces
            for tid in trace_ids:
                if tid in known:
                    known.move_to_end(tid)
                    continue
                known[tid] = None
                if len(known) > self.settings.max_traces:
                    known.popitem(last=False)

    def _known(self, trace_id: bytes) -> bool:
        with self._lock:
            return trace_id in self._genai_traces

    def _tag(self, attrs: Any) -> None:
        if not any(kv.key == TAG_KEY for kv in attrs):
            attrs.append(self.sdk.KeyValue.new_string_value(TAG_KEY, TAG_VALUE))

    def _fix_attributes(self, attrs: Any) -> None:
        if self.settings.fix_array_order:
            for kv in attrs:
                if kv.value is not None:
                    restore_array_order(kv.value.value, self.sdk)

    def _fix_resource(self, batch: Any) -> None:
        resource = batch.resource
        if resource is not None:
            self._fix_attributes(resource.attributes)

    def _failed(self, signal: str) -> None:
        self.stats["errors"] += 1
        n = self.stats["errors"]
        if n <= 5 or n % 1000 == 0:
            log.exception("wt-otel rotel processor: %s batch passed through unprocessed (error #%d)", signal, n)


_default: RotelGenAIProcessor | None = None


def default_processor() -> RotelGenAIProcessor:
    """The process-wide instance the module-level hooks use (settings read from the environment once)."""
    global _default
    if _default is None:
        try:
            settings = Settings.from_env()
        except ValueError:
            log.warning("wt-otel rotel processor: bad WT_ROTEL_* setting, using defaults")
            settings = Settings()
        _default = RotelGenAIProcessor(settings)
    return _default


def process_spans(resource_spans: Any) -> None:
    """rotel's trace hook."""
    try:
        default_processor().process_spans(resource_spans)
    except BaseException:  # noqa: B036 - even set-up failures must not reach rotel
        log.exception("wt-otel rotel processor: spans passed through")


def process_logs(resource_logs: Any) -> None:
    """rotel's logs hook."""
    try:
        default_processor().process_logs(resource_logs)
    except BaseException:  # noqa: B036 - even set-up failures must not reach rotel
        log.exception("wt-otel rotel processor: logs passed through")
