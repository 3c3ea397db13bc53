"""Answering tool calls from a Contract B universe: matching, miss policies, the call log, freezing.

A rerun agent does not reproduce the recorded call sequence, so a universe is
queried, not scripted. A call is resolved in a fixed, explainable order:

1. **exact**: same tool, canonically equal arguments;
2. **keyed**: equal values for the tool's `matching.arg_keys` subset, the rest ignored;
3. **miss**: the tool's policy (`per_tool_on_miss`, else `on_miss`): `fail_call`, `empty`,
   `nearest` or `synthesize`.

Canonical equality is `wt_otel.model.parts.canonical_json`: sorted keys, compact,
and scalars compared by their JSON text. So `1`, `1.0` and `true` are three
different arguments (`"1"`, `"1.0"`, `"true"`), never silently equal as they
are in Python (`1 == 1.0 == True`). Arguments arrive as parsed JSON on both
sides, so a producer that wrote `1.0` is matched by an agent that sends `1.0`;
an agent that sends `1` instead is a miss, and the miss is visible in the log.
Float tolerance and case folding are deliberately absent (0001: deferred until
a real universe needs them).

Lookups are dictionary hits on keys computed once at load time, so exact and
keyed matching cost O(1) in the number of recordings; only a miss under
`nearest` scans, and only the recordings of the called tool.

Every call is logged with how it was answered; every miss also carries
`divergence: {policy, matched}` and emits a `universe_divergence` warning, so
a run that left the recording is always visible and scorable.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from wt_otel._util.clock import epoch_ms
from wt_otel.contracts.perturbation import DEFAULT_ERROR, Perturbation
from wt_otel.contracts.universe import Matching, Recording, Universe, UniverseTool, load_universe
from wt_otel.model.parts import canonical_json

log = logging.getLogger(__name__)

SynthesizeHook = Callable[[str, dict[str, Any], Universe], Any]
"""The `synthesize` policy's generator: `(tool_name, args, universe) -> result`."""

NO_RECORDED_RESULT = "no_recorded_result"


@dataclass(slots=True)
class Answer:
    """How one call was answered. `match` is `exact`, `keyed` or the policy that produced the result."""

    result: Any
    is_error: bool
    match: str
    recording: int | None = None
    divergence: dict[str, Any] | None = None


def _fail(tool: str, args: dict[str, Any], detail: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"error": NO_RECORDED_RESULT, "tool": tool, "args": args}
    if detail:
        out["detail"] = detail
    return out


def empty_result(result_schema: Mapping[str, Any] | None) -> Any:
    """The `empty` policy's answer: `[]` for an array schema, `{}` for an object schema, else `""`."""
    kinds = (result_schema or {}).get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    for kind in kinds:
        if kind == "array":
            return []
        if kind == "object":
            return {}
    return ""


def _recorded_error_result(rec: Recording) -> Any:
    """What the agent sees for a recorded failure: the recorded result, else the error text."""
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


class RecordedUniverse:
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

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> RecordedUniverse:
        """Load and validate a `*.universe.json` (raises `ContractError` naming every problem, or ValueError
        "not a universe file" for something else: JSON lines, a dump, a non-object, no version key)."""
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"not a universe file (*.universe.json is one JSON object; this is not JSON: "
                                 f"{exc})") from None
        if not isinstance(data, dict) or "windtunnel_universe" not in data:
            what = "has no windtunnel_universe key" if isinstance(data, dict) else f"is a JSON {type(data).__name__}"
            hint = ("; a telemetry dump? import it first: wt-otel import DUMP --out DIR"
                    if isinstance(data, dict) and ("resourceSpans" in data or "data" in data) else "")
            raise ValueError(f"not a universe file (it {what}, where a *.universe.json is an object with "
                             f"\"windtunnel_universe\": 1){hint}")
        return cls(load_universe(data), **kwargs)

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


def divergence_of(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """A call-log entry's divergence evidence: the spec's `extra.divergence`, or the top-level
    `divergence` that wt-otel wrote before (older traces and logs are still read)."""
    extra = entry.get("extra")
    found = extra.get("divergence") if isinstance(extra, Mapping) else None
    return found if found is not None else entry.get("divergence")


def _flat_args(args: Mapping[str, Any] | str | None) -> dict[str, Any]:
    if args is None:
        return {}
    if isinstance(args, str):
        try:
            decoded = json.loads(args)
        except json.JSONDecodeError:
            decoded = None
        if not isinstance(decoded, dict):
            raise ValueError(f"tool arguments must be a JSON object, got {args[:60]!r}")
        return decoded
    return dict(args)


def freeze_universe(
    call_log: Iterable[Mapping[str, Any]],
    tools: Iterable[UniverseTool | Mapping[str, Any]],
    matching: Matching | Mapping[str, Any] | None = None,
    include_divergent: bool = False,
) -> Universe:
    """Turn a run's call log into a validated universe (record mode).

    Divergent calls (anything answered by a miss policy) are left out by
    default: freezing them would turn a fabricated or empty answer into a
    "recording" and hide the divergence in the next run. Repeats of the same
    call (a retry) are kept once for stateless tools; sequence tools keep
    every call, since their order is their meaning. Raises `ContractError`
    when a logged tool is missing from `tools`.
    """
    tool_list = [t.model_dump(exclude_none=True) if isinstance(t, UniverseTool) else dict(t) for t in tools]
    sequence = {t["name"] for t in tool_list if t.get("mode") == "sequence"}
    recordings: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, str]] = set()
    for entry in call_log:
        if divergence_of(entry) and not include_divergent:
            continue
        rec: dict[str, Any] = {"tool_name": entry["tool_name"], "args": entry.get("args") or {},
                               "result": entry.get("result")}
        if entry.get("error"):
            rec["error"] = entry["error"]
        key = (rec["tool_name"], canonical_json(rec["args"]), canonical_json(rec["result"]),
               canonical_json(rec.get("error")))
        if rec["tool_name"] not in sequence:
            if key in seen:
                continue
            seen.add(key)
        recordings.append(rec)
    if isinstance(matching, Matching):
        matching = matching.model_dump(exclude_defaults=True)
    return load_universe(
        {"windtunnel_universe": 1, "tools": tool_list, "recordings": recordings, "matching": dict(matching or {})}
    )
