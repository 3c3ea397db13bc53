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
`nearest` scans, and only the recordings of the called tool. The hot path (a
recorded hit on a stateless tool) is lean (issue 15): one bytes key per call
(`canonical_bytes`), none when the call's argument count or names match no
recording, a plain str lookup for a tool keyed on one argument, prebuilt
answers, and a call log appended without a lock and without keeping a copy of
the arguments (their names and values go into the log's slots). Everything
else takes the lock and the same steps. tests/support/universe_reference.py keeps the engine
this replaced; the equivalence tests hold the two to identical answers,
divergence evidence and call logs.

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
from time import time_ns
from typing import Any

from orjson import OPT_SORT_KEYS, dumps

from wt_otel.contracts.perturbation import DEFAULT_ERROR, Perturbation
from wt_otel.contracts.universe import Matching, Recording, Universe, UniverseTool, load_universe
from wt_otel.model.parts import canonical_bytes, canonical_json

log = logging.getLogger(__name__)

SynthesizeHook = Callable[[str, dict[str, Any], Universe], Any]
"""The `synthesize` policy's generator: `(tool_name, args, universe) -> result`."""

NO_RECORDED_RESULT = "no_recorded_result"
_HEAD = 5  # call-log slots per call before its argument names and values


@dataclass(slots=True, frozen=True)
class Answer:
    """How one call was answered. `match` is `exact`, `keyed` or the policy that produced the result.

    Frozen: the answers of recorded hits are built once per recording and shared by every call that hits it.
    """

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


def _str_valued(projection: bytes) -> bool:
    """Whether a canonical one-key projection holds a JSON string (or cannot be read back: assume it might)."""
    try:
        decoded = json.loads(projection)
    except (ValueError, RecursionError):
        return True
    return not isinstance(decoded, dict) or any(isinstance(v, str) for v in decoded.values())


class _ToolIndex:
    """Per-tool lookup tables, built once: canonical bytes keys -> recording indices (in recording order).

    Besides the two canonical tables (`exact`, `keyed`), two shortcuts that never change an answer:

    - `shapes`: for each argument count of the tool's recordings, every name those recordings use. A call
      whose count is not there, or with a name outside that set, matches no recording exactly (canonical
      JSON keeps every key), so its full canonical key is never built. The test is one dict lookup and a
      set containment over the call's names, no set built per call; a looser filter than "the same name set
      as some recording" only builds a key that then misses. `odd_keys`: a recording has a non-str key (then
      only the count is trusted); a call with a non-str key always builds the key.
    - `by_str`: for a tool keyed on one argument, recordings whose value there is a `str`, by that str. A
      str call value is then one dict lookup, no JSON at all. Two strs have equal canonical projections
      exactly when they are equal (both encoders are decodable), so this answers as `keyed` does; it is
      off (None) when some recording's non-str value canonicalizes to a JSON string (an object serialized
      through `default=str`), which the str table could not see.

    `exact_hit` and `str_hit` are `exact` and `by_str` with each key's first recording resolved to its prebuilt
    answer (`RecordedUniverse` fills them): what a stateless tool answers, in one dict lookup.
    """

    __slots__ = ("tool", "arg_keys", "sequence", "exact", "keyed", "shapes", "odd_keys", "single", "by_str",
                 "order", "pairs", "exact_hit", "str_hit")

    def __init__(self, tool: UniverseTool | None, arg_keys: list[str] | None) -> None:
        self.tool = tool
        self.arg_keys = list(dict.fromkeys(arg_keys or []))
        self.sequence = tool is not None and tool.mode == "sequence"
        self.exact: dict[bytes, list[int]] = {}
        self.keyed: dict[bytes, list[int]] = {}
        self.shapes: dict[int, frozenset[str]] = {}
        self.odd_keys = False
        self.single: str | None = self.arg_keys[0] if len(self.arg_keys) == 1 else None
        self.by_str: dict[str, list[int]] | None = {} if self.single is not None else None
        self.order: list[int] = []  # every recording of this tool, for `nearest`
        self.pairs: dict[int, frozenset[tuple[str, str]]] = {}
        self.exact_hit: dict[bytes, Answer] = {}
        self.str_hit: dict[str, Answer] | None = None

    def add(self, index: int, args: dict[str, Any]) -> None:
        self.order.append(index)
        self.exact.setdefault(canonical_bytes(args), []).append(index)
        self.shapes[len(args)] = self.shapes.get(len(args), frozenset()).union(k for k in args if type(k) is str)
        self.odd_keys = self.odd_keys or any(type(k) is not str for k in args)
        key = self.keyed_key(args)
        if key is None:
            return
        self.keyed.setdefault(key, []).append(index)
        if self.by_str is not None:
            value = args[self.single]  # type: ignore[index]
            if type(value) is str:
                self.by_str.setdefault(value, []).append(index)
            elif _str_valued(key):
                self.by_str = None

    def keyed_key(self, args: Mapping[str, Any]) -> bytes | None:
        """Canonical projection on `arg_keys`; None when the call carries none of them.

        An empty projection would make every call "match" every recording that
        also lacks the keys: that is agreement on nothing, so it is a miss.
        """
        if not self.arg_keys:
            return None
        projected = {k: args[k] for k in self.arg_keys if k in args}
        return canonical_bytes(projected) if projected else None

    def exact_candidates(self, args: dict[str, Any]) -> list[int] | None:
        """Recordings canonically equal to the call, in recording order (None: the key was not even built)."""
        names = self.shapes.get(len(args))
        if names is not None and (names.issuperset(args) or self.odd_keys
                                  or not all(isinstance(k, str) for k in args)):
            return self.exact.get(canonical_bytes(args))
        return None

    def keyed_candidates(self, args: dict[str, Any]) -> list[int] | None:
        """Recordings equal to the call on `arg_keys`, in recording order."""
        single = self.single
        if single is not None:
            if single not in args:
                return None
            value = args[single]
            if type(value) is str and self.by_str is not None:
                return self.by_str.get(value)
            return self.keyed.get(canonical_bytes({single: value}))
        key = self.keyed_key(args)
        return self.keyed.get(key) if key is not None else None


class RecordedUniverse:
    """A Contract B universe you can call: `call(tool, args) -> Answer`, with a call log.

    Stateless by default: the same query always gets the same answer, so an
    agent's retry is a hit, not a divergence. Tools with `mode: sequence`
    consume each recording once per run (among the recordings that match, in
    recording order; exhausted means miss). `reset()` starts a new run.

    Thread-safe: an MCP server answers on its event loop while a runner reads
    the log from another thread. A recorded hit on a stateless tool takes no
    lock: its answer is prebuilt and its log entry is one run of slots
    added to a list by one `extend` (atomic). Sequence tools, misses (a
    `synthesize` hook runs one call at a time, as before) and perturbed runs
    take the lock. `call_log()` and `on_call` see the documented dicts.
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
        # the call log, flat: per call _HEAD slots (tool, answer, time_ns, perturbation dict or None, n), then the
        # n argument names and the n values as called, all added by one atomic `extend`. `answer` is the Answer
        # (for a recorded hit, the shared prebuilt one). No object made per call outlives the call: a kept args
        # copy (a GC-tracked dict when a value is a container) had the cyclic GC traverse the whole log again and
        # again, and names and values in the slots are as safe from the caller's later changes to its dict.
        self._log: list[Any] = []
        self._log_extend = self._log.extend  # `reset()` clears the list in place: the bound method stays valid
        self._consumed: set[int] = set()
        self._index: dict[str, _ToolIndex] = {
            t.name: _ToolIndex(t, universe.matching.arg_keys.get(t.name)) for t in universe.tools
        }
        # what each recording answers, resolved once: the hot path touches no pydantic attributes
        self._answers: list[tuple[Any, bool]] = []
        self._exact: list[Answer] = []
        self._keyed: list[Answer] = []
        self._errors: list[Any] = []  # the recording's `error`, for a log entry answered with an error
        for i, rec in enumerate(universe.recordings):
            self._index[rec.tool_name].add(i, rec.args)
            result, is_error = (_recorded_error_result(rec), True) if rec.error else (rec.result, False)
            self._answers.append((result, is_error))
            self._exact.append(Answer(result, is_error, "exact", i))
            self._keyed.append(Answer(result, is_error, "keyed", i))
            self._errors.append(rec.error)
        for idx in self._index.values():
            idx.exact_hit = {key: self._exact[hits[0]] for key, hits in idx.exact.items()}
            if idx.by_str is not None:
                idx.str_hit = {value: self._keyed[hits[0]] for value, hits in idx.by_str.items()}
        # the tools the lock-free path may answer: sequence tools consume recordings, under the lock
        self._stateless = {name: idx for name, idx in self._index.items() if not idx.sequence}

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
        flat = args if type(args) is dict else _flat_args(args)  # the caller's dict: read, never kept
        idx = self._stateless.get(tool)
        if idx is None or self.perturbation is not None:
            return self._locked_call(tool, flat)
        # The lock-free path, a recorded hit on a stateless tool: `exact_candidates` and `keyed_candidates`
        # inlined (this is the hot path; the equivalence test holds both copies to the locked path's answers).
        answer = None
        names = idx.shapes.get(len(flat))
        if names is not None and (names.issuperset(flat) or idx.odd_keys
                                  or not all(isinstance(k, str) for k in flat)):
            try:  # canonical_bytes, inlined
                key = dumps(flat, option=OPT_SORT_KEYS, default=str)
            except TypeError:  # orjson.JSONEncodeError is one
                key = canonical_bytes(flat)
            answer = idx.exact_hit.get(key)
        if answer is None:
            single, str_hit = idx.single, idx.str_hit
            if single is not None and str_hit is not None and type(value := flat.get(single)) is str:
                answer = str_hit.get(value)
            elif hits := idx.keyed_candidates(flat):
                answer = self._keyed[hits[0]]
            if answer is None:
                return self._locked_call(tool, flat)
        ns = time_ns()  # `epoch_ms`'s clock, divided when the log is read
        n = len(flat)
        slots = [tool, answer, ns, None, n, *flat, *flat.values()]  # a list: extended from without a tuple copy
        if len(slots) != _HEAD + 2 * n:  # another thread changed the caller's dict meanwhile: log a snapshot
            flat = flat.copy()
            slots = [tool, answer, ns, None, len(flat), *flat, *flat.values()]
        self._log_extend(slots)
        if self.on_call is not None:
            self.on_call(self._entry(tool, flat.copy(), answer, ns, None))
        return answer

    def _locked_call(self, tool: str, flat: dict[str, Any]) -> Answer:
        """Everything but a stateless recorded hit: sequence tools, misses, perturbed runs.

        Works on its own copy of the args: a `fail_call` answer carries them, and the caller may change its dict.
        """
        flat = flat.copy()
        with self._lock:
            answer = self._answer(tool, flat)
            perturbed = self._perturbed(tool, answer)
            extra = self.perturbation.to_dict() if perturbed is not None and self.perturbation is not None else None
            answer = perturbed or answer
            ns = time_ns()
            self._log_extend([tool, answer, ns, extra, len(flat), *flat, *flat.values()])
        if answer.divergence is not None:
            log.warning("universe_divergence: tool=%s policy=%s", tool, answer.divergence["policy"])
        if self.on_call is not None:
            self.on_call(self._entry(tool, flat, answer, ns, extra))
        return answer

    def is_recorded(self, answer: Answer) -> bool:
        """Whether `answer` is a recording's prebuilt exact or keyed answer: the same object for every hit on
        that recording while this engine lives (so a server may memoize what it derives from it)."""
        i = answer.recording
        return i is not None and (self._exact[i] is answer or self._keyed[i] is answer)

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
        sequence = idx.sequence
        hit = self._first(idx.exact_candidates(args), sequence)
        if hit is not None:
            return self._hit(hit, "exact", sequence)
        hit = self._first(idx.keyed_candidates(args), sequence)
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
        if divergence is None:  # exact or keyed: the prebuilt answer
            return (self._exact if match == "exact" else self._keyed)[index]
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

    def _entry(self, tool: str, args: dict[str, Any], answer: Answer, ns: int,
               perturbation: dict[str, Any] | None) -> dict[str, Any]:
        """One call as the documented entry dict."""
        entry: dict[str, Any] = {
            "tool_name": tool,
            "args": args,
            "result": answer.result,
            "match": answer.match,
            "recording": answer.recording,
            "is_error": answer.is_error,
            "timestamp_ms": ns // 1_000_000,
        }
        if answer.divergence is not None:
            # the spec's place (recording-a-universe.md): call_log() entry extra={"divergence": {...}}
            entry["extra"] = {"divergence": answer.divergence}
        if answer.is_error:
            entry["error"] = self._errors[answer.recording] if answer.recording is not None else NO_RECORDED_RESULT
        if perturbation is not None:
            entry.setdefault("extra", {})["perturbation"] = perturbation
        return entry

    def call_log(self) -> list[dict[str, Any]]:
        """Every call of this run, in order: recording-shaped plus `match`, `recording`, `is_error`,
        `timestamp_ms`, `extra.divergence` on a miss (and `error` when the agent was answered with an error)."""
        slots = list(self._log)  # one atomic copy; every call's slots were added by one atomic extend
        entries = []
        i, end = 0, len(slots)
        while i < end:
            tool, answer, ns, perturbation, n = slots[i:i + _HEAD]
            names = i + _HEAD
            values = names + n
            args = dict(zip(slots[names:values], slots[values:values + n], strict=True))
            entries.append(self._entry(tool, args, answer, ns, perturbation))
            i = values + n
        return entries

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


def add_answer(data: Mapping[str, Any], tool: str, args: Mapping[str, Any], *, result: Any = None,
               error: str | None = None, source: str = "manual", tool_def: Mapping[str, Any] | None = None
               ) -> tuple[dict[str, Any], str]:
    """A universe (parsed JSON, left as written) with one more answer: `(new data, what changed)`.

    For a fix that makes a call production never made: the answer is reviewed (`manual`) or asked of the
    real tool server (`recorded`). On a stateless tool an existing recording with the same arguments is
    replaced (a corrected answer, not a second one the engine would never serve); a sequence tool appends.
    A tool the universe does not list is added, with `tool_def` (the real server's listing) or a schema
    inferred from `args` that `stubbed_schemas` names for review. The result is validated (`ContractError`).
    """
    out = json.loads(json.dumps(dict(data)))  # a deep copy that stays plain JSON
    tools = out.setdefault("tools", [])
    recordings = out.setdefault("recordings", [])
    flat = dict(args)
    rec: dict[str, Any] = {"tool_name": tool, "args": flat, "result": result, "source": source}
    if error is not None:
        rec["error"] = error
    said = []
    known = next((t for t in tools if isinstance(t, dict) and t.get("name") == tool), None)
    if known is None:
        if tool_def is not None:
            known = {"name": tool, "description": tool_def.get("description") or "",
                     "input_schema": dict(tool_def.get("input_schema") or {"type": "object"})}
        else:
            props = {k: {"type": _JSON_TYPES.get(type(v), "string")} for k, v in flat.items()}
            known = {"name": tool, "description": "", "input_schema": {"type": "object", "properties": props}}
            out.setdefault("stubbed_schemas", []).append(tool)
        tools.append(known)
        said.append(f"added tool {tool!r}" + ("" if tool_def is not None else " (schema inferred from the "
                                                                            "arguments: listed in stubbed_schemas)"))
    key = canonical_json(flat)
    same = None if known.get("mode") == "sequence" else next(
        (i for i, r in enumerate(recordings) if isinstance(r, dict) and r.get("tool_name") == tool
         and isinstance(r.get("args"), dict) and canonical_json(r["args"]) == key), None)
    if same is None:
        recordings.append(rec)
        said.append(f"added recordings[{len(recordings) - 1}]")
    else:
        recordings[same] = rec
        said.append(f"replaced recordings[{same}]")
    load_universe(out)  # raises ContractError naming every problem
    return out, "; ".join(said)


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
