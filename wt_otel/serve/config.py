"""The `wt-otel serve` configuration: one YAML file, one pydantic model per component.

Every component has a config with defaults (the OTel Collector's model), so an
empty file, or none at all, is a working setup: receivers on loopback, data in
`./wt-data`, sessions complete after 30 s idle, the incident flagger on with
its attribute rules, the redactor off. Command-line flags override the file.

The models live in the core because the CLI parses them; each stage of
`pipeline.stages` reads its own section (`config.assembler`, `config.flagger`,
...), validated again by the stage's own config model when the pipeline is
planned (`stage_plan` below), so a stage may check more than
the core knows (auto-replay checks `outcome_scorers` against `wt_otel.scorers`).
The receivers read `config.receivers`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from wt_otel.components import PluginError, StageType, UnknownComponent, load_plugin, names
from wt_otel.ingest.flags import FlaggerConfig, FlagRule, default_flag_rules
from wt_otel.serve.budget import BudgetConfig
from wt_otel.serve.receivers.config import ReceiversConfig

__all__ = [
    "AssemblerConfig",
    "ConfigError",
    "DataDirConfig",
    "DurabilityConfig",
    "default_flag_rules",
    "FilterConfig",
    "FlagRule",
    "FlaggerConfig",
    "QueueConfig",
    "ReceiversConfig",
    "RedactorConfig",
    "RedactionPattern",
    "PipelineConfig",
    "ReplayConfig",
    "ReplayResultsConfig",
    "ReplayTarget",
    "ServeConfig",
    "expand_env",
    "load_serve_config",
]


class _Strict(BaseModel):
    """A typo in a config key is an error, not a silently ignored setting."""

    model_config = ConfigDict(extra="forbid")


class FilterConfig(_Strict):
    """The cheap GenAI filter in front of everything else."""

    enabled: bool = Field(True, description="off: every span goes to the assembler (costly on mixed traffic)")
    max_known_traces: int = Field(100_000, gt=0, description="LRU of trace ids known to carry GenAI spans")


class AssemblerConfig(_Strict):
    """When a streaming session is complete, and how much memory it may hold."""

    idle_timeout: float = Field(30.0, gt=0, description="seconds with no new record before a session is complete")
    grace: float = Field(2.0, ge=0, description="seconds to wait after the root agent/workflow span ended")
    max_open_sessions: int = Field(10_000, gt=0, description="beyond it the oldest session is flushed incomplete")
    max_records_per_session: int = Field(20_000, gt=0, description="beyond it the session is flushed incomplete")
    late_window: float = Field(300.0, ge=0, description="seconds a written session's records are kept for revisions")
    max_retained_records: int = Field(20_000, ge=0, description="bound on records kept for late-span revisions")
    max_held_bytes: int = Field(192 * 1024 * 1024, gt=0, description="bytes of records held by open and retained "
                                "sessions (estimated); past it retained records go, then sessions are written early. "
                                "Keep it below queue.max_bytes, so retained records go before exports are refused")


class RedactionPattern(_Strict):
    """A user pattern; a named group `secret` limits the replacement to that group."""

    name: str = Field(description="shown in the replacement as {name}")
    regex: str = Field(description="Python regular expression")


class RedactorConfig(_Strict):
    """Off by default: redaction changes what replay sees, so it is a decision, not a surprise."""

    enabled: bool = False
    builtins: list[Literal["email", "api_key", "bearer", "card"]] = Field(
        ["email", "api_key", "bearer", "card"], description="built-in patterns applied when enabled")
    patterns: list[RedactionPattern] = Field([], description="your own patterns, after the built-ins")
    attribute_keys: list[str] = Field(default_factory=list, description="object keys whose values are blanked")
    replacement: str = Field("[REDACTED:{name}]", description="`{name}` is the pattern name")


class QueueConfig(_Strict):
    """Admission (`wt_otel.serve.budget`): what may wait in memory, and what one client may take of it."""

    max_queued_records: int = Field(100_000, gt=0, description="beyond it exports get 429 / RESOURCE_EXHAUSTED")
    max_bytes: int = Field(256 * 1024 * 1024, gt=0, description="memory budget in bytes (estimated) for the queue, "
                           "open sessions and retained records; past it exports get 429 / RESOURCE_EXHAUSTED, "
                           "checked before a request is decoded (on its size) and again after")
    max_backlog_seconds: float = Field(2.0, gt=0, description="how far behind the writer may be (the oldest queued "
                                       "batch's wait, or the time to write the sessions waiting) before exports get "
                                       "429 / RESOURCE_EXHAUSTED, refused before they are decoded: at overload the "
                                       "writer keeps its share and goodput stays at capacity; once decoded, a "
                                       "request is admitted on the backlog it would make, a client holding less "
                                       "than its fair share of it still gets in, and one request that would alone "
                                       "take longer gets 413 (split it) while other clients are active")
    max_batch_fraction: float = Field(0.25, gt=0, le=1, description="share of the budgets one request may take; "
                                      "a larger request is refused (413 / RESOURCE_EXHAUSTED): split it")
    max_sessions_per_client: int = Field(2_500, gt=0, description="traces one client (peer address) may start per "
                                         "session_window seconds once the budgets are fair_share_pressure full; "
                                         "also the most traces one request may carry")
    session_window: float = Field(30.0, gt=0)
    fair_share_pressure: float = Field(0.5, ge=0, le=1)

    def budget(self) -> BudgetConfig:
        """What admission control (`wt_otel.serve.budget`) enforces, from these settings."""
        return BudgetConfig(max_bytes=self.max_bytes, max_batch_fraction=self.max_batch_fraction,
                            max_records=self.max_queued_records, max_sessions_per_client=self.max_sessions_per_client,
                            session_window=self.session_window, fair_share_pressure=self.fair_share_pressure,
                            max_backlog_seconds=self.max_backlog_seconds)


class DataDirConfig(_Strict):
    """How the `datadir` stage writes sessions (exporters/datadir.py, exporters/render_pool.py)."""

    render: Literal["all", "flagged"] = Field(
        "flagged", description="flagged: incidents are rendered into the six files of `wt-otel import`; every "
                               "other session is kept as its index line, by reference into the segment log "
                               "(never decoded: see durability.retain_age), or, without the log, plus its "
                               "records (sessions/<slug>/records.otlp.pb), and rendered on demand (`wt-otel "
                               "sessions render`, `wt-otel flag`, a late flag); all: every session revision is "
                               "rendered (several times the CPU per span); with the redactor on, every session is "
                               "rendered")
    workers: int = Field(2, ge=0, le=32, description="worker processes that render and write sessions off the "
                         "pipeline thread (forkserver); 0: in the pipeline thread (the in-app SDK processor's "
                         "default)")
    max_pending: int = Field(256, gt=0, description="sessions handed to the workers and not yet indexed; past it "
                             "the pipeline thread waits for the workers (the queue in front then refuses exports)")


class DurabilityConfig(_Strict):
    """The segment log (`<data-dir>/segments/`, wt_otel.serve.segments): acknowledged means fsynced."""

    enabled: bool = Field(True, description="off: requests are acknowledged once queued in memory (a kill -9 loses "
                          "what was acknowledged but not yet written)")
    commit_interval: float = Field(0.001, ge=0, le=1, description="at least this many seconds between group "
                                   "commits (one fsync acknowledges every request appended since the last; those "
                                   "arriving during an fsync join the next anyway): caps the fsync rate, adds up to "
                                   "this much to every export's latency")
    segment_bytes: int = Field(64 * 1024 * 1024, gt=0, description="a generation of segment files is closed "
                               "once one of them reaches this size")
    segment_max_age: float = Field(60.0, gt=0, description="... or is this many seconds old")
    max_bytes: int = Field(4 * 1024 * 1024 * 1024, gt=0, description="cap on the log on disk; past it (open "
                           "sessions pin it) exports get 429 / RESOURCE_EXHAUSTED with retry info")
    shutdown_deadline: float = Field(5.0, ge=0, description="seconds SIGTERM spends writing open sessions; the "
                                     "rest stay in the segments and are completed on the next start")
    fsync_stall_timeout: float = Field(5.0, gt=0, le=60, description="seconds a segment fsync may take before serve "
                                       "calls the disk stalled (a dead network disk): exports are then refused at once "
                                       "(503 / UNAVAILABLE + retry info, /healthz degraded) instead of each waiting "
                                       "30 s, until that fsync returns")
    retain_age: float = Field(7 * 24 * 3600.0, ge=0, description="with `datadir.render: flagged`, unflagged "
                              "sessions are kept by reference into the segments (rendered on demand): segments no "
                              "longer needed for open sessions are kept this many seconds for them, newest first ...")
    retain_bytes: int = Field(8 * 1024 * 1024 * 1024, ge=0, description="... and up to this many bytes (not "
                              "counted in max_bytes); `wt-otel sessions render` of a session whose segment is "
                              "gone says so")


class ReplayResultsConfig(_Strict):
    """Where replay results go as OTel spans (the `result-spans` exporter). Each key falls back to the OTel
    SDK's environment variable; no endpoint anywhere: not exported."""

    otlp_endpoint: str | None = Field(
        None, description="e.g. http://127.0.0.1:6006 (Phoenix) or 127.0.0.1:4317 "
                          "[$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT]; "
                          "`none`: off even when the environment names one")
    otlp_protocol: Literal["grpc", "http/protobuf"] | None = Field(
        None, description="[$OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf]")
    otlp_headers: dict[str, str] = Field(default_factory=dict,
                                         description="sent with every export [$OTEL_EXPORTER_OTLP_HEADERS]")
    agent_name: str | None = Field(None, description="gen_ai.agent.name on invoke_agent spans [the inject URL]")


class ReplayTarget(_Strict):
    """One more agent to replay against: the incidents of the services it names go to it."""

    services: list[str] = Field(description="service.name values (fnmatch patterns) whose incidents it replays")
    runtime: str = Field("http_inject", description="any `wt-otel run --runtime`: http_inject, python:MODULE:ATTR, "
                                                    "openai-agents:MODULE:ATTR, ...")
    inject_url: str | None = Field(None, description="its Contract C base URL (http_inject)")
    universe_port: int = Field(0, ge=0, le=65535, description="the recorded tools (0: a free port, named in every "
                                                              "/wt/reset; fix one for an agent that cannot follow)")
    llm_port: int = Field(0, ge=0, le=65535, description="the recorded LLM (0: a free port, named in every "
                                                         "/wt/reset)")

    @field_validator("services")
    @classmethod
    def _some(cls, names: list[str]) -> list[str]:
        if not names:
            raise ValueError("a replay target names at least one service")
        return names


class ReplayConfig(_Strict):
    """Automatic replay of flagged incidents (off by default: it drives an agent endpoint).

    A session written complete and flagged is imported into `<data-dir>/scenarios/<slug>/`
    (unreviewed, with `outcome_scorers` as its default outcome check) and queued; one worker
    replays the queue one scenario at a time against `inject_url`. The universe and cassette
    bind free ports by default, as in `wt-otel run`, and every `/wt/reset` names their URLs
    (`universe_url`, `llm_base_url`); fix `universe_port` / `llm_port` for an agent that can
    only be configured out of band.
    """

    enabled: bool = Field(False, description="also turned on by --replay-runtime / --inject-url")
    services: list[str] = Field(
        default_factory=list, description="service.name values (fnmatch patterns) replayed against runtime/inject_url "
                                          "[--replay-service]; incidents of other services are kept and reported, "
                                          "not replayed against the wrong agent")
    targets: list[ReplayTarget] = Field(default_factory=list, description="more agents, each for its services")
    runtime: str = Field("http_inject", description="any `wt-otel run --runtime`: http_inject, python:MODULE:ATTR "
                                                    "for an in-process agent, openai-agents:MODULE:ATTR, ...")
    inject_url: str | None = Field(None, description="Contract C base URL [$WT_INJECT_URL, else :8647]")
    runs: int = Field(1, gt=0, description="runs per incident")
    llm: Literal["auto", "replay", "live", "record"] = Field(
        "auto", description="as `wt-otel run --llm`, the same default: auto replays the incident's cassette "
                            "(the recorded LLM on llm_port), live only for a scenario without one")
    llm_match: Literal["exact", "sequence"] = Field("exact", description="how the cassette server matches requests")
    universe_port: int = Field(0, ge=0, le=65535, description="the recorded tools as an MCP server (0: a free "
                                                              "port, named in every /wt/reset)")
    llm_port: int = Field(0, ge=0, le=65535, description="the recorded LLM as an OpenAI-compatible API (0: a free "
                                                         "port, named in every /wt/reset)")
    runs_dir: Path | None = Field(None, description="traces, scores and the ledger [<data-dir>/runs]")
    results: ReplayResultsConfig = Field(default_factory=ReplayResultsConfig)
    queue_max: int = Field(100, gt=0, description="pending replays; a full queue refuses new incidents")
    outcome_scorers: list[str] = Field(default_factory=lambda: ["no_divergence", "substantiated_by_tools"],
                                       description="written into each imported scorer.py as all_of(...); the "
                                                   "auto-replay stage's config model checks the names")
    stop_timeout: float = Field(10.0, ge=0, description="seconds SIGTERM waits for the replay in flight")
    synthesize: str | None = Field(None, description="MODULE:ATTR synthesize hook for universes with on_miss: "
                                                     "synthesize (a scenario's own `synthesize:` wins)")

    @field_validator("synthesize")
    @classmethod
    def _hook_spec(cls, spec: str | None) -> str | None:
        """Checked when the config is read, so a typo fails at start-up, not at the first incident."""
        if spec is not None:
            from wt_otel._util.hooks import load_hook

            load_hook(spec, "replay.synthesize")  # HookError is a ValueError: reported with its config path
        return spec


DEFAULT_STAGES = ["genai-filter", "assembler", "flagger", "redactor", "datadir", "auto-replay"]


class ProcessesConfig(_Strict):
    """How serve spreads over processes (`wt_otel.serve.receiver_process`)."""

    receivers: Literal["auto", 0, 1] = Field(
        "auto", description="receiver processes: 1 runs the OTLP receivers in a process of their own, beside the "
                            "session core (two GILs; needs durability and a data dir, the feed is the segment log); "
                            "0 runs them in serve's own process; auto: 1 on a machine of two cores or more")

    def receiver_processes(self, durable: bool) -> int:
        """The receiver processes serve starts; 0 without a segment log (nothing to feed the session core from)."""
        if not durable:
            return 0
        if self.receivers == "auto":
            return 1 if (os.cpu_count() or 1) >= 2 else 0
        return self.receivers


class PipelineConfig(_Strict):
    """The stage order, as data (the Collector's `service.pipelines`): names of `wt_otel.stages` entry points.

    Records stages come first, then the one assembler, then session stages in the order given. A stage
    that is not built in reads its config from `settings.<its section>`.
    """

    stages: list[str] = Field(default_factory=lambda: list(DEFAULT_STAGES), min_length=1)
    settings: dict[str, dict[str, Any]] = Field(default_factory=dict,
                                                description="config sections of third-party stages, by section")


class ServeConfig(_Strict):
    """`wt-otel serve --config FILE`: every section optional, every key defaulted; flags override the file."""

    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    receivers: ReceiversConfig = Field(default_factory=ReceiversConfig)
    data_dir: Path = Field(Path("wt-data"), description="sessions, scenarios, replay queue and runs")
    datadir: DataDirConfig = Field(default_factory=DataDirConfig)
    filter: FilterConfig = Field(default_factory=FilterConfig)
    assembler: AssemblerConfig = Field(default_factory=AssemblerConfig)
    flagger: FlaggerConfig = Field(default_factory=FlaggerConfig)
    redactor: RedactorConfig = Field(default_factory=RedactorConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    durability: DurabilityConfig = Field(default_factory=DurabilityConfig)
    replay: ReplayConfig = Field(default_factory=ReplayConfig)
    processes: ProcessesConfig = Field(default_factory=ProcessesConfig)

    @property
    def runs_dir(self) -> Path:
        """Where automatic replays write traces, scores and the ledger."""
        return self.replay.runs_dir or self.data_dir / "runs"


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


_ENV_REF = re.compile(r"\$\$|\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{([^}]*)\}")


def expand_env(value: Any, env: Mapping[str, str] | None = None, where: str = "") -> Any:
    """`${env:VAR}` and `${env:VAR:-default}` in every string of a parsed config, as the OTel Collector does;
    `$$` is a literal `$`. Expanded after YAML parsing, so a variable's value is text in one key, never YAML
    structure. A variable that is unset (and has no default) is a ConfigError naming it and the key."""
    env = os.environ if env is None else env
    if isinstance(value, dict):
        return {k: expand_env(v, env, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        if m.group(3) is not None:
            raise ConfigError(f"{where or '(top)'}: {m.group(0)!r} is not a reference wt-otel expands: write "
                              "${env:VAR} or ${env:VAR:-default} (or $$ for a literal $)")
        name, default = m.group(1), m.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{where or '(top)'}: environment variable {name} is not set (referenced as "
                          f"{m.group(0)}; set it, or give a default: ${{env:{name}:-VALUE}})")

    return _ENV_REF.sub(one, value)


def load_serve_config(path: Path | None = None, overrides: dict[str, Any] | None = None,
                      env: Mapping[str, str] | None = None) -> ServeConfig:
    """The config from `path` (YAML; none = defaults), with dotted-key `overrides` applied on top.

    `${env:VAR}` / `${env:VAR:-default}` in the file's values are expanded from `env` (default: the
    process environment). `overrides` maps e.g. "receivers.grpc_endpoint" to a value; None values are
    skipped so unset command-line flags leave the file's setting alone.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: cannot read config: {e}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the config must be a mapping of sections (receivers, data_dir, ...)")
        try:
            data = expand_env(loaded or {}, env)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{path}: `{p}` must be a mapping")
        node[leaf] = value
    where = path or "command line"
    try:
        config = ServeConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{where}: {_problems(e)}") from None
    try:
        stage_plan(config)
    except StageConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return config


def _problems(e: ValidationError, prefix: str = "") -> str:
    return "; ".join(f"{prefix}{'.'.join(str(x) for x in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors())


# ---------------------------------------------------------------- the stage plan


class StageConfigError(ValueError):
    """`pipeline.stages` names a stage that is not installed, is out of order, or whose section is invalid."""


@dataclass(frozen=True)
class PlannedStage:
    name: str
    type: StageType
    config: Any  # the section, validated by the stage's config model (the raw value when it has none)


def _section(config: ServeConfig, stage: StageType) -> Any:
    key = stage.config_key
    if key in ServeConfig.model_fields:
        return getattr(config, key)
    return config.pipeline.settings.get(key, {})


def _validated(stage: StageType, raw: Any) -> Any:
    model: type[BaseModel] | None = stage.config_model
    if model is None or isinstance(raw, model):
        return raw
    data = raw.model_dump() if isinstance(raw, BaseModel) else raw
    try:
        return model.model_validate(data)
    except ValidationError as e:
        prefix = f"{stage.config_key}." if stage.config_key in ServeConfig.model_fields else \
            f"pipeline.settings.{stage.config_key}."
        raise StageConfigError("; ".join(f"{prefix}{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
                                         for err in e.errors())) from None


def stage_plan(config: ServeConfig) -> list[PlannedStage]:
    """`pipeline.stages` resolved and checked: each stage loaded, in a valid order, its section validated.

    Order rule: records stages, then exactly one assembler, then session stages.
    """
    plan: list[PlannedStage] = []
    for name in config.pipeline.stages:
        try:
            stage: StageType = load_plugin("stages", name)
        except (UnknownComponent, PluginError) as exc:
            raise StageConfigError(f"pipeline.stages: {exc}") from None
        plan.append(PlannedStage(name, stage, _validated(stage, _section(config, stage))))
    kinds = [p.type.kind for p in plan]
    if kinds.count("assembler") != 1:
        raise StageConfigError(f"pipeline.stages: name exactly one assembler stage (got {kinds.count('assembler')}; "
                               f"installed stages: {', '.join(names('stages'))})")
    at = kinds.index("assembler")
    wrong = [p.name for p in plan[:at] if p.type.kind != "records"] + \
        [p.name for p in plan[at + 1:] if p.type.kind != "session"]
    if wrong:
        raise StageConfigError(f"pipeline.stages: {', '.join(wrong)} out of place: records stages go before the "
                               "assembler, session stages after it")
    return plan
