"""Outcome scorers: small functions from a Trace to a LayerResult, and ways to combine them.

Scoring judges outcomes first (0001-trace-reseeding.md, Change 2): exact tool
sequences diverge on every rerun, the final answer and the provenance of its
claims need not. Everything here is pure Python with no model client: the
LLM judge takes a bring-your-own `generate_fn(prompt) -> str`.

Two rules hold for every scorer built here:

- a scorer never crashes the run it scores: `run_scorer` turns an exception
  into a failed LayerResult naming it, and `all_of` / `any_of` use it for
  every child;
- a detail says what was looked at ("server-witnessed tool results",
  "transcript tool results", "the final reply"), so a PASS can be weighed.

A scenario's `scorer.py` uses them like this::

    from wt_otel.scorers import all_of, forbidden_facts, substantiated_by_tools, target_facts

    outcome = all_of(target_facts([["ops@bluewing.example"]]), forbidden_facts(["refund issued"]),
                     substantiated_by_tools())
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from decimal import Decimal, InvalidOperation
from typing import Any

from wt_otel.contracts.results import LayerResult
from wt_otel.contracts.run import Trace
from wt_otel.scoring.evidence import EvidenceView, from_trace
from wt_otel.scoring.names import AUTO_REPLAY_SCORERS  # re-exported: the public path

Scorer = Callable[[Trace], LayerResult]
GenerateFn = Callable[[str], str]

__all__ = ["AUTO_REPLAY_SCORERS", "NEGATION_WINDOW", "OBSERVATION_SOURCES", "UNIT_WINDOW", "GenerateFn", "Scorer",
           "all_of", "any_of", "as_layer_result", "constraint_capture",
           "find_numbers", "forbidden_facts", "is_asserted", "judge_prompt",
           "llm_judge", "no_divergence", "observation", "parse_judgement", "run_scorer", "substantiated_by_tools",
           "substantiation", "target_facts", "target_numbers", "walk_path"]

MAX_SHOWN = 200  # characters of a value quoted in a detail



def _short(value: Any, limit: int = MAX_SHOWN) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


# ---------------------------------------------------------------- running and combining


def as_layer_result(value: Any, name: str = "scorer") -> LayerResult:
    """Accept what a hand-written scorer returns: a LayerResult, `(passed, detail)` or a bare bool.

    The scorer.py stub written by `wt-otel import` returns a tuple; library
    scorers return LayerResults. Anything else is a failure that says so.
    """
    if isinstance(value, LayerResult):
        return value
    if isinstance(value, bool):
        return LayerResult(passed=value, detail="" if value else f"{name} returned False")
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
        return LayerResult(passed=value[0], detail=str(value[1] or ""))
    return LayerResult(passed=False, detail=f"{name} returned {_short(repr(value), 80)}; return a LayerResult, "
                                            "(passed, detail) or a bool")


def run_scorer(fn: Callable[[Trace], Any], trace: Trace, name: str | None = None) -> LayerResult:
    """Call a scorer; an exception is a failure whose detail names it, never a crash of the sweep."""
    name = name or _name(fn)
    try:
        return as_layer_result(fn(trace), name)
    except Exception as exc:  # a scorer is user code: anything may escape it
        return LayerResult(passed=False, detail=f"{name} raised {type(exc).__name__}: {exc}")


def all_of(*fns: Callable[[Trace], Any]) -> Scorer:
    """Pass when every child passes. Every child runs (one run shows every broken fact at once);
    the failure detail joins the failing children's details with '; '."""

    def score(trace: Trace) -> LayerResult:
        results = [run_scorer(fn, trace) for fn in fns]
        failed = [r.detail or f"{_name(fn)} failed" for fn, r in zip(fns, results, strict=True) if not r.passed]
        if failed:
            return LayerResult(passed=False, detail="; ".join(failed))
        return LayerResult(passed=True, detail="; ".join(r.detail for r in results if r.detail))

    score.__name__ = "all_of"
    return score


def any_of(*fns: Callable[[Trace], Any]) -> Scorer:
    """Pass when one child passes. Every child runs, and the detail reports each ("[PASS] ... | [FAIL] ..."),
    so a passing alternative never hides what the others found.

    A constraint predicate given as an alternative (`any_of(no_divergence(), X)`) is judged here on its real
    result: an alternative cannot be split into another layer, and no_divergence's placeholder pass inside
    an outcome would otherwise make the whole any_of pass on a divergent run without looking at X.
    """

    def score(trace: Trace) -> LayerResult:
        results = []
        for fn in fns:
            with constraint_capture() as diverted:
                result = run_scorer(fn, trace)
            if diverted:
                result = _with_diverted(result, diverted)
            results.append(result)
        lines = [f"[{'PASS' if r.passed else 'FAIL'}] {r.detail or _name(fn)}" for fn, r in
                 zip(fns, results, strict=True)]
        won = sum(r.passed for r in results)
        if won:
            return LayerResult(passed=True, detail=f"any_of: {won}/{len(fns)} alternative(s) passed: "
                                                   + " | ".join(lines))
        return LayerResult(passed=False, detail="none of the alternatives passed: " + " | ".join(lines))

    score.__name__ = "any_of"
    return score


def _with_diverted(result: LayerResult, diverted: Sequence[LayerResult]) -> LayerResult:
    """A child's own result joined with the constraint results it reported (they decide it as much as it does)."""
    parts = [r.detail for r in diverted if r.detail] + ([result.detail] if result.detail else [])
    return LayerResult(passed=result.passed and all(r.passed for r in diverted), detail="; ".join(parts))


# ---------------------------------------------------------------- observation (state assertions)

OBSERVATION_SOURCES = ("final_reply", "turns", "mcp_calls", "llm_calls", "surface", "trace")
_STEP = re.compile(r'\[(-?\d+)\]|\["((?:[^"\\]|\\.)*)"\]|\.?([^.\[\]"]+)')


def _steps(path: str) -> list[str | int]:
    steps: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _STEP.match(path, pos)
        if not m or m.end() == pos:
            raise ValueError(f"bad path {path!r} at character {pos}: use keys and indexes like a.b[0].c or "
                             '["key.with.dots"]')
        index, quoted, key = m.groups()
        steps.append(int(index) if index is not None else json.loads(f'"{quoted}"') if quoted is not None else key)
        pos = m.end()
    return steps


def walk_path(value: Any, path: str) -> Any:
    """Follow `a.b[0].c` (or `[-1].result["x.y"]`) into nested dicts and lists; KeyError names the failing step."""
    here = ""
    for step in _steps(path):
        if isinstance(step, int):
            if not isinstance(value, list) or not -len(value) <= step < len(value):
                size = f"a list of {len(value)}" if isinstance(value, list) else type(value).__name__
                raise KeyError(f"{here or 'the value'}[{step}] does not exist ({size})")
            value = value[step]
            here += f"[{step}]"
        else:
            if not isinstance(value, dict) or step not in value:
                keys = f"keys: {', '.join(map(str, list(value)[:10]))}" if isinstance(value, dict) else \
                    type(value).__name__
                raise KeyError(f"{(here + '.') if here else ''}{step} does not exist ({keys})")
            value = value[step]
            here += f".{step}" if here else step
    return value


def _source(trace: Trace, source: str) -> Any:
    if source == "final_reply":
        return trace.turns[-1].reply if trace.turns else ""
    if source in ("turns", "mcp_calls", "llm_calls"):
        return [item.model_dump(mode="json") for item in getattr(trace, source)]
    if source == "surface":
        return trace.surface.model_dump(mode="json") if trace.surface else None
    if source == "trace":
        return trace.model_dump(mode="json")
    observations = trace.observations
    if not isinstance(observations, dict) or source not in observations:
        known = ", ".join(OBSERVATION_SOURCES)
        have = ", ".join(observations) if isinstance(observations, dict) and observations else "none"
        raise KeyError(f"no observation {source!r} in the trace (built-in sources: {known}; trace observations: "
                       f"{have})")
    return observations[source]


def observation(source: str, path: str, predicate: Callable[[Any], bool], label: str | None = None) -> Scorer:
    """Read a value out of the run and test it: the artifact-grading pattern.

    `source` is one of OBSERVATION_SOURCES, read from the Trace:
      final_reply - the last turn's reply (a string; a non-empty `path` parses it as JSON first),
      turns / mcp_calls / llm_calls - those lists as JSON (e.g. `mcp_calls`, `[0].result.email`),
      surface - the /wt/surface probe, trace - the whole trace document;
    any other name is looked up in the trace's `observations` object: `universe` (filled by
    `wt-otel run`: per-tool end state and the writes, `wt_otel.replay.observations`), and whatever
    else the code that wrote the trace put there (say a database row: `observations: {db: {...}}`).
    `path` is dotted keys and [indexes] (`a.b[0].c`, `[-1]`, `["key.with.dots"]`); "" is the value itself.
    A missing path or a raising predicate is a failure naming it.
    """
    _steps(path)  # a malformed path is a programming error: say so when the scorer is built
    label = label or f"{source}{'.' if path and not path.startswith('[') else ''}{path}"

    def score(trace: Trace) -> LayerResult:
        try:
            value = _source(trace, source)
            if path and source == "final_reply" and isinstance(value, str):
                value = json.loads(value)
            value = walk_path(value, path) if path else value
        except (KeyError, ValueError) as exc:
            reason = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            return LayerResult(passed=False, detail=f"{label}: {reason}")
        try:
            ok = bool(predicate(value))
        except Exception as exc:  # user predicate
            return LayerResult(passed=False, detail=f"{label}: the predicate raised {type(exc).__name__}: {exc} "
                                                    f"on {_short(value)}")
        return LayerResult(passed=ok, detail=f"{label}: {'holds' if ok else 'does not hold'} for {_short(value)}")

    score.__name__ = f"observation({label})"
    return score


# ---------------------------------------------------------------- LLM judge

JUDGE_INSTRUCTIONS = ("Reply with PASS or FAIL as the first word of your first line, then one short line "
                      "saying why. Judge only by the rubric and the evidence above.")
MAX_EVIDENCE_CHARS = 2000


def judge_prompt(rubric: str, view: EvidenceView) -> str:
    """Rubric, the user's turns, the final answer and the tool evidence, each delimited, then the verdict format."""
    turns = "\n".join(f"{i}. {t}" for i, t in enumerate(view.user_turns, 1)) or "(none recorded)"
    if view.source == "none":
        evidence = "(no tool was called)"
    else:
        evidence = "\n".join(f"- {c.name}({_short(c.args, 500)}) -> "
                             f"{_short(c.result, MAX_EVIDENCE_CHARS) if c.has_result else '(result not recorded)'}"
                             for c in view.calls)
    which = "server-witnessed" if view.source == "witnessed" else "reported by the agent itself"
    return (f"You are grading one run of an AI agent against a rubric.\n\n"
            f"## Rubric\n{rubric.strip()}\n\n## What the user said\n{turns}\n\n"
            f"## The agent's final answer\n<<<\n{view.final_reply}\n>>>\n\n"
            f"## Tool calls and results ({which})\n{evidence}\n\n{JUDGE_INSTRUCTIONS}\n")


def parse_judgement(text: str) -> bool | None:
    """PASS -> True, FAIL -> False, anything else -> None.

    Strict on purpose: the first word of the first non-empty line, after
    markdown emphasis and a trailing ':' '.' ',' '!' or '-' are stripped, must
    be PASS or FAIL (any case). "Passed", "Yes" or a verdict on line two is a
    parse failure, because a judge that does not follow the format cannot be trusted
    to have followed the rubric either.
    """
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    words = line.split()
    if not words:
        return None
    word = words[0].strip("*_`#:.,!-").upper()
    return {"PASS": True, "FAIL": False}.get(word)


def llm_judge(rubric: str, generate_fn: GenerateFn) -> Scorer:
    """Grade the run with a model you bring: `generate_fn(prompt) -> str` (the replay's GenerateFn seam).

    The harness assembles the prompt (`judge_prompt`), parses the answer
    strictly (`parse_judgement`) and treats an unparseable answer or a raising
    `generate_fn` as a failure, with the raw response in the detail.
    """

    def score(trace: Trace) -> LayerResult:
        prompt = judge_prompt(rubric, from_trace(trace))
        try:
            raw = generate_fn(prompt)
        except Exception as exc:  # the user's model client
            return LayerResult(passed=False, detail=f"llm_judge: generate_fn raised {type(exc).__name__}: {exc}")
        raw = raw if isinstance(raw, str) else str(raw)
        verdict = parse_judgement(raw)
        if verdict is None:
            return LayerResult(passed=False, detail="llm_judge: the judge's answer does not start with PASS or FAIL; "
                                                    f"raw response: {_short(raw, 500)!r}")
        reason = " ".join(raw.strip().split())
        return LayerResult(passed=verdict, detail=f"llm_judge: {_short(reason, 300)}")

    score.__name__ = "llm_judge"
    return score


# ---------------------------------------------------------------- facts and numbers in text

NEGATION_WINDOW = 3  # words before a fact, within its sentence, that may negate it
UNIT_WINDOW = 12  # characters on either side of a number where its unit must appear
_NEGATIONS = {"not", "no", "never", "without", "nor", "neither", "cannot", "none"}
_SENTENCE_END = re.compile(r"[.!?;\n]")
_WORD = re.compile(r"[\w'’]+")
_NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w])")


def _occurrences(text: str, fact: str) -> Iterable[re.Match[str]]:
    """Case-insensitive matches of `fact`, word-bounded at an edge that is a word character
    (so "art" is not found in "start", while "$5" still matches at "$5")."""
    left = r"(?<!\w)" if fact[:1].isalnum() else ""
    right = r"(?!\w)" if fact[-1:].isalnum() else ""
    return re.finditer(left + re.escape(fact) + right, text, re.IGNORECASE)


def _contains(text: str, fact: str) -> bool:
    return any(True for _ in _occurrences(text, fact))


def _negated(text: str, start: int) -> bool:
    sentence_start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, start)), default=0)
    before = _WORD.findall(text[sentence_start:start])[-NEGATION_WINDOW:]
    return any(w.lower() in _NEGATIONS or w.lower().endswith(("n't", "n’t")) for w in before)


def is_asserted(text: str, fact: str) -> bool:
    """Does `text` state `fact`? An occurrence counts unless one of the NEGATION_WINDOW (3) words before
    it, in the same sentence, is a negation (not, no, never, without, nor, neither, cannot, none, *n't):
    "the refund was not approved" does not assert "approved"; "not only that, it was approved" does."""
    return any(not _negated(text, m.start()) for m in _occurrences(text, fact))


def find_numbers(text: str) -> list[tuple[Decimal, int, int]]:
    """Word-bounded numbers in `text` with their spans: "1,200.50" -> 1200.50; digits inside words
    ("A-1" is fine, "x86" is not a number) are skipped; a '-' directly before makes it negative."""
    out = []
    for m in _NUMBER.finditer(text):
        raw = m.group(1).replace(",", "") + (m.group(2) or "")
        try:
            value = Decimal(raw)
        except InvalidOperation:  # pragma: no cover - the pattern only admits digits
            continue
        start = m.start()
        if start and text[start - 1] in "-−" and (start == 1 or not text[start - 2].isalnum()):
            value, start = -value, start - 1
        out.append((value, start, m.end()))
    return out


def _as_number(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"not a number: {value!r}")
    return Decimal(str(value).replace(",", ""))


def _groups(facts: Sequence[str | Sequence[str]]) -> list[list[str]]:
    groups = [[f] if isinstance(f, str) else list(f) for f in facts]
    bad = [g for g in groups if not g or not all(isinstance(f, str) and f for f in g)]
    if bad:
        raise ValueError(f"facts must be non-empty strings or non-empty lists of them, got {bad[0]!r}")
    return groups


def _show_group(group: list[str]) -> str:
    return " or ".join(repr(f) for f in group)


def target_facts(facts: Sequence[str | Sequence[str]]) -> Scorer:
    """Every group must appear in the final reply: an AND of OR-groups, case-insensitive.

    `target_facts(["ops@bluewing.example", ["+1-555-0100", "555 0100"]])`: the
    e-mail, and either spelling of the phone number.
    """
    groups = _groups(facts)

    def score(trace: Trace) -> LayerResult:
        reply = from_trace(trace).final_reply
        missing = [g for g in groups if not any(_contains(reply, f) for f in g)]
        if missing:
            return LayerResult(passed=False, detail="the final reply misses " + ", ".join(map(_show_group, missing)))
        return LayerResult(passed=True, detail=f"the final reply states all {len(groups)} required fact(s)")

    score.__name__ = "target_facts"
    return score


def forbidden_facts(facts: Sequence[str]) -> Scorer:
    """None of `facts` may be asserted in the final reply (negation-aware, see `is_asserted`)."""
    facts = [f for g in _groups(facts) for f in g]

    def score(trace: Trace) -> LayerResult:
        reply = from_trace(trace).final_reply
        stated = [f for f in facts if is_asserted(reply, f)]
        if stated:
            return LayerResult(passed=False, detail="the final reply asserts forbidden fact(s): "
                                                    + ", ".join(map(repr, stated)))
        return LayerResult(passed=True, detail=f"the final reply asserts none of {len(facts)} forbidden fact(s)")

    score.__name__ = "forbidden_facts"
    return score


def _number_near_unit(text: str, target: Decimal, unit: str | None) -> bool:
    for value, start, end in find_numbers(text):
        if value != target:
            continue
        if unit is None:
            return True
        window = text[max(0, start - UNIT_WINDOW): end + UNIT_WINDOW]
        if _contains(window, unit):
            return True
    return False


def target_numbers(numbers: Iterable[Any], unit: str | None = None) -> Scorer:
    """Every number must appear in the final reply, word-bounded ("5" is not in "15" or "1.5"),
    compared by value ("1,200" equals 1200, "2.50" equals 2.5). With a unit (for all numbers,
    or per number as `(value, unit)`), the unit must appear within UNIT_WINDOW (12) characters
    before or after that number: "$ 40", "40 USD", "40%".
    """
    wanted: list[tuple[Decimal, str | None, Any]] = []
    for item in numbers:
        value, item_unit = item if isinstance(item, tuple) else (item, unit)
        wanted.append((_as_number(value), item_unit, value))

    def score(trace: Trace) -> LayerResult:
        reply = from_trace(trace).final_reply
        missing = [f"{shown}{f' ({u} nearby)' if u else ''}" for value, u, shown in wanted
                   if not _number_near_unit(reply, value, u)]
        if missing:
            return LayerResult(passed=False, detail="the final reply misses number(s): " + ", ".join(missing))
        return LayerResult(passed=True, detail=f"the final reply states all {len(wanted)} number(s)")

    score.__name__ = "target_numbers"
    return score


# ---------------------------------------------------------------- provenance


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def substantiation(view: EvidenceView, facts: Sequence[str] | None = None) -> LayerResult:
    """Are the final answer's claims found in tool results? (The body of `substantiated_by_tools`.)

    Claims: with `facts`, those of them the answer states (a fact the answer
    does not state is no claim; `target_facts` checks presence); without, every
    number in the answer that the user did not say first. Evidence: results of
    server-witnessed calls, else transcript tool results; a `fail_call` answer
    echoes the agent's own arguments and is never evidence.
    """
    reply = view.final_reply
    if facts is not None:
        claims = [f for f in (f for g in _groups(facts) for f in g) if _contains(reply, f)]
        kind = "fact(s)"
    else:
        said = {v for t in view.user_turns for v, _, _ in find_numbers(t)}
        claims = list(dict.fromkeys(str(v) for v, _, _ in find_numbers(reply) if v not in said))
        kind = "number(s)"
    if not claims:
        return LayerResult(passed=True, detail=f"no {kind} claimed in the final answer: nothing to substantiate")
    usable = [c for c in view.calls if c.has_result and not c.is_fail_call_echo]
    echoes = sum(1 for c in view.calls if c.is_fail_call_echo)
    where = "server-witnessed tool results" if view.source == "witnessed" else \
        "transcript tool results (the agent's own account; no server witness was available)"
    ignored = f"; {echoes} fail_call echo(es) of the agent's own arguments ignored" if echoes else ""
    if not usable:
        why = ("no tool was called" if view.source == "none" else
               "the transcript carries no tool results (Contract C reports calls, not results) and no server "
               "witness was available" if view.source == "transcript" else "no witnessed call returned a result")
        return LayerResult(passed=False, detail=f"unsubstantiated: {len(claims)} {kind} claimed "
                                                f"({', '.join(map(repr, claims[:10]))}) but {why}{ignored}")
    texts = [_text(c.result) for c in usable]
    if facts is not None:
        missing = [f for f in claims if not any(_contains(t, f) for t in texts)]
    else:
        found = {v for t in texts for v, _, _ in find_numbers(t)}
        missing = [c for c in claims if Decimal(c) not in found]
    tools = ", ".join(dict.fromkeys(c.name for c in usable))
    if missing:
        return LayerResult(passed=False, detail=f"unsubstantiated: {', '.join(map(repr, missing))} "
                                                f"in the final answer but in none of {len(usable)} {where} "
                                                f"({tools}){ignored}")
    return LayerResult(passed=True, detail=f"substantiated: {len(claims)} {kind} found in {where} ({tools}){ignored}")


def substantiated_by_tools(facts: Sequence[str] | None = None) -> Scorer:
    """The answer cites what the tools returned, not facts from nowhere (see `substantiation`)."""

    def score(trace: Trace) -> LayerResult:
        return substantiation(from_trace(trace), facts)

    score.__name__ = "substantiated_by_tools"
    return score


# ---------------------------------------------------------------- divergence (constraint)


# While an outcome scorer runs (`layers.outcome_layer`), constraint-layer predicates called inside it
# (however nested: all_of, any_of, a hand-written outcome() calling them) report here instead of into
# the outcome, so they count in the constraint layer the spec puts them in.
_CONSTRAINT_SINK: ContextVar[list[LayerResult] | None] = ContextVar("wt_constraint_sink", default=None)


@contextlib.contextmanager
def constraint_capture() -> Iterator[list[LayerResult]]:
    """Collect the constraint-layer results of the scorers run inside the block."""
    sink: list[LayerResult] = []
    token = _CONSTRAINT_SINK.set(sink)
    try:
        yield sink
    finally:
        _CONSTRAINT_SINK.reset(token)


def no_divergence() -> Scorer:
    """The run stayed inside the recording: no universe miss and no LLM cassette miss.

    A constraint-layer check: "stayed inside the recording" is a property of the path, not of the answer.
    Called from a scenario's `outcome` scorer, its result counts in the constraint layer (and puts
    constraint in that run's gate); the outcome sees a pass that says so.
    """

    def score(trace: Trace) -> LayerResult:
        result = _divergence(trace)
        sink = _CONSTRAINT_SINK.get()
        if sink is None:
            return result
        sink.append(result)
        return LayerResult(passed=True, detail="")

    score.__name__ = "no_divergence"
    return score


def _divergence(trace: Trace) -> LayerResult:
    tools = [f"{c.tool_name}({_short(c.args, 80)}) -> {c.match}" for c in trace.mcp_calls if c.divergence]
    llm = [c for c in trace.llm_calls if c.match == "miss"]
    if not tools and not llm:
        return LayerResult(passed=True, detail="no divergence: every tool call and model request was recorded")
    parts = []
    if tools:
        parts.append(f"{len(tools)} tool call(s) matched no recording: {', '.join(tools[:5])}")
    if llm:
        at = (llm[0].divergence or {}).get("at")
        parts.append(f"{len(llm)} model request(s) matched no cassette recording"
                     + (f" (the first differed at {at})" if at else ""))
    return LayerResult(passed=False, detail="divergence: " + "; ".join(parts))
