"""Plug-ins: one small typed interface per kind, one entry-point group each, checked when loaded.

`processors/` and `exporters/` import the core, never the reverse: the core finds them by type
name through entry points, the way a collector builds a pipeline from its config, so a third-party
package can ship its own by declaring an entry point. Each kind has a Protocol here and a group:

| kind              | entry-point group          | the registered object                                    |
| ----------------- | -------------------------- | -------------------------------------------------------- |
| `stages`          | `wt_otel.stages`           | a `StageType`: type name, config model, factory (serve)  |
| `sinks`           | `wt_otel.sinks`            | a class: `cls(out, force=...)` -> `SessionSink` (import) |
| `results_formats` | `wt_otel.results_formats`  | a `ResultsFormat` (`run/report --format NAME`)           |
| `runtimes`        | `wt_otel.runtimes`         | a `RuntimeFactory` (`run --runtime NAME[:ARG]`)          |

`load_plugin(kind, name)` checks the object against its interface and names what is missing,
so a broken plug-in fails at start-up with a message, not mid-run with an AttributeError. The
groups `wt_otel.exporters` and `wt_otel.processors` of earlier releases stay registered
(`load(group, name)`); see docs/extending.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from wt_otel.model.session import Session
from wt_otel.model.spans import Record, SpanRecord, SpanRefs

if TYPE_CHECKING:  # annotations only: every command loads this module, few need the Contract C wire models
    from wt_otel.contracts.inject import SurfaceProbe, TurnResult

__all__ = [
    "KINDS",
    "CompletedSession",
    "IndexedSession",
    "PluginError",
    "RecordConsumer",
    "ResultsFormat",
    "ResultsFormatSpec",
    "Runtime",
    "RuntimeFactory",
    "SessionSink",
    "SessionStage",
    "StageContext",
    "StageType",
    "UnknownComponent",
    "check_plugin",
    "load",
    "load_plugin",
    "names",
]


class UnknownComponent(LookupError):
    pass


class PluginError(TypeError):
    """A registered plug-in that does not have its kind's interface; the message names both."""


# ---------------------------------------------------------------------------------------- interfaces


@runtime_checkable
class RecordConsumer(Protocol):
    """A records stage of the serve pipeline (the GenAI filter, the assembler): the Collector's consumer."""

    def consume(self, records: Sequence[Record], now: float) -> None: ...

    def tick(self, now: float) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class CompletedSession:
    """What flows through the session stages: one completed session revision and its spans.

    `written` is set by the stage that stores the session (the data-dir store's `Written`:
    path, slug, revision, index entry), for the stages after it (auto-replay).

    A stage that finishes the session later (the data-dir store handing it to a render worker) sets
    `pending`; the pipeline then sets `resume`, which that stage calls once done to run the stages after it.
    """

    session: Session
    spans: list[SpanRecord]
    written: Any = None
    halted: bool = False  # set by the store when it deferred or quarantined the session: later stages skip it
    pending: bool = False
    resume: Callable[[], None] | None = None


@dataclass(slots=True)
class IndexedSession:
    """A completed session revision kept by reference, not built: its spans are `SpanRefs` into serve's
    segment log, none carries a flag or feedback key, and the store indexes it (rendered on demand).

    Only serve makes these, and only when every session stage is one that needs nothing of an unflagged
    session but its index line (`SessionPipeline.keeps_by_reference`)."""

    key: str
    refs: list[SpanRefs]
    complete: bool
    warnings: list[str] = field(default_factory=list)  # what the assembler says of it (continuation, merge)

    @property
    def trace_ids(self) -> list[str]:
        return list(dict.fromkeys(r.trace_id for r in self.refs))

    @property
    def conversation_id(self) -> str | None:
        return next((r.conversation for r in self.refs if r.conversation), None)

    @property
    def spans(self) -> int:
        return sum(len(r.ordinals) for r in self.refs)


@runtime_checkable
class SessionStage(Protocol):
    """A session stage (flagger, redactor, data-dir store, auto-replay, or yours): sees every completed session.

    `on_session` may change the session in place; an exception is logged and counted, and the
    session goes no further. `close` runs once at shutdown, in reverse stage order.
    """

    def on_session(self, done: CompletedSession) -> None: ...

    def close(self) -> None: ...


@dataclass
class StageContext:
    """What a stage factory may use besides its own config section (the Collector's `component.Settings`)."""

    serve_config: Any  # wt_otel.serve.config.ServeConfig: data_dir, runs_dir, ...
    metrics: Any  # wt_otel.serve.metrics.Metrics
    emit: Callable[[str], None] = print
    warn: Callable[[str], None] = print
    quiet: bool = False
    store: Any = None  # set by the stage that stores sessions; the assembler asks it `has_key(key)`
    on_written: list[Callable[[Any], None]] = field(default_factory=list)  # called with each `Written`
    recovery: list[str] = field(default_factory=list)  # what stages repaired at start, for the log


@dataclass(frozen=True)
class StageType:
    """A serve pipeline stage as the Collector has them: a type name, a config model with defaults, a factory.

    kind `records`: `create(config, ctx, next)` returns a `RecordConsumer` that passes records to `next`.
    kind `assembler`: `create(config, ctx, emit)` returns a `RecordConsumer` that calls
    `emit(session, spans)` for each completed session (there is exactly one per pipeline).
    kind `session`: `create(config, ctx, None)` returns a `SessionStage`, or None when its config turns it off.

    `section` is the config key the stage reads (default: the type name); a stage that is not
    built in reads `pipeline.settings.<section>`. The section is validated with `config_model`.
    """

    type_name: str
    kind: Literal["records", "assembler", "session"]
    create: Callable[[Any, StageContext, Any], Any]
    config_model: type[BaseModel] | None = None
    section: str | None = None
    description: str = ""

    @property
    def config_key(self) -> str:
        return self.section or self.type_name


@runtime_checkable
class SessionSink(Protocol):
    """Where `wt-otel import` writes each session: one scenario directory per session, returned."""

    def write(self, session: Session, slug: str) -> Path: ...


@runtime_checkable
class ResultsFormat(Protocol):
    """A results file `wt-otel run/report --format NAME --out FILE` writes; `suffix` lets `--out` imply it."""

    name: str
    suffix: str

    def write(self, results: Any, out: Path) -> None: ...  # results: wt_otel.contracts.results' sweep record


@runtime_checkable
class Runtime(Protocol):
    """What `wt-otel run` drives: reset before every run, probe the surface once, inject turn by turn.

    `name` and `url` go into the trace; `warnings` are things the runtime
    cannot do (e.g. a python agent with no reset hook) that a run must report.
    """

    name: str
    url: str | None
    warnings: list[str]

    def reset(self) -> None: ...

    def surface(self) -> SurfaceProbe: ...

    def inject(self, session_id: str, text: str) -> TurnResult: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ResultsFormatSpec:
    """A ready-made `ResultsFormat`: register an instance, e.g. `FORMAT = ResultsFormatSpec("junit", ".xml", fn)`."""

    name: str
    suffix: str
    write: Callable[[Any, Path], None]


class RuntimeFactory(Protocol):
    """`--runtime NAME[:ARG]`: the registered factory gets ARG (or None), the inject URL and timeout."""

    def __call__(self, arg: str | None, *, url: str | None = None, timeout_s: float | None = None) -> Runtime: ...


# ---------------------------------------------------------------------------------------- registry

KINDS: dict[str, str] = {
    "stages": "wt_otel.stages",
    "sinks": "wt_otel.sinks",
    "results_formats": "wt_otel.results_formats",
    "runtimes": "wt_otel.runtimes",
}

# What each kind must have: (attribute, must be callable)
_REQUIRED: dict[str, tuple[tuple[str, bool], ...]] = {
    "stages": (("type_name", False), ("kind", False), ("create", True), ("config_model", False)),
    "sinks": (("write", True),),
    "results_formats": (("name", False), ("suffix", False), ("write", True)),
    "runtimes": (("__call__", True),),
    "session stage": (("on_session", True), ("close", True)),
    "records stage": (("consume", True), ("tick", True), ("close", True)),
    "runtime": (("name", False), ("url", False), ("warnings", False), ("reset", True), ("surface", True),
                ("inject", True), ("close", True)),
}
_STAGE_KINDS = ("records", "assembler", "session")


def check_plugin(obj: Any, kind: str, name: str, where: str = "") -> Any:
    """`obj` when it has the interface of `kind` (a key of `_REQUIRED`), else `PluginError` naming what it lacks."""
    missing = [attr for attr, call in _REQUIRED[kind]
               if not hasattr(obj, attr) or (call and not callable(getattr(obj, attr)))]
    if not missing and kind == "stages":
        if obj.kind not in _STAGE_KINDS:
            raise PluginError(f"plug-in {name!r}{where}: stage kind {obj.kind!r} is not one of "
                              f"{', '.join(_STAGE_KINDS)}")
        model = obj.config_model
        if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise PluginError(f"plug-in {name!r}{where}: config_model must be a pydantic model class or None, "
                              f"not {model!r}")
    if missing:
        what = kind.removesuffix("s").replace("_", " ") if kind in KINDS else kind
        raise PluginError(f"plug-in {name!r}{where} is not a {what}: it lacks {', '.join(missing)} "
                          f"(see wt_otel.components and docs/extending.md)")
    return obj


def _entry(kind: str, name: str) -> EntryPoint:
    group = KINDS[kind]
    for ep in entry_points(group=group, name=name):
        return ep
    raise UnknownComponent(f"no {kind.removesuffix('s').replace('_', ' ')} named {name!r} "
                           f"(installed: {', '.join(names(kind)) or 'none'}); is wt-otel installed (pip install -e .)?")


def load_plugin(kind: str, name: str) -> Any:
    """The object registered as `name` in `kind`'s group, checked against its interface.

    Raises `UnknownComponent` (not registered) or `PluginError` (it cannot be loaded, or lacks the interface).
    """
    ep = _entry(kind, name)
    where = f" (entry point {ep.value} in group {ep.group})"
    try:
        obj = ep.load()
    except Exception as exc:  # a plug-in that cannot even be imported: say which one
        raise PluginError(f"plug-in {name!r}{where} cannot be loaded: {type(exc).__name__}: {exc}") from exc
    return check_plugin(obj, kind, name, where)


def names(kind: str) -> list[str]:
    """The names registered for `kind`, sorted: what the CLI offers as choices."""
    return sorted({ep.name for ep in entry_points(group=KINDS[kind])})


def load(group: str, name: str) -> Any:
    """The object registered as `name` in entry-point group `wt_otel.<group>` (the untyped groups
    `exporters` and `processors` of earlier releases: ledger, table, result-spans, ...)."""
    found = entry_points(group=f"wt_otel.{group}", name=name)
    for ep in found:
        return ep.load()
    known = sorted(ep.name for ep in entry_points(group=f"wt_otel.{group}"))
    raise UnknownComponent(f"no {group[:-1]} named {name!r} (installed: {', '.join(known) or 'none'}); "
                           "is wt-otel installed (pip install -e .)?")
