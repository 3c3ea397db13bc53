"""Declarative assertions, the syntax: the trace2test vocabulary (../shared/seeds/trace2test-core.md).

The same assertions live in `scenario.yaml` (`assertions:`, judged on every
replayed run) and in trace2test suites (`wt-otel check`, judged on recorded
traces). Each is evaluated over an `EvidenceView`: server-witnessed calls when
a witness was available, the agent's transcript otherwise, and every detail
names which.

    - type: tool-sequence            # trajectory layer
      mode: exact | ordered-subsequence | contiguous
      tools: [lookup_order, verify_identity, refund]
    - type: tool-arguments           # trajectory layer
      tool: refund
      which: all | any | first | last  # or index: N (0-based, negative from the end); default all
      arguments: {type: object, shape: {order_id: {type: string, regex: "^A-"}}}
    - type: output                   # outcome layer
      tool: lookup_order             # omit for the final reply; which / index as above
      contains: [shipped]            # case-insensitive text checks (tool outputs as JSON text)
      notContains: [refunded]
      match: {type: object, shape: {status: {type: string, equals: shipped}}}
    - type: policy                   # constraint layer
      rule: require-prior-tool
      tool: refund
      requiredTool: verify_identity
      requiredOutput: {type: object, shape: {verified: {type: boolean, equals: true}}}
    - type: policy
      rule: forbid-after
      tool: refund
      afterTool: cancel_order
      afterOutput: {type: any}       # optional: only a matching cancel_order triggers the ban
    - type: policy
      rule: no-divergence            # scenario.yaml only: needs a replay's universe and cassette logs

Matchers (recursive): `any`; `string` (equals / contains / regex); `number`
(equals / min / max); `boolean` (equals); `literal` (value, deep equality);
`array` (items: every item, contains: some item, length); `object` (shape:
key -> matcher, optional: [keys that may be absent]; other keys are allowed);
`optional` (matcher: absent, null, or matching).

Parsing is strict: an unknown key, type, mode or rule is an error naming the
value and its YAML path, never a silently skipped check.

This module is the syntax only (what a parsed assertion or matcher *is*), so
`contracts.scenario` can check `assertions:` without importing the scorer;
`wt_otel.scoring.assertions` evaluates them over a run's evidence.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from wt_otel.contracts.problems import describe, json_path

Loc = tuple[str | int, ...]

SEQUENCE_MODES = ("exact", "ordered-subsequence", "contiguous")
ASSERTION_TYPES = ("tool-sequence", "tool-arguments", "output", "policy")
POLICY_RULES = ("require-prior-tool", "forbid-after", "no-divergence")
MATCHER_TYPES = ("any", "string", "number", "boolean", "literal", "array", "object", "optional")
WHICH = ("all", "any", "first", "last")
LAYER_OF = {"tool-sequence": "trajectory", "tool-arguments": "trajectory", "output": "outcome", "policy": "constraint"}

__all__ = ["ASSERTION_TYPES", "LAYER_OF", "MATCHER_TYPES", "POLICY_RULES", "SEQUENCE_MODES", "WHICH",
           "ArrayMatcher", "Assertion", "AssertionSyntaxError", "BooleanMatcher", "CallSelection", "FieldReader",
           "LiteralMatcher", "Loc", "Matcher", "NumberMatcher", "ObjectMatcher", "OptionalMatcher", "Output",
           "Policy", "StringMatcher", "ToolArguments", "ToolSequence", "parse_assertion", "parse_assertions",
           "parse_matcher", "show"]


class AssertionSyntaxError(ValueError):
    """Assertions that cannot be parsed; `problems` holds (YAML location, message) pairs, every one of them."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"{json_path(loc)}: {msg}" for loc, msg in problems))


def _not_one_of(value: Any, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
    return f"{show(value)} is not one of {', '.join(choices)}" + (f"; did you mean {close[0]!r}?" if close else "")


def show(value: Any, limit: int = 120) -> str:
    """A value as a message quotes it: strings repr'd, the rest as JSON, cut at `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = repr(text) if isinstance(value, str) else text
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- parsing helpers


class FieldReader:
    """Reads one YAML mapping strictly, recording every problem at its path instead of stopping at the first
    (shared with the suite parser in `wt_otel.scoring.check`, so suites and assertions speak with one voice)."""

    def __init__(self, data: dict[str, Any], loc: Loc, problems: list[tuple[Loc, str]], what: str) -> None:
        self.data, self.loc, self.problems, self.what = data, loc, problems, what

    def problem(self, key: str | int | None, message: str) -> None:
        self.problems.append(((*self.loc, key) if key is not None else self.loc, message))

    def allow(self, *keys: str) -> None:
        for key in self.data:
            if key not in keys:
                close = difflib.get_close_matches(str(key), keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.problem(str(key), f"unknown key for {self.what} (known: {', '.join(keys)}){hint}")

    def has(self, key: str) -> bool:
        return key in self.data

    def string(self, key: str, required: bool = True) -> str | None:
        if key not in self.data:
            if required:
                self.problem(key, f"is required in {self.what}")
            return None
        value = self.data[key]
        if isinstance(value, str) and value:
            return value
        self.problem(key, f"must be a non-empty string, {describe(value)}")
        return None

    def choice(self, key: str, choices: Sequence[str], default: str | None = None) -> str | None:
        if key not in self.data:
            if default is None:
                self.problem(key, f"is required in {self.what} (one of {', '.join(choices)})")
            return default
        value = self.data[key]
        if value in choices and isinstance(value, str):
            return value
        self.problem(key, _not_one_of(value, choices))
        return None

    def strings(self, key: str, required: bool = True, single: bool = False) -> list[str]:
        """A list of non-empty strings; with `single`, one bare string is accepted as a list of one."""
        if key not in self.data:
            if required:
                self.problem(key, f"is required in {self.what}")
            return []
        value = self.data[key]
        if single and isinstance(value, str) and value:
            return [value]
        if not isinstance(value, list) or not value:
            self.problem(key, f"must be a non-empty list of strings, {describe(value)}")
            return []
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.problems.append(((*self.loc, key, i), f"must be a non-empty string, {describe(item)}"))
        return [v for v in value if isinstance(v, str) and v]

    def number(self, key: str) -> float | None:
        value = self.data.get(key)
        if key not in self.data:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.problem(key, f"must be a number, {describe(value)}")
            return None
        return value

    def integer(self, key: str, minimum: int | None = None) -> int | None:
        if key not in self.data:
            return None
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
            bound = f" >= {minimum}" if minimum is not None else ""
            self.problem(key, f"must be an integer{bound}, {describe(value)}")
            return None
        return value

    def matcher(self, key: str, required: bool = True) -> Matcher | None:
        if key not in self.data:
            if required:
                self.problem(key, f"is required in {self.what} (a matcher: {{type: {' | '.join(MATCHER_TYPES)}, ...}})")
            return None
        return parse_matcher(self.data[key], (*self.loc, key), self.problems)


def _mapping(data: Any, loc: Loc, problems: list[tuple[Loc, str]], what: str) -> bool:
    if isinstance(data, dict):
        return True
    problems.append((loc, f"{what} must be a mapping, {describe(data)}"))
    return False


# ---------------------------------------------------------------- matchers (checked by scoring.assertions.matchers)


@dataclass(frozen=True)
class Matcher:
    """A recursive matcher, parsed; the base class is `type: any` (matches everything)."""

    kind: ClassVar[str] = "any"


@dataclass(frozen=True)
class StringMatcher(Matcher):
    kind: ClassVar[str] = "string"
    equals: str | None = None
    contains: str | None = None
    regex: re.Pattern[str] | None = None


@dataclass(frozen=True)
class NumberMatcher(Matcher):
    kind: ClassVar[str] = "number"
    equals: float | None = None
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class BooleanMatcher(Matcher):
    kind: ClassVar[str] = "boolean"
    equals: bool | None = None


@dataclass(frozen=True)
class LiteralMatcher(Matcher):
    kind: ClassVar[str] = "literal"
    value: Any = None


@dataclass(frozen=True)
class ArrayMatcher(Matcher):
    kind: ClassVar[str] = "array"
    items: Matcher | None = None
    contains: Matcher | None = None
    length: int | None = None


@dataclass(frozen=True)
class OptionalMatcher(Matcher):
    kind: ClassVar[str] = "optional"
    matcher: Matcher = field(default_factory=Matcher)


@dataclass(frozen=True)
class ObjectMatcher(Matcher):
    kind: ClassVar[str] = "object"
    shape: dict[str, Matcher] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()


_MATCHER_KEYS = {
    "any": ("type",),
    "string": ("type", "equals", "contains", "regex"),
    "number": ("type", "equals", "min", "max"),
    "boolean": ("type", "equals"),
    "literal": ("type", "value"),
    "array": ("type", "items", "contains", "length"),
    "object": ("type", "shape", "optional"),
    "optional": ("type", "matcher"),
}


def parse_matcher(data: Any, loc: Loc, problems: list[tuple[Loc, str]]) -> Matcher | None:
    """One matcher mapping (recursively); problems are appended with their paths, None when unusable."""
    if not _mapping(data, loc, problems, "a matcher"):
        return None
    kind = data.get("type")
    if kind not in MATCHER_TYPES or not isinstance(kind, str):
        problems.append(((*loc, "type"), _not_one_of(kind, MATCHER_TYPES)
                         if "type" in data else f"is required in a matcher (one of {', '.join(MATCHER_TYPES)})"))
        return None
    r = FieldReader(data, loc, problems, f"a {kind} matcher")
    r.allow(*_MATCHER_KEYS[kind])
    before = len(problems)
    matcher: Matcher | None
    if kind == "any":
        matcher = Matcher()
    elif kind == "string":
        matcher = _string_matcher(r)
    elif kind == "number":
        matcher = NumberMatcher(r.number("equals"), r.number("min"), r.number("max"))
    elif kind == "boolean":
        value = data.get("equals")
        if "equals" in data and not isinstance(value, bool):
            r.problem("equals", f"must be a boolean, {describe(value)}")
        matcher = BooleanMatcher(value if isinstance(value, bool) else None)
    elif kind == "literal":
        if "value" not in data:
            r.problem("value", "is required in a literal matcher (the exact JSON value expected)")
        matcher = LiteralMatcher(data.get("value"))
    elif kind == "array":
        matcher = ArrayMatcher(r.matcher("items", False), r.matcher("contains", False), r.integer("length", 0))
    elif kind == "object":
        matcher = _object_matcher(r)
    else:
        inner = r.matcher("matcher")
        matcher = OptionalMatcher(inner) if inner else None
    return matcher if len(problems) == before else None


def _string_matcher(r: FieldReader) -> Matcher:
    for key in ("equals", "contains", "regex"):
        if r.has(key) and not isinstance(r.data[key], str):
            r.problem(key, f"must be a string, {describe(r.data[key])}")
    pattern = None
    if isinstance(r.data.get("regex"), str):
        try:
            pattern = re.compile(r.data["regex"])
        except re.error as exc:
            r.problem("regex", f"is not a valid regular expression: {exc}")
    text = {k: r.data[k] if isinstance(r.data.get(k), str) else None for k in ("equals", "contains")}
    return StringMatcher(text["equals"], text["contains"], pattern)


def _object_matcher(r: FieldReader) -> Matcher:
    shape: dict[str, Matcher] = {}
    raw = r.data.get("shape", {})
    if not isinstance(raw, dict):
        r.problem("shape", f"must be a mapping of key -> matcher, {describe(raw)}")
        raw = {}
    for key, sub in raw.items():
        parsed = parse_matcher(sub, (*r.loc, "shape", str(key)), r.problems)
        if parsed is not None:
            shape[str(key)] = parsed
    optional = r.strings("optional", required=False)
    for i, key in enumerate(optional):
        if key not in raw:
            r.problems.append(((*r.loc, "optional", i), f"{key!r} is not a key of shape"))
    return ObjectMatcher(shape, frozenset(optional))


# ---------------------------------------------------------------- assertions (evaluated by scoring.assertions)


@dataclass(frozen=True)
class Assertion:
    """One parsed assertion: where it was written and which layer it belongs to."""

    type: ClassVar[str] = ""
    loc: Loc

    @property
    def layer(self) -> str:
        return LAYER_OF[self.type]

    @property
    def where(self) -> str:
        return json_path(self.loc)


@dataclass(frozen=True)
class ToolSequence(Assertion):
    type: ClassVar[str] = "tool-sequence"
    mode: str = "exact"
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class CallSelection(Assertion):
    """Selects calls of one tool: all, any, first, last, or an index among that tool's calls."""

    tool: str = ""
    which: str = "all"
    index: int | None = None


@dataclass(frozen=True)
class ToolArguments(CallSelection):
    type: ClassVar[str] = "tool-arguments"
    arguments: Matcher = field(default_factory=Matcher)


@dataclass(frozen=True)
class Output(CallSelection):
    """The final reply (no `tool`) or the selected calls' results, through text checks and a matcher."""

    type: ClassVar[str] = "output"
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    match: Matcher | None = None


@dataclass(frozen=True)
class Policy(Assertion):
    type: ClassVar[str] = "policy"
    rule: str = "require-prior-tool"
    tool: str = ""
    other: str = ""  # requiredTool / afterTool
    other_output: Matcher | None = None  # requiredOutput / afterOutput


# ---------------------------------------------------------------- parsing assertions

_KEYS = {
    "tool-sequence": ("type", "mode", "tools"),
    "tool-arguments": ("type", "tool", "which", "index", "arguments"),
    "output": ("type", "tool", "which", "index", "contains", "notContains", "match"),
    "require-prior-tool": ("type", "rule", "tool", "requiredTool", "requiredOutput"),
    "forbid-after": ("type", "rule", "tool", "afterTool", "afterOutput"),
    "no-divergence": ("type", "rule"),
}


def _selection(r: FieldReader) -> dict[str, Any]:
    index = r.integer("index")
    which = r.choice("which", WHICH, default="all")
    if r.has("index") and r.has("which"):
        r.problem("index", "use either index or which, not both")
    return {"which": which or "all", "index": index}


def parse_assertion(data: Any, loc: Loc, problems: list[tuple[Loc, str]], *, replay: bool = True
                    ) -> Assertion | None:
    """One assertion mapping; `replay=False` (offline suites) rejects rules that need a replayed run."""
    if not _mapping(data, loc, problems, "an assertion"):
        return None
    before = len(problems)
    kind = data.get("type")
    if kind not in ASSERTION_TYPES or not isinstance(kind, str):
        problems.append(((*loc, "type"), _not_one_of(kind, ASSERTION_TYPES)
                         if "type" in data else f"is required (one of {', '.join(ASSERTION_TYPES)})"))
        return None
    r = FieldReader(data, loc, problems, f"a {kind} assertion")
    result: Assertion | None = None
    if kind == "tool-sequence":
        r.allow(*_KEYS[kind])
        mode, tools = r.choice("mode", SEQUENCE_MODES), r.strings("tools")
        result = ToolSequence(loc, mode or "exact", tuple(tools))
    elif kind == "tool-arguments":
        r.allow(*_KEYS[kind])
        tool, sel, matcher = r.string("tool"), _selection(r), r.matcher("arguments")
        result = ToolArguments(loc, tool or "", arguments=matcher or Matcher(), **sel)
    elif kind == "output":
        r.allow(*_KEYS[kind])
        tool = r.string("tool", required=False)
        sel = _selection(r)
        if not tool and (r.has("which") or r.has("index")):
            r.problem("which" if r.has("which") else "index", "selects tool calls: name the tool too")
        contains, not_contains = r.strings("contains", False, True), r.strings("notContains", False, True)
        matcher = r.matcher("match", required=False)
        if not (contains or not_contains or matcher) and len(problems) == before:
            r.problem(None, "an output assertion needs at least one of contains, notContains, match")
        result = Output(loc, tool or "", contains=tuple(contains), not_contains=tuple(not_contains), match=matcher,
                        **sel)
    else:
        result = _parse_policy(r, replay)
    return result if len(problems) == before else None


def _parse_policy(r: FieldReader, replay: bool) -> Assertion | None:
    rule = r.choice("rule", POLICY_RULES)
    if rule is None:
        return None
    r.allow(*_KEYS[rule])
    if rule == "no-divergence":
        if not replay:
            r.problem("rule", "'no-divergence' needs a replayed run's universe and cassette logs: use it in "
                              "scenario.yaml (wt-otel run), not in an offline suite")
        return Policy(r.loc, rule)
    other_key, output_key = ("requiredTool", "requiredOutput") if rule == "require-prior-tool" else \
        ("afterTool", "afterOutput")
    tool, other = r.string("tool"), r.string(other_key)
    return Policy(r.loc, rule, tool or "", other or "", r.matcher(output_key, required=False))


def parse_assertions(data: Any, loc: Loc = ("assertions",), *, replay: bool = True) -> list[Assertion]:
    """A list of assertions, or `AssertionSyntaxError` listing every problem with its YAML path."""
    problems: list[tuple[Loc, str]] = []
    out: list[Assertion] = []
    if not isinstance(data, list):
        problems.append((loc, f"must be a list of assertions, {describe(data)}"))
    else:
        for i, item in enumerate(data):
            parsed = parse_assertion(item, (*loc, i), problems, replay=replay)
            if parsed is not None:
                out.append(parsed)
    if problems:
        raise AssertionSyntaxError(problems)
    return out
