"""The incident flagger: configurable rules that mark a completed session as an incident.

Rules (`wt_otel.serve.config.FlagRule`) look at the session's spans: an attribute
match on any span, span event or log record, a span with status ERROR, or an
event name. The first matching rule (in config order) sets
`session.flagged`, `flag_reason` ("rule: key=value") and `flag_ref`, which the
writers put in the envelope's `source.ref` and the data-dir index lists.

`flag_ref`, in order: the rule's `ref_attribute` found on any span; the
matched value itself when `ref_from_value` and it looks like an id (not
`true`/`1`); the first trace id. In `wt-otel serve` the flagger is the
authority: it recomputes the flag `build_session` derived from `wt.incident`,
so a user who disables the rule really gets no flags.

Defaults (`default_flag_rules`): wt.incident / wt.flag / incident.id set;
negative user feedback (`user.feedback`, `feedback.*`, `gen_ai.feedback.*`:
a number below 0 or a word like "negative", "thumbs_down", "bad"); span
status ERROR is present but disabled.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterator
from fnmatch import fnmatchcase
from typing import Any

from wt_otel.model.session import Session
from wt_otel.model.spans import STATUS_ERROR, SpanRecord
from wt_otel.serve.config import FlaggerConfig, FlagRule
from wt_otel.serve.metrics import Metrics

NEGATIVE_WORDS = frozenset({"negative", "thumbs_down", "thumbs-down", "thumbsdown", "down", "bad", "dislike",
                            "unhelpful", "wrong", "incorrect", "-1", "\N{THUMBS DOWN SIGN}"})
_FALSY = (None, False, "", "false", "False", 0)


def _is_negative(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value < 0
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            return float(text) < 0
        except ValueError:
            return text in NEGATIVE_WORDS
    return False


def _attribute_sets(span: SpanRecord) -> Iterator[dict[str, Any]]:
    yield span.attributes
    for event in span.events:
        yield event.attributes


class _CompiledRule:
    def __init__(self, rule: FlagRule) -> None:
        self.rule = rule
        self.regex = re.compile(rule.regex) if rule.regex else None
        self.exact = [k for k in rule.keys if not any(c in k for c in "*?[")]
        self.patterns = [k for k in rule.keys if k not in self.exact]

    def _value_matches(self, value: Any) -> bool:
        match = self.rule.match
        if match == "present":
            return value not in _FALSY
        if match == "equals":
            return value == self.rule.value or str(value) == str(self.rule.value)
        if match == "regex":
            return bool(self.regex.search(str(value)))
        return _is_negative(value)

    def _matching_attribute(self, attrs: dict[str, Any]) -> tuple[str, Any] | None:
        for key in self.exact:
            if key in attrs and self._value_matches(attrs[key]):
                return key, attrs[key]
        if self.patterns:
            for key, value in attrs.items():
                if any(fnmatchcase(key, p) for p in self.patterns) and self._value_matches(value):
                    return key, value
        return None

    def evaluate(self, span: SpanRecord) -> tuple[str, Any] | None:
        """(what matched, value) for this span, or None."""
        kind = self.rule.kind
        if kind == "status_error":
            return ("status", span.status_message or STATUS_ERROR) if span.status_code == STATUS_ERROR else None
        if kind == "event":
            for event in span.events:
                if fnmatchcase(event.name, self.rule.event_name or ""):
                    return "event", event.name
            return None
        for attrs in _attribute_sets(span):
            found = self._matching_attribute(attrs)
            if found:
                return found
        return None


class IncidentFlagger:
    """Evaluates the rules on a completed session; `process(session, spans)` sets the flag fields."""

    def __init__(self, config: FlaggerConfig | None = None, metrics: Metrics | None = None) -> None:
        self.config = config or FlaggerConfig()
        self.metrics = metrics or Metrics()
        self.rules = [_CompiledRule(r) for r in self.config.rules if r.enabled]
        self._counted: OrderedDict[str, None] = OrderedDict()  # revisions of one session count once

    def evaluate(self, spans: list[SpanRecord]) -> tuple[FlagRule, str, Any, SpanRecord] | None:
        for rule in self.rules:
            for span in spans:
                found = rule.evaluate(span)
                if found:
                    return rule.rule, found[0], found[1], span
        return None

    def process(self, session: Session, spans: list[SpanRecord]) -> Session:
        if not self.config.enabled:
            return session
        session.flagged, session.flag_ref, session.flag_reason, session.flag_refs = False, None, None, []
        hit = self.evaluate(spans)
        if hit is None:
            return session
        rule, what, value, _span = hit
        session.flagged = True
        session.flag_reason = f"{rule.name}: {what}={value!r}"
        session.flag_ref = self._ref(rule, value, spans) or (session.trace_ids[0] if session.trace_ids else None)
        session.flag_refs = self._explicit_refs(spans)
        if session.key not in self._counted:
            self._counted[session.key] = None
            if len(self._counted) > 100_000:
                self._counted.popitem(last=False)
            self.metrics.inc("wt_otel_flags_raised_total", rule=rule.name)
        return session

    def _explicit_refs(self, spans: list[SpanRecord]) -> list[str]:
        """Each trace's own incident id (from a rule's ref), in trace order: one conversation can carry several
        incidents (flagged at different turns), and each must become its own scenario, not fold into the first."""
        by_trace: OrderedDict[str, list[SpanRecord]] = OrderedDict()
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        refs: list[str] = []
        for trace_spans in by_trace.values():
            hit = self.evaluate(trace_spans)
            ref = self._ref(hit[0], hit[2], trace_spans) if hit else None
            if ref and ref not in refs:
                refs.append(ref)
        return refs

    @staticmethod
    def _ref(rule: FlagRule, value: Any, spans: list[SpanRecord]) -> str | None:
        if rule.ref_attribute:
            for span in spans:
                for attrs in _attribute_sets(span):
                    ref = attrs.get(rule.ref_attribute)
                    if ref not in _FALSY:
                        return str(ref)
        if rule.ref_from_value and isinstance(value, str) and value.lower() not in ("true", "1", "yes"):
            return value
        return None
