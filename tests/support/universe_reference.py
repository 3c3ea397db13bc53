"""The universe engine as it was before the lean lookup engine (issue 15): the oracle of the equivalence test.

A verbatim copy of `RecordedUniverse` at commit 70d84eb (one lock around everything, str canonical keys, a
log of dicts), kept only so tests/unit/replay/test_universe_equivalence.py and
tests/fuzz/test_universe_equivalence.py can show the new engine answers every call identically: same answers,
same divergence evidence, same call log (`assert_same`). Not used by the package.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from wt_otel._util.clock import epoch_ms
from wt_otel.contracts.perturbation import DEFAULT_ERROR, Perturbation
from wt_otel.contracts.universe import Recording, Universe, UniverseTool
from wt_otel.model.parts import canonical_json
from wt_otel.replay.universe import (
    NO_RECORDED_RESULT,
    Answer,
    RecordedUniverse,
    SynthesizeHook,
    _flat_args,
    empty_result,
)

log = logging.getLogger("wt_otel.replay.universe")


def _fail(tool: str, args: dict[str, Any], detail: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"error": NO_RECORDED_RESULT, "tool": tool, "args": args}
    if detail:
        out["detail"] = detail
    return out


def _recorded_error_result(rec: Recording) -> Any:
    if rec.result is not None:
        return rec.result
    return rec.error if isinstance(rec.error, str) and rec.error else "the recorded call failed"


def _pairs(args: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    return frozenset((k, canonical_json(v)) for k, v in args.items())


class _ToolIndex:
    """Per-tool lookup tables, built once: canonical args -> recording indices (in recording order)."""

    def __init__(self, tool: UniverseTool | None, arg_keys: list[str] | None) -> None:
        self.tool = tool
        self.arg_keys = arg_keys or []
        self.exact: dict[str, list[int]] = {}
        self.keyed: dict[str, list[int]] = {}
        self.order: list[int] = []  # every recording of this tool, for `nearest`
        self.pairs: dict[int, frozenset[tuple[str, str]]] = {}

    def add(self, index: int, args: dict[str, Any]) -> None:
        self.order.append(index)
        self.exact.setdefault(canonical_json(args), []).append(index)
        key = self.keyed_key(args)
        if key is not None:
            self.keyed.setdefault(key, []).append(index)

    def keyed_key(self, args: Mapping[str, Any]) -> str | None:
        """Canonical projection on `arg_keys`; None when the call carries none of them.

        An empty projection would make every call "match" every recording that
        also lacks the keys: that is agreement on nothing, so it is a miss.
        """
        if not self.arg_keys:
            return None
        projected = {k: args[k] for k in self.arg_keys if k in args}
        return canonical_json(projected) if projected else None


class ReferenceUniverse:
    """A Contract B universe you can call: `call(tool, args) -> Answer`, with a call log.

    Stateless by default: the same query always gets the same answer, so an
    agent's retry is a hit, not a divergence. Tools with `mode: sequence`
    consume each recording once per run (among the recordings that match, in
    recording order; exhausted means miss). `reset()` starts a new run.

    Thread-safe: an MCP server answers on its event loop while a runner reads
    the log from another thread.
    """

    def __init__(
        self,
        universe: Universe,
        synthesize: SynthesizeHook | None = None,
        on_call: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.universe = universe
        self.synthesize = synthesize
        self.on_call = on_call
        self.perturbation: Perturbation | None = None  # set for a robustness run; `reset()` keeps it
        self._lock = threading.Lock()
        self._log: list[dict[str, Any]] = []
        self._consumed: set[int] = set()
        self._tools = {t.name: t for t in universe.tools}
        self._index: dict[str, _ToolIndex] = {
            t.name: _ToolIndex(t, universe.matching.arg_keys.get(t.name)) for t in universe.tools
        }
        # what each recording answers, resolved once: the hot path touches no pydantic attributes
        self._answers: list[tuple[Any, bool]] = []
        for i, rec in enumerate(universe.recordings):
            self._index[rec.tool_name].add(i, rec.args)
            self._answers.append((_recorded_error_result(rec), True) if rec.error else (rec.result, False))

    # ------------------------------------------------------------ answering

    def policy_for(self, tool: str) -> str:
        m = self.universe.matching
        return m.per_tool_on_miss.get(tool, m.on_miss)

    def call(self, tool: str, args: Mapping[str, Any] | str | None = None) -> Answer:
        """Answer one call and append it to the call log.

        `args` is the flat arguments object; a JSON-encoded object string (the
        OpenAI wire shape) is decoded first, since lookup keys must be canonical
        whichever shape the traffic arrived in.
        """
        flat = _flat_args(args)
        with self._lock:
            answer = self._answer(tool, flat)
            perturbed = self._perturbed(tool, answer)
            entry = self._record(tool, flat, perturbed or answer)
            if perturbed is not None and self.perturbation is not None:
                entry.setdefault("extra", {})["perturbation"] = self.perturbation.to_dict()
            answer = perturbed or answer
        if answer.divergence is not None:
            log.warning("universe_divergence: tool=%s policy=%s", tool, answer.divergence["policy"])
        if self.on_call is not None:
            self.on_call(entry)
        return answer

    def _perturbed(self, tool: str, answer: Answer) -> Answer | None:
        """A robustness run's answer in place of the recorded one (error, empty); None when unperturbed.
        `slow` keeps the answer: the MCP server waits `delay_for(tool)` before sending it."""
        p = self.perturbation
        if p is None or not p.applies_to(tool):
            return None
        if p.kind == "error":
            return Answer({"error": p.message or DEFAULT_ERROR, "tool": tool}, True, answer.match, answer.recording,
                          answer.divergence)
        if p.kind == "empty":
            idx = self._index.get(tool)
            schema = idx.tool.result_schema if idx is not None and idx.tool is not None else None
            return Answer(empty_result(schema), False, answer.match, answer.recording, answer.divergence)
        return replace(answer)  # slow: same answer, marked in the log

    def delay_for(self, tool: str) -> float:
        """Seconds to wait before answering `tool` (a `slow` perturbation), else 0."""
        p = self.perturbation
        return p.delay if p is not None and p.kind == "slow" and p.applies_to(tool) else 0.0

    def _answer(self, tool: str, args: dict[str, Any]) -> Answer:
        idx = self._index.get(tool)
        if idx is None:
            return self._fallback(tool, args, self.policy_for(tool), f"tool {tool!r} is not in the universe")
        sequence = idx.tool is not None and idx.tool.mode == "sequence"
        hit = self._first(idx.exact.get(canonical_json(args)), sequence)
        if hit is not None:
            return self._hit(hit, "exact", sequence)
        key = idx.keyed_key(args)
        hit = self._first(idx.keyed.get(key) if key is not None else None, sequence)
        if hit is not None:
            return self._hit(hit, "keyed", sequence)
        return self._miss(tool, args, self.policy_for(tool), idx, sequence)

    def _first(self, candidates: list[int] | None, sequence: bool) -> int | None:
        """The first candidate still available: any for stateless tools, unconsumed for sequence ones."""
        if not candidates:
            return None
        if not sequence:
            return candidates[0]
        return next((i for i in candidates if i not in self._consumed), None)

    def _hit(self, index: int, match: str, sequence: bool, divergence: dict[str, Any] | None = None) -> Answer:
        if sequence:
            self._consumed.add(index)
        result, is_error = self._answers[index]
        return Answer(result, is_error, match, index, divergence)

    def _miss(self, tool: str, args: dict[str, Any], policy: str, idx: _ToolIndex, sequence: bool) -> Answer:
        if policy == "empty":
            schema = idx.tool.result_schema if idx.tool else None
            return Answer(empty_result(schema), False, "empty", None, {"policy": "empty", "matched": None})
        if policy == "nearest":
            best = self._nearest(args, idx, sequence)
            if best is None:
                return self._fallback(tool, args, policy, "no recording of this tool shares an argument with the call")
            return self._hit(best, "nearest", sequence, {"policy": "nearest", "matched": best})
        if policy == "synthesize":
            if self.synthesize is None:
                return self._fallback(tool, args, policy, "on_miss is synthesize but no synthesize hook was given")
            try:
                result = self.synthesize(tool, dict(args), self.universe)
            except Exception as exc:  # a user hook: its failure is the call's failure, not the server's
                return self._fallback(tool, args, policy, f"synthesize hook raised {type(exc).__name__}: {exc}")
            return Answer(result, False, "synthesize", None, {"policy": "synthesize", "matched": None})
        return Answer(_fail(tool, args), True, "fail_call", None, {"policy": "fail_call", "matched": None})

    def _nearest(self, args: dict[str, Any], idx: _ToolIndex, sequence: bool) -> int | None:
        """The recording sharing the most exact key/value pairs; ties go to recording order; zero is no answer."""
        wanted = _pairs(args)
        best, best_score = None, 0
        for i in idx.order:
            if sequence and i in self._consumed:
                continue
            pairs = idx.pairs.get(i)
            if pairs is None:
                pairs = idx.pairs[i] = _pairs(self.universe.recordings[i].args)
            score = len(wanted & pairs)
            if score > best_score:
                best, best_score = i, score
        return best

    def _fallback(self, tool: str, args: dict[str, Any], policy: str, reason: str) -> Answer:
        """A policy that could not answer falls back to `fail_call`, saying why."""
        divergence = {"policy": policy, "matched": None, "fallback": "fail_call", "reason": reason}
        return Answer(_fail(tool, args, reason), True, "fail_call", None, divergence)

    # ------------------------------------------------------------ the log

    def _record(self, tool: str, args: dict[str, Any], answer: Answer) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "tool_name": tool,
            "args": args,
            "result": answer.result,
            "match": answer.match,
            "recording": answer.recording,
            "is_error": answer.is_error,
            "timestamp_ms": epoch_ms(),
        }
        if answer.divergence is not None:
            # the spec's place (recording-a-universe.md): call_log() entry extra={"divergence": {...}}
            entry["extra"] = {"divergence": answer.divergence}
        if answer.is_error:
            rec = self.universe.recordings[answer.recording] if answer.recording is not None else None
            entry["error"] = rec.error if rec is not None else NO_RECORDED_RESULT
        self._log.append(entry)
        return entry

    def call_log(self) -> list[dict[str, Any]]:
        """Every call of this run, in order: recording-shaped plus `match`, `recording`, `is_error`,
        `timestamp_ms`, `extra.divergence` on a miss (and `error` when the agent was answered with an error)."""
        with self._lock:
            return [dict(e) for e in self._log]

    def reset(self) -> None:
        """Start a new run: clear the call log and rewind every sequence tool."""
        with self._lock:
            self._log.clear()
            self._consumed.clear()


# ---------------------------------------------------------------- comparing the two engines


Call = tuple[str, Any]  # (tool, args: a dict, a JSON string, None, or "RESET" as the tool to start a new run)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_engine(cls: type, universe: Universe, calls: list[Call], synthesize: Any, perturbation: Perturbation | None
         ) -> tuple[list[Any], list[dict], list[dict], list[str]]:
    seen: list[dict] = []
    engine = cls(universe, synthesize=synthesize, on_call=lambda e: seen.append(dict(e)))
    engine.perturbation = perturbation
    handler = _Warnings()
    logger = logging.getLogger("wt_otel.replay.universe")
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False  # thousands of warnings: kept from pytest's capture
    answers: list[Any] = []
    try:
        for tool, args in calls:
            if tool == "RESET":
                engine.reset()
                continue
            try:
                a = engine.call(tool, args)
            except Exception as exc:  # bad arguments (ValueError), or what canonical_json itself cannot order
                answers.append((type(exc).__name__, str(exc)))
                continue
            answers.append((a.result, a.is_error, a.match, a.recording, a.divergence,
                            engine.delay_for(tool)))
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    log = engine.call_log()
    for entry in (*log, *seen):
        assert isinstance(entry.pop("timestamp_ms"), int)
    return answers, log, seen, handler.lines


def assert_same(universe: Universe, calls: list[Call], synthesize: Any = None,
                perturbation: Perturbation | None = None) -> list[Any]:
    """Both engines over the same calls; compared by repr, so NaN equals NaN and key order counts.
    Returns the answers, for the caller's counts."""
    old = run_engine(ReferenceUniverse, universe, calls, synthesize, perturbation)
    new = run_engine(RecordedUniverse, universe, calls, synthesize, perturbation)
    for what, a, b in zip(("answers", "call log", "on_call entries", "warnings"), old, new, strict=True):
        assert repr(b) == repr(a), f"{what} differ"
    return new[0]


class Tagged:
    """An object orjson serializes through `default=str`: its canonical form is a JSON string."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Tagged({self.text!r})"


def synth(tool: str, args: dict[str, Any], universe: Universe) -> Any:
    if "boom" in args:
        raise RuntimeError("the hook failed")
    return {"synthesized": tool, "n": len(args)}


