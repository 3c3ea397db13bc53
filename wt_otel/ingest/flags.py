"""The one flag rule: which sessions are incidents, for `wt-otel import` and `wt-otel serve` alike.

Before this module `import` flagged a session when a span carried `wt.incident`-style keys, and
`serve` ran its configurable rules (negative feedback too, event attributes too): one dump could
be an incident to one and not the other. Now both evaluate the same `FlagRules`, built from the
same config section (`flagger:` in serve's YAML; `wt-otel import --config FILE` reads it too).

Rules (`FlagRule`) look at the session's spans: an attribute match on any span, span event or log
record, a span with status ERROR, or an event name. The first matching rule (in config order) sets
`session.flagged`, `flag_reason` ("rule: key=value") and `flag_ref`, which the writers put in the
envelope's `source.ref` and the data-dir index lists.

`flag_ref`, in order: the rule's `ref_attribute` found on any span; the matched value itself when
`ref_from_value` and it looks like an id (not `true`/`1`); the first trace id.

Defaults (`default_flag_rules`): wt.incident / wt.flag / incident.id set; negative user feedback
(`user.feedback`, `feedback.*`, `gen_ai.feedback.*`: a number below 0 or a word like "negative",
"thumbs_down", "bad"); span status ERROR is present but disabled.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from wt_otel.ingest.keys import FLAG_KEYS
from wt_otel.model.session import Session
from wt_otel.model.spans import STATUS_ERROR, SpanRecord

__all__ = ["FEEDBACK_KEYS", "NEGATIVE_WORDS", "Flag", "FlagRule", "FlagRules", "FlaggerConfig",
           "default_flag_rules", "is_negative"]


class FlagRule(BaseModel):
    """One incident rule; the first matching rule (in file order) names the flag.

    kind `attribute`: a span (or event/log) attribute whose key matches `key`
    (fnmatch pattern, e.g. `gen_ai.feedback.*`) and whose value matches `match`:
    `present` (set and truthy), `equals` (`value`), `regex` (`regex`, searched
    in the value as text) or `negative` (user feedback: a number below 0, or a
    word like negative / thumbs_down / bad). kind `status_error`: a span with
    status ERROR. kind `event`: a span event or log record whose name matches
    `name` (fnmatch). `ref_attribute` names the attribute (on any span) that
    supplies the incident id written as `source.ref`.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["attribute", "status_error", "event"] = "attribute"
    enabled: bool = True
    keys: list[str] = []
    match: Literal["present", "equals", "regex", "negative"] = "present"
    value: Any = None
    regex: str | None = None
    event_name: str | None = None
    ref_attribute: str | None = None
    ref_from_value: bool = Field(False, description="use the matched attribute's value as source.ref")

    @model_validator(mode="after")
    def _complete(self) -> FlagRule:
        if self.kind == "attribute" and not self.keys:
            raise ValueError(f"flag rule {self.name!r}: an attribute rule needs `keys` (attribute names or patterns)")
        if self.kind == "event" and not self.event_name:
            raise ValueError(f"flag rule {self.name!r}: an event rule needs `event_name`")
        if self.match == "regex" and not self.regex:
            raise ValueError(f"flag rule {self.name!r}: match: regex needs `regex`")
        if self.match == "equals" and self.value is None:
            raise ValueError(f"flag rule {self.name!r}: match: equals needs `value`")
        return self


FEEDBACK_KEYS = ["user.feedback", "user.feedback.*", "feedback", "feedback.*", "gen_ai.feedback.*",
                 "gen_ai.evaluation.score.label", "user_feedback", "user_feedback.*"]


def default_flag_rules() -> list[FlagRule]:
    """wt.incident / wt.flag (ref from the incident id), negative user feedback; span ERROR is off.

    ERROR status is off by default: tool errors the agent recovered from and
    retried rate limits are routine, and flagging each would flood the replay
    queue. Turn it on with `enabled: true`.
    """
    return [
        FlagRule(name="incident-attribute", keys=list(FLAG_KEYS), match="present", ref_from_value=True,
                 ref_attribute="wt.incident.id"),
        FlagRule(name="negative-feedback", keys=FEEDBACK_KEYS, match="negative"),
        FlagRule(name="span-error", kind="status_error", enabled=False),
    ]


class FlaggerConfig(BaseModel):
    """The `flagger:` section: serve's `flagger` stage and `wt-otel import --config` read it."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    rules: list[FlagRule] = Field(default_factory=default_flag_rules)


NEGATIVE_WORDS = frozenset({"negative", "thumbs_down", "thumbs-down", "thumbsdown", "down", "bad", "dislike",
                            "unhelpful", "wrong", "incorrect", "-1", "\N{THUMBS DOWN SIGN}"})
_FALSY = (None, False, "", "false", "False", 0)


def is_negative(value: Any) -> bool:
    """Negative user feedback: a number below 0, or a word like negative / thumbs_down / bad."""
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
        self._exact_set = frozenset(self.exact)
        # spans of one instrumentation share their attribute names: remember, per set of names, which
        # of them the rule looks at (bounded), so a span costs one lookup, not a pattern match per key
        self._by_names: dict[tuple[str, ...], tuple[str, ...]] = {}

    def _candidates(self, attrs: dict[str, Any]) -> tuple[str, ...]:
        names = tuple(attrs)
        found = self._by_names.get(names)
        if found is None:
            found = tuple(k for k in self.exact if k in attrs)
            if self.patterns:
                found += tuple(k for k in names if k not in self._exact_set
                               and any(fnmatchcase(k, p) for p in self.patterns))
            if len(self._by_names) < 4096:
                self._by_names[names] = found
        return found

    def _value_matches(self, value: Any) -> bool:
        match = self.rule.match
        if match == "present":
            return value not in _FALSY
        if match == "equals":
            return value == self.rule.value or str(value) == str(self.rule.value)
        if match == "regex":
            return bool(self.regex and self.regex.search(str(value)))
        return is_negative(value)

    def _matching_attribute(self, attrs: dict[str, Any]) -> tuple[str, Any] | None:
        """Exact keys in rule order first, then pattern matches in attribute order."""
        if not attrs:
            return None
        for key in self._candidates(attrs):
            if self._value_matches(attrs[key]):
                return key, attrs[key]
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


@dataclass(frozen=True, slots=True)
class Flag:
    """Why a session is an incident: the rule, what matched, and the incident id (`source.ref`)."""

    rule: FlagRule
    what: str
    value: Any
    ref: str | None

    @property
    def reason(self) -> str:
        return f"{self.rule.name}: {self.what}={self.value!r}"


class FlagRules:
    """The enabled rules of a `FlaggerConfig`, compiled once; `apply` sets a session's flag fields."""

    def __init__(self, config: FlaggerConfig | None = None) -> None:
        self.config = config or FlaggerConfig()
        self.enabled = self.config.enabled
        self.rules = [_CompiledRule(r) for r in self.config.rules if r.enabled]
        self._by_names: dict[tuple[str, ...], frozenset[int]] = {}

    def evaluate(self, spans: list[SpanRecord]) -> Flag | None:
        """The first rule (in config order) that any span matches, or None (also when disabled)."""
        if not self.enabled:
            return None
        # One cheap pass first: which attribute rules could match a span at all (by attribute names,
        # cached per set of names), so the values are looked at only where a rule names a key.
        maybe = []
        for span in spans:
            found = self._possible(span.attributes)
            for event in span.events:
                if event.attributes:
                    found = found | self._possible(event.attributes)
            maybe.append(found)
        for i, rule in enumerate(self.rules):
            by_name = rule.rule.kind == "attribute"
            for span, possible in zip(spans, maybe, strict=True):
                if by_name and i not in possible:
                    continue
                hit = rule.evaluate(span)
                if hit:
                    return Flag(rule.rule, hit[0], hit[1], self._ref(rule.rule, hit[1], spans))
        return None

    def _possible(self, attrs: dict[str, Any]) -> frozenset[int]:
        names = tuple(attrs)
        hit = self._by_names.get(names)
        if hit is None:
            hit = frozenset(i for i, r in enumerate(self.rules) if r.rule.kind == "attribute" and r._candidates(attrs))
            if len(self._by_names) < 4096:
                self._by_names[names] = hit
        return hit

    def apply(self, session: Session, spans: list[SpanRecord]) -> Flag | None:
        """Set (or clear) `flagged`, `flag_reason`, `flag_ref`; a disabled flagger leaves the session alone."""
        if not self.enabled:
            return None
        session.flagged, session.flag_ref, session.flag_reason, session.flag_refs = False, None, None, []
        flag = self.evaluate(spans)
        if flag is not None:
            session.flagged = True
            session.flag_reason = flag.reason
            session.flag_ref = flag.ref or (session.trace_ids[0] if session.trace_ids else None)
            session.flag_refs = self.explicit_refs(spans)
        return flag

    def explicit_refs(self, spans: list[SpanRecord]) -> list[str]:
        """Each trace's own incident id (from a rule's ref), in trace order: one conversation can carry several
        incidents, flagged at different turns, and each must become its own scenario, not fold into the first."""
        by_trace: dict[str, list[SpanRecord]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        refs: list[str] = []
        for trace_spans in by_trace.values():
            flag = self.evaluate(trace_spans)
            if flag is not None and flag.ref and flag.ref not in refs:
                refs.append(flag.ref)
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


_DEFAULT: FlagRules | None = None


def default_rules() -> FlagRules:
    """The default rules, compiled once (what `build_session` applies when given none)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = FlagRules()
    return _DEFAULT
