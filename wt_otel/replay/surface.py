"""Surface gating: compare an endpoint's prompt surface with a golden, and watch it drift in telemetry.

0002 makes `/wt/surface` a report of "every piece of steering text the endpoint
composes into the model's context", segment-structured "so a surface diff reads
as 'tool client_lookup description changed', not 'bytes differ'", and makes an
`invalid` surface a hard failure for any tool that compares surfaces. So:

- `diff_surfaces(golden, current)` lists changes by segment: tools added,
  removed, or changed (description, input/result schema by JSON path), system
  instructions (a unified diff), extra segments, the model;
- `Comparison` is what a gate reads: `same`, `drift`, `invalid` or
  `unavailable` (only `same` passes);
- `drift` derives surfaces from the sessions of serve's data dir (the system
  instructions and tool definitions each session's telemetry carried) and
  reports, per service, every change between consecutive sessions in time, so
  drift in production is visible without asking the endpoint.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from wt_otel.contracts.inject import Surface, SurfaceProbe

MAX_SHOWN = 120


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def _path(parent: str, key: str | int) -> str:
    return f"{parent}[{key}]" if isinstance(key, int) else (f"{parent}.{key}" if parent else str(key))


def json_changes(old: Any, new: Any, at: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, old, new) for every leaf that differs; a missing side is `None` with the key absent."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            if key not in new:
                yield _path(at, key), old[key], None
            elif key not in old:
                yield _path(at, key), None, new[key]
            else:
                yield from json_changes(old[key], new[key], _path(at, key))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from json_changes(a, b, _path(at, i))
    elif old != new:
        yield at or "(root)", old, new


@dataclass
class Change:
    kind: str  # tool_added | tool_removed | tool_changed | instructions_changed | segment_* | model_changed
    name: str = ""
    detail: str = ""
    lines: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "detail": self.detail, "lines": self.lines}

    def text(self) -> str:
        mark = {"added": "+", "removed": "-"}.get(self.kind.rsplit("_", 1)[-1], "~")
        head = f"{mark} {self.kind.replace('_', ' ')}" + (f" {self.name}" if self.name else "") + \
            (f": {self.detail}" if self.detail else "")
        return "\n".join([head, *(f"    {line}" for line in self.lines)])


def _instructions(surface: Surface) -> str:
    return "\n".join(p.content for p in surface.system_instructions)


def diff_surfaces(golden: Surface, current: Surface, golden_model: str | None = None,
                  current_model: str | None = None) -> list[Change]:
    """Every difference, segment by segment, in a stable order."""
    changes: list[Change] = []
    if golden_model and current_model and golden_model != current_model:
        changes.append(Change("model_changed", detail=f"{golden_model} -> {current_model}"))
    old, new = _instructions(golden), _instructions(current)
    if old != new:
        diff = difflib.unified_diff(old.splitlines(), new.splitlines(), "golden", "current", lineterm="", n=1)
        changes.append(Change("instructions_changed", lines=list(diff)[2:]))
    old_tools = {t.name: t.to_dict() for t in golden.tool_definitions}
    new_tools = {t.name: t.to_dict() for t in current.tool_definitions}
    for name in old_tools.keys() - new_tools.keys():
        changes.append(Change("tool_removed", name))
    for name in new_tools.keys() - old_tools.keys():
        changes.append(Change("tool_added", name, _short(new_tools[name].get("description") or "")))
    for name in sorted(old_tools.keys() & new_tools.keys()):
        for path, a, b in json_changes(old_tools[name], new_tools[name]):
            changes.append(Change("tool_changed", name, f"{path}: {_short(a)} -> {_short(b)}"))
    old_order = [t.name for t in golden.tool_definitions if t.name in new_tools]
    new_order = [t.name for t in current.tool_definitions if t.name in old_tools]
    if old_order != new_order:
        changes.append(Change("tool_order_changed", detail=f"{old_order} -> {new_order}"))
    old_seg = {s.name: s.content for s in golden.extra_segments}
    new_seg = {s.name: s.content for s in current.extra_segments}
    for name in sorted(old_seg.keys() - new_seg.keys()):
        changes.append(Change("segment_removed", name))
    for name in sorted(new_seg.keys() - old_seg.keys()):
        changes.append(Change("segment_added", name, _short(new_seg[name])))
    for name in sorted(old_seg.keys() & new_seg.keys()):
        if old_seg[name] != new_seg[name]:
            changes.append(Change("segment_changed", name, f"{_short(old_seg[name])} -> {_short(new_seg[name])}"))
    order = {"model_changed": 0, "instructions_changed": 1, "tool_removed": 2, "tool_added": 3, "tool_changed": 4}
    changes.sort(key=lambda c: (order.get(c.kind, 9), c.name))
    return changes


@dataclass
class Comparison:
    """A gate's view of one comparison. Only `same` passes: `invalid` is a hard failure (0002)."""

    status: str  # same | drift | invalid | unavailable
    golden: str
    current: str
    detail: str = ""
    changes: list[Change] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "same"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "ok": self.ok, "golden": self.golden, "current": self.current,
                "detail": self.detail, "changes": [c.to_dict() for c in self.changes]}

    def text(self) -> str:
        head = {"same": "SAME", "drift": "DRIFT", "invalid": "INVALID", "unavailable": "UNAVAILABLE"}[self.status]
        lines = [f"{head} {self.current} vs golden {self.golden}" + (f": {self.detail}" if self.detail else "")]
        lines += [c.text() for c in self.changes]
        return "\n".join(lines)


def compare(golden: Surface, probe: SurfaceProbe, *, golden_name: str, current_name: str,
            golden_model: str | None = None, current_model: str | None = None) -> Comparison:
    if probe.status != "reported" or probe.surface is None:
        why = probe.detail or probe.status
        hint = ("a malformed surface is a hard failure" if probe.status == "invalid" else
                "the endpoint reports no surface: nothing to compare")
        return Comparison(probe.status, golden_name, current_name, f"{why} ({hint})")
    changes = diff_surfaces(golden, probe.surface, golden_model, current_model)
    status = "drift" if changes else "same"
    detail = f"{len(changes)} change(s)" if changes else "no change"
    return Comparison(status, golden_name, current_name, detail, changes)


# ---------------------------------------------------------------- production drift from a data dir


@dataclass
class Observed:
    """One session's surface as its telemetry carried it."""

    service: str
    at: str
    session: str
    surface: Surface
    model: str | None
    tools_known: bool
    instructions_known: bool


def _observed(line: dict[str, Any], env: Any) -> Observed | None:
    """One session's surface from its envelope (`line`: its index line, for the slug and when)."""
    if not isinstance(env, dict):
        return None
    tools = [t for t in env.get("tool_definitions") or [] if isinstance(t, dict) and t.get("name")]
    known = [t for t in tools if not t.get("input_schema_stubbed")]
    instructions = [p for p in env.get("system_instructions") or [] if isinstance(p, dict)
                    and p.get("type") == "text"]
    try:
        surface = Surface.model_validate({
            "system_instructions": [{"type": "text", "content": str(p.get("content") or "")} for p in instructions],
            "tool_definitions": [{k: v for k, v in t.items() if k in ("name", "description", "input_schema")}
                                 for t in known],
            "extra_segments": []})
    except ValueError:
        return None
    raw_session, raw_source = env.get("session"), env.get("source")
    session: dict[str, Any] = raw_session if isinstance(raw_session, dict) else {}
    source: dict[str, Any] = raw_source if isinstance(raw_source, dict) else {}
    service = str(line.get("service") or source.get("system") or "unknown")
    # a session kept by reference has no start time in its index line: its envelope (rendered on demand) has
    at = line.get("started") or session.get("started_at") or line.get("written_at") or ""
    return Observed(service, str(at), str(line.get("slug")), surface, session.get("model"),
                    bool(known) and len(known) == len(tools), bool(instructions))


@dataclass
class ServiceDrift:
    service: str
    sessions: int
    versions: int
    changes: list[dict[str, Any]] = field(default_factory=list)  # {at, session, previous, changes: [...]}

    def to_dict(self) -> dict[str, Any]:
        return {"service": self.service, "sessions": self.sessions, "versions": self.versions,
                "changes": self.changes}


def drift(sessions: Iterable[tuple[dict[str, Any], dict[str, Any]]], service: str | None = None
          ) -> list[ServiceDrift]:
    """Per service, the surface changes between consecutive sessions (by start time).

    `sessions`: (index line, envelope) of each session's latest revision, as the data dir's session store
    gives them (rendered on demand for the sessions serve keeps by reference), so every session counts.
    Only what the telemetry carried is compared: a session whose tool definitions were not recorded
    (stubbed schemas) or whose instructions were not captured leaves that part out of the comparison,
    so missing content never reads as drift.
    """
    seen: dict[str, list[Observed]] = {}
    for line, env in sessions:
        obs = _observed(line, env)
        if obs is not None and (service is None or obs.service == service):
            seen.setdefault(obs.service, []).append(obs)
    out = []
    for name in sorted(seen):
        ordered = sorted(seen[name], key=lambda o: (o.at, o.session))
        report = ServiceDrift(name, len(ordered), 1)
        previous = ordered[0]
        for obs in ordered[1:]:
            old, new = previous.surface, obs.surface
            if not (previous.tools_known and obs.tools_known):
                new = new.model_copy(update={"tool_definitions": old.tool_definitions})
            if not (previous.instructions_known and obs.instructions_known):
                new = new.model_copy(update={"system_instructions": old.system_instructions})
            changes = diff_surfaces(old, new, previous.model, obs.model)
            if changes:
                report.versions += 1
                report.changes.append({"at": obs.at, "session": obs.session, "previous": previous.session,
                                       "changes": [c.to_dict() for c in changes],
                                       "text": [c.text() for c in changes]})
            previous = obs if changes or (obs.tools_known and obs.instructions_known) else previous
        out.append(report)
    return out


def probe_endpoint(url: str | None, timeout_s: float | None = None) -> tuple[SurfaceProbe, str | None]:
    """Probe a live endpoint's `/wt/surface` once: the probe, and the model when the response names one
    (an additive `model` next to `surface`). Raises `ContractViolation` only when it cannot be reached."""
    from wt_otel.contracts.inject import SURFACE
    from wt_otel.replay.runtimes import HttpInjectRuntime

    runtime = HttpInjectRuntime(url, timeout_s)
    probe = runtime.surface()
    model = None
    if probe.status == "reported":
        try:
            _, body = runtime.post(SURFACE, {"wt_inject": runtime.version})
            data = json.loads(body.decode("utf-8"))
            model = data.get("model") or (data.get("surface") or {}).get("model")
        except (ValueError, AttributeError):
            model = None
    return probe, model if isinstance(model, str) else None


def recorded_probe(trace_data: dict[str, Any]) -> tuple[SurfaceProbe, str | None]:
    """The surface a run recorded (`surface` of a `*.trace.json`) and the model its turns reported."""
    from wt_otel.contracts.run import load_trace

    trace = load_trace(trace_data)
    probe = trace.surface or SurfaceProbe(status="unavailable", detail="the run recorded no surface probe")
    model = next((t.model for t in trace.turns if t.model), None)
    return probe, model
