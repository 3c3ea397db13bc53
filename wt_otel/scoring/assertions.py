"""Declarative assertions: the trace2test vocabulary (../shared/seeds/trace2test-core.md).

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
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from wt_otel.contracts.problems import describe, json_path
from wt_otel.contracts.results import LayerResult
from wt_otel.contracts.run import Trace
from wt_otel.scoring.evidence import CallView, EvidenceView

Loc = tuple[str | int, ...]

SEQUENCE_MODES = ("exact", "ordered-subsequence", "contiguous")
ASSERTION_TYPES = ("tool-sequence", "tool-arguments", "output", "policy")
POLICY_RULES = ("require-prior-tool", "forbid-after", "no-divergence")
MATCHER_TYPES = ("any", "string", "number", "boolean", "literal", "array", "object", "optional")
WHICH = ("all", "any", "first", "last")
LAYER_OF = {"tool-sequence": "trajectory", "tool-arguments": "trajectory", "output": "outcome", "policy": "constraint"}

__all__ = ["ASSERTION_TYPES", "LAYER_OF", "MATCHER_TYPES", "POLICY_RULES", "SEQUENCE_MODES", "Assertion",
           "AssertionSyntaxError", "FieldReader", "Matcher", "Output", "Policy", "ToolArguments", "ToolSequence",
           "evaluate", "parse_assertion", "parse_assertions", "parse_matcher"]


class AssertionSyntaxError(ValueError):
    """Assertions that cannot be parsed; `problems` holds (YAML location, message) pairs, every one of them."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"{json_path(loc)}: {msg}" for loc, msg in problems))


def _not_one_of(value: Any, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(value, choices, n=1) if isinstance(value, str) else []
    return f"{_show(value)} is not one of {', '.join(choices)}" + (f"; did you mean {close[0]!r}?" if close else "")


def _show(value: Any, limit: int = 120) -> str:
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


# ---------------------------------------------------------------- matchers


def _same(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, 1 equals 1.0, containers compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _at(where: str, key: str | int) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key


@dataclass(frozen=True)
class Matcher:
    """A recursive matcher; `mismatches(value, where)` lists why `value` (at `where`) does not match."""

    kind: ClassVar[str] = "any"

    def mismatches(self, value: Any, where: str) -> list[str]:
        return []


@dataclass(frozen=True)
class StringMatcher(Matcher):
    kind: ClassVar[str] = "string"
    equals: str | None = None
    contains: str | None = None
    regex: re.Pattern[str] | None = None

    def mismatches(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, str):
            return [f"{where or 'value'}: expected a string, got {_show(value)}"]
        out = []
        if self.equals is not None and value != self.equals:
            out.append(f"{where or 'value'}: expected {_show(self.equals)}, got {_show(value)}")
        if self.contains is not None and self.contains not in value:
            out.append(f"{where or 'value'}: expected a string containing {_show(self.contains)}, got {_show(value)}")
        if self.regex is not None and not self.regex.search(value):
            out.append(f"{where or 'value'}: expected a string matching /{self.regex.pattern}/, got {_show(value)}")
        return out


@dataclass(frozen=True)
class NumberMatcher(Matcher):
    kind: ClassVar[str] = "number"
    equals: float | None = None
    min: float | None = None
    max: float | None = None

    def mismatches(self, value: Any, where: str) -> list[str]:
        w = where or "value"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return [f"{w}: expected a number, got {_show(value)}"]
        out = []
        if self.equals is not None and value != self.equals:
            out.append(f"{w}: expected {self.equals}, got {value}")
        if self.min is not None and value < self.min:
            out.append(f"{w}: expected a number >= {self.min}, got {value}")
        if self.max is not None and value > self.max:
            out.append(f"{w}: expected a number <= {self.max}, got {value}")
        return out


@dataclass(frozen=True)
class BooleanMatcher(Matcher):
    kind: ClassVar[str] = "boolean"
    equals: bool | None = None

    def mismatches(self, value: Any, where: str) -> list[str]:
        w = where or "value"
        if not isinstance(value, bool):
            return [f"{w}: expected a boolean, got {_show(value)}"]
        if self.equals is not None and value is not self.equals:
            return [f"{w}: expected {json.dumps(self.equals)}, got {json.dumps(value)}"]
        return []


@dataclass(frozen=True)
class LiteralMatcher(Matcher):
    kind: ClassVar[str] = "literal"
    value: Any = None

    def mismatches(self, value: Any, where: str) -> list[str]:
        if _same(value, self.value):
            return []
        return [f"{where or 'value'}: expected exactly {_show(self.value)}, got {_show(value)}"]


@dataclass(frozen=True)
class ArrayMatcher(Matcher):
    kind: ClassVar[str] = "array"
    items: Matcher | None = None
    contains: Matcher | None = None
    length: int | None = None

    def mismatches(self, value: Any, where: str) -> list[str]:
        w = where or "value"
        if not isinstance(value, list):
            return [f"{w}: expected an array, got {_show(value)}"]
        out = []
        if self.length is not None and len(value) != self.length:
            out.append(f"{w}: expected {self.length} item(s), got {len(value)}")
        if self.items is not None:
            for i, item in enumerate(value):
                out += self.items.mismatches(item, _at(where, i))
        if self.contains is not None and not any(not self.contains.mismatches(v, "") for v in value):
            out.append(f"{w}: no item matches the `contains` matcher in {_show(value)}")
        return out


@dataclass(frozen=True)
class OptionalMatcher(Matcher):
    kind: ClassVar[str] = "optional"
    matcher: Matcher = field(default_factory=Matcher)

    def mismatches(self, value: Any, where: str) -> list[str]:
        return [] if value is None else self.matcher.mismatches(value, where)


@dataclass(frozen=True)
class ObjectMatcher(Matcher):
    kind: ClassVar[str] = "object"
    shape: dict[str, Matcher] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()

    def mismatches(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, dict):
            return [f"{where or 'value'}: expected an object, got {_show(value)}"]
        out = []
        for key, matcher in self.shape.items():
            if key not in value:
                if key not in self.optional and not isinstance(matcher, OptionalMatcher):
                    out.append(f"{_at(where, key)}: missing (present keys: {', '.join(map(str, value)) or 'none'})")
                continue
            out += matcher.mismatches(value[key], _at(where, key))
        return out


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


# ---------------------------------------------------------------- assertions


@dataclass(frozen=True)
class Assertion:
    """One parsed assertion: its layer, and `evaluate(view, trace)` -> LayerResult."""

    type: ClassVar[str] = ""
    loc: Loc

    @property
    def layer(self) -> str:
        return LAYER_OF[self.type]

    @property
    def where(self) -> str:
        return json_path(self.loc)

    def evaluate(self, view: EvidenceView, trace: Trace | None = None) -> LayerResult:  # pragma: no cover
        raise NotImplementedError

    def _result(self, ok: bool, text: str, view: EvidenceView) -> LayerResult:
        return LayerResult(passed=ok, detail=f"{self.where} {self.type}: {text} ({view.describe()})")


def _is_subsequence(want: list[str], got: list[str]) -> int | None:
    """None when `want` is an ordered subsequence of `got`; else the index in `want` of the first tool not found."""
    it = iter(got)
    for i, name in enumerate(want):
        if not any(name == g for g in it):
            return i
    return None


def _is_contiguous(want: list[str], got: list[str]) -> bool:
    return any(got[i:i + len(want)] == want for i in range(len(got) - len(want) + 1))


@dataclass(frozen=True)
class ToolSequence(Assertion):
    type: ClassVar[str] = "tool-sequence"
    mode: str = "exact"
    tools: tuple[str, ...] = ()

    def evaluate(self, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
        want, got = list(self.tools), view.names
        shown = f"expected {want}, got {got}"
        if self.mode == "exact":
            return self._result(want == got, shown if want != got else f"exactly {got}", view)
        if self.mode == "contiguous":
            ok = _is_contiguous(want, got)
            return self._result(ok, f"{want} {'found' if ok else 'not found'} as a contiguous run in {got}", view)
        missing = _is_subsequence(want, got)
        if missing is None:
            return self._result(True, f"{want} found in order in {got}", view)
        after = f" after {want[missing - 1]!r}" if missing else ""
        return self._result(False, f"{shown}: {want[missing]!r} not found{after} (order matters, gaps allowed)", view)


@dataclass(frozen=True)
class _Selects(Assertion):
    """Selects calls of one tool: all, any, first, last, or an index among that tool's calls."""

    tool: str = ""
    which: str = "all"
    index: int | None = None

    def selected(self, view: EvidenceView) -> tuple[list[tuple[int, CallView]], str | None]:
        calls = list(enumerate(view.of_tool(self.tool)))
        if not calls:
            return [], f"no call of {self.tool!r} (calls: {view.names})"
        if self.index is not None:
            if not -len(calls) <= self.index < len(calls):
                return [], f"no {self.tool!r} call at index {self.index} ({len(calls)} call(s))"
            return [calls[self.index]], None
        if self.which == "first":
            return calls[:1], None
        if self.which == "last":
            return calls[-1:], None
        return calls, None

    def judge(self, view: EvidenceView, check: Any) -> LayerResult:
        """Apply `check(call) -> list of reasons` to the selected calls, honouring all / any."""
        calls, problem = self.selected(view)
        if problem:
            return self._result(False, problem, view)
        failures = [(i, check(c)) for i, c in calls]
        failures = [(i, reasons) for i, reasons in failures if reasons]
        which = f"index {self.index}" if self.index is not None else self.which
        ok = len(failures) < len(calls) if self.which == "any" and self.index is None else not failures
        if ok:
            return self._result(True, f"{self.tool!r} ({which}, {len(calls)} call(s) checked) matches", view)
        shown = "; ".join(f"{self.tool} call #{i}: {', '.join(reasons)}" for i, reasons in failures[:5])
        return self._result(False, shown, view)


@dataclass(frozen=True)
class ToolArguments(_Selects):
    type: ClassVar[str] = "tool-arguments"
    arguments: Matcher = field(default_factory=Matcher)

    def evaluate(self, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
        return self.judge(view, lambda call: self.arguments.mismatches(call.args, "arguments"))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _text_checks(text: str, contains: tuple[str, ...], not_contains: tuple[str, ...], where: str) -> list[str]:
    low = text.lower()
    out = [f"{where} does not contain {c!r}" for c in contains if c.lower() not in low]
    out += [f"{where} contains {c!r}" for c in not_contains if c.lower() in low]
    return out


@dataclass(frozen=True)
class Output(_Selects):
    """The final reply (no `tool`) or the selected calls' results, through text checks and a matcher."""

    type: ClassVar[str] = "output"
    contains: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    match: Matcher | None = None

    def _check(self, value: Any, where: str) -> list[str]:
        reasons = _text_checks(_text(value), self.contains, self.not_contains, where)
        if self.match is not None:
            reasons += self.match.mismatches(value, where)
        return reasons

    def evaluate(self, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
        if not self.tool:
            reasons = self._check(view.final_reply, "the final reply")
            if reasons:
                return self._result(False, "; ".join(reasons) + f" (final reply: {_show(view.final_reply)})", view)
            return self._result(True, "the final reply matches", view)

        def check(call: CallView) -> list[str]:
            if not call.has_result:
                return ["the evidence holds no result for it (transcript calls report no results)"]
            return self._check(call.result, "output")

        return self.judge(view, check)


def _output_ok(call: CallView, matcher: Matcher | None) -> bool:
    return matcher is None or (call.has_result and not matcher.mismatches(call.result, ""))


@dataclass(frozen=True)
class Policy(Assertion):
    type: ClassVar[str] = "policy"
    rule: str = "require-prior-tool"
    tool: str = ""
    other: str = ""  # requiredTool / afterTool
    other_output: Matcher | None = None  # requiredOutput / afterOutput

    def evaluate(self, view: EvidenceView, trace: Trace | None = None) -> LayerResult:
        if self.rule == "no-divergence":
            from wt_otel.scoring.scorers import no_divergence

            if trace is None:
                return self._result(False, "no-divergence needs a replayed run (wt-otel run)", view)
            result = no_divergence()(trace)
            return self._result(result.passed, result.detail, view)
        names = view.names
        if self.rule == "require-prior-tool":
            return self._require_prior(view, names)
        return self._forbid_after(view, names)

    def _needs_results(self, view: EvidenceView) -> str:
        if self.other_output is not None and view.calls and not any(c.has_result for c in view.calls):
            return " (the transcript carries no tool results, so no output could match)"
        return ""

    def _require_prior(self, view: EvidenceView, names: list[str]) -> LayerResult:
        guarded = [i for i, n in enumerate(names) if n == self.tool]
        if not guarded:
            return self._result(True, f"{self.tool!r} was not called, so nothing required {self.other!r}", view)
        qualifying = [i for i, c in enumerate(view.calls) if c.name == self.other and _output_ok(c, self.other_output)]
        what = f"{self.other!r}" + (" with a matching output" if self.other_output else "")
        bad = [i for i in guarded if not any(q < i for q in qualifying)]
        if bad:
            return self._result(False, f"{self.tool!r} at position {bad[0]} in {names} has no prior {what}"
                                + self._needs_results(view), view)
        return self._result(True, f"every {self.tool!r} call follows {what}", view)

    def _forbid_after(self, view: EvidenceView, names: list[str]) -> LayerResult:
        trigger = next((i for i, c in enumerate(view.calls)
                        if c.name == self.other and _output_ok(c, self.other_output)), None)
        what = f"{self.other!r}" + (" with a matching output" if self.other_output else "")
        if trigger is None:
            return self._result(True, f"no {what} call, so {self.tool!r} was never forbidden", view)
        late = [i for i, n in enumerate(names) if n == self.tool and i > trigger]
        if late:
            return self._result(False, f"{self.tool!r} at position {late[0]} follows {what} at position {trigger} "
                                       f"in {names}", view)
        return self._result(True, f"no {self.tool!r} after {what} (position {trigger})", view)


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


def evaluate(assertions: Sequence[Assertion], view: EvidenceView, trace: Trace | None = None
             ) -> list[tuple[Assertion, LayerResult]]:
    """Every assertion over one view; an assertion that raises is a failure naming the exception."""
    out = []
    for a in assertions:
        try:
            out.append((a, a.evaluate(view, trace)))
        except Exception as exc:  # a bug here must not hide the other assertions' verdicts
            out.append((a, LayerResult(passed=False, detail=f"{a.where} {a.type}: raised {type(exc).__name__}: "
                                                            f"{exc}")))
    return out
