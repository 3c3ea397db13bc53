"""The Trace: what one replay run did, recorded as versioned JSON (`wt_trace: 1`, `*.trace.json`).

`wt-otel run` writes one per scenario run; scorers and reports read it. It
keeps the two kinds of evidence apart on purpose: `turns[*].tool_calls` is
what the agent *reported* over Contract C, `mcp_calls` is what the universe
MCP server *witnessed*. A reported call the server never saw means the agent
bypassed the universe, and `integrity` says INVALID.

Readers are forward-tolerant like every wt-otel format: unknown fields are
kept and written back out, additions within version 1 are optional.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from wt_otel.contracts.inject import SurfaceProbe, ToolCall, TurnResult
from wt_otel.contracts.problems import ContractModel, is_nonempty_str, is_version, load, raise_at

TRACE_VERSION = 1
TRACE_SUFFIX = ".trace.json"

__all__ = ["TRACE_SUFFIX", "TRACE_VERSION", "Evidence", "Integrity", "McpCall", "RunLLMCall", "SurfaceProbe",
           "Timings", "ToolCall", "Trace", "Turn", "load_trace"]


class Turn(ContractModel):
    """One injected user turn and the agent's answer (transcript-side evidence)."""

    text: str = Field(description="the user turn as injected")
    reply: str = Field(description="the agent's reply verbatim; empty only with error")
    tool_calls: list[ToolCall] = Field(description="the tool calls the agent reported, in invocation order")
    latency_ms: float = Field(ge=0, description="wall time of the inject call")
    error: str | None = Field(None, description="the agent-level error verbatim (the turn is still scored)")
    model: str | None = Field(None, description="the model the endpoint reported answering with (live runs)")
    quant: str | None = Field(None, description="its quantization, when the endpoint reported one")

    @classmethod
    def from_result(cls, text: str, result: TurnResult) -> Turn:
        extra = {k: v for k, v in (("model", result.model), ("quant", result.quant)) if v}
        return cls(text=text, reply=result.reply, tool_calls=result.tool_calls, latency_ms=result.latency_ms,
                   error=result.error, **extra)


class McpCall(ContractModel):
    """One tool call as the universe MCP server witnessed and answered it (its call-log entry)."""

    tool_name: Annotated[str, is_nonempty_str()]
    args: dict[str, Any]
    result: Any = None
    match: str = Field(description="exact, keyed, or the miss policy that answered (fail_call, empty, nearest, "
                                   "synthesize)")
    extra: dict[str, Any] | None = Field(
        None, description="runtime-only evidence; on a miss `divergence: {policy, matched, ...}` (the spec's place)")
    is_error: bool = False
    timestamp_ms: int | None = None
    recording: int | None = Field(None, description="index of the recording that answered")

    @model_validator(mode="before")
    @classmethod
    def _divergence_into_extra(cls, data: Any) -> Any:
        """Traces written before the spec's `extra.divergence` carried a top-level `divergence`: read both,
        keep one place."""
        if isinstance(data, dict) and "divergence" in data:
            data = dict(data)
            legacy = data.pop("divergence")
            extra = dict(data.get("extra") or {})
            if legacy is not None and extra.get("divergence") is None:
                extra["divergence"] = legacy
            if extra:
                data["extra"] = extra
        return data

    @property
    def divergence(self) -> dict[str, Any] | None:
        """On a miss: {policy, matched, ...} (from `extra.divergence`)."""
        found = (self.extra or {}).get("divergence")
        return found if isinstance(found, dict) else None


class RunLLMCall(ContractModel):
    """One model request as the cassette server answered it (its call-log entry)."""

    model_config = ConfigDict(title="LlmCall")  # the schema title the format has always had

    match: str = Field(description="exact or sequence when a recording answered, miss on an llm_divergence")
    divergence: dict[str, Any] | None = Field(None, description="on a miss: where the request first differed")
    seq: int | None = None
    event: str | None = Field(None, description="llm_call or llm_divergence")
    model: str | None = None
    recorded_index: int | None = None
    status: int | None = None
    error: str | None = None


class Evidence(ContractModel):
    """Where the run's evidence came from, so a reader knows what a PASS is worth."""

    witness: Literal["available", "unavailable"] = Field(
        description="available: MCP calls were witnessed server-side; unavailable: only the agent's report")
    llm: Literal["replay", "live"] = Field(description="replay: the model answered from the cassette")


class Integrity(ContractModel):
    """Whether the run can be scored at all: ERROR (it could not run) and INVALID (it ran outside the
    hermetic universe) are never a pass, whatever the scorers say."""

    status: Literal["PASS", "INVALID", "ERROR"]
    detail: str | None = None

    @model_validator(mode="after")
    def _detail_says_why(self) -> Integrity:
        if self.status != "PASS" and not self.detail:
            raise_at([(("detail",), f"must say why the run is {self.status} (e.g. \"universe bypassed: the agent "
                                    "did not call the served universe\" or \"reset failed: ...\")")])
        return self


class Timings(ContractModel):
    """Wall times in milliseconds; further phases may be added."""

    total_ms: float | None = None
    reset_ms: float | None = None
    surface_ms: float | None = None
    turns_ms: float | None = None


class Trace(ContractModel):
    """One run of one scenario."""

    wt_trace: Annotated[Literal[1], is_version("wt_trace")]
    scenario_id: Annotated[str, is_nonempty_str("the scenario's id from scenario.yaml")]
    run_index: int = Field(ge=1, description="1 for the first run of the scenario in this invocation")
    run_id: Annotated[str, is_nonempty_str("a unique id for this run")]
    label: str | None = Field(None, description="the --label of the invocation")
    started_at: str = Field(description="ISO 8601")
    ended_at: str | None = Field(None, description="ISO 8601")
    runtime: Annotated[str, is_nonempty_str("http_inject or python:MODULE:ATTR")]
    inject_url: str | None = Field(None, description="the Contract C base URL (http_inject)")
    session_id: str | None = Field(None, description="the driver-minted session every turn went to")
    universe_url: str | None = Field(None, description="the MCP URL the universe was served at")
    llm_url: str | None = Field(None, description="the OpenAI-compatible base URL of the cassette server")
    surface: SurfaceProbe | None = Field(
        None, description="the /wt/surface probe (reported, never rendered); absent when the run ended before it")
    turns: list[Turn] = []
    mcp_calls: list[McpCall] = []
    llm_calls: list[RunLLMCall] = []
    evidence: Evidence
    warnings: list[str] = []
    integrity: Integrity
    timings: Timings = Field(default_factory=Timings)
    perturbation: dict[str, Any] | None = Field(
        None, description="a robustness run: the perturbation the universe applied (kind, tool, ...)")
    observations: dict[str, Any] | None = Field(
        None, description="state the run left, per source, for `observation(source, path, predicate)`: "
                          "`universe` (per-tool end state and the writes, from the universe's call log; "
                          "docs/assertions.md), the one wt-otel fills; a trace written by other "
                          "code may carry more (e.g. `db`)")


def load_trace(data: Any) -> Trace:
    """Validate a parsed `*.trace.json`; raises `ContractError` listing every problem."""
    return load(Trace, data)
