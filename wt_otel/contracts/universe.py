"""Contract B: the recorded tool universe (`*.universe.json`, `windtunnel_universe: 1`).

A universe is a queryable fake upstream: tools (what the agent is offered),
recordings (witnessed calls at rest, args stored flat) and the matching policy
for calls the recording does not contain. Cross-references are checked here so
a typo in a tool name fails at load time, not as a mysterious miss mid-run.

Fields wt-otel adds (optional): on recordings `error`, `tool_call_id`,
`span_id`, `source`, `extra`; on the universe `provenance`, `redaction` and
`stubbed_schemas` (tools whose input_schema was stubbed because the trace
recorded no definition: edit them by hand).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field, ModelWrapValidatorHandler, PrivateAttr, model_validator

from wt_otel.contracts.problems import (
    ContractModel,
    Loc,
    Problem,
    is_nonempty_str,
    is_object,
    is_one_of,
    is_version,
    load,
    raise_at,
    truncated,
)

POLICIES = ("fail_call", "empty", "nearest", "synthesize")
MODES = ("stateless", "sequence")
# witnessed: an execute_tool span; transcript: the agent's own account; manual: an answer a person wrote and
# reviewed (`wt-otel universe add`); recorded: the real tool server's answer (`wt-otel universe record`)
SOURCES = ("witnessed", "transcript", "manual", "recorded")

Policy = Annotated[
    Literal["fail_call", "empty", "nearest", "synthesize"],
    is_one_of(POLICIES, "fail_call is the hermetic default"),
]


class UniverseTool(ContractModel):
    name: Annotated[str, is_nonempty_str()]
    description: str | None = None
    input_schema: Annotated[
        dict[str, Any], is_object('the JSON Schema the agent is offered; {"type": "object"} when unknown')
    ]
    result_schema: Annotated[
        dict[str, Any] | None, is_object("a JSON Schema object, or leave it out", True)
    ] = None
    mode: Annotated[
        Literal["stateless", "sequence"],
        is_one_of(MODES, "sequence consumes recordings in order; only for stateful tools"),
    ] = "stateless"


class Recording(ContractModel):
    """A witnessed call at rest: the same shape as Contract A's witnessed_calls."""

    tool_name: Annotated[str, is_nonempty_str()]
    args: Annotated[dict[str, Any], is_object('stored flat, e.g. {"query": "Bluewing"}')]
    result: Any = None
    # wt-otel additive fields
    error: bool | str | None = Field(None, description="the call failed (true or the error text)")
    tool_call_id: str | None = None
    span_id: str | None = None
    source: Annotated[
        Literal["witnessed", "transcript", "manual", "recorded"] | None,
        is_one_of(SOURCES, optional=True),
        Field(description="server-witnessed (execute_tool span), the agent's transcript, written by hand "
                          "(universe add) or asked of the real tool server (universe record)"),
    ] = None
    extra: dict[str, Any] | None = None
    _args_encoded: bool = PrivateAttr(default=False)

    @model_validator(mode="wrap")
    @classmethod
    def _normalize_encoded_args(cls, data: Any, handler: ModelWrapValidatorHandler[Recording]) -> Recording:
        """The spec: args are stored flat and "the loader and recorder normalize". A JSON-encoded object
        (the OpenAI wire shape) is decoded here and `lint_universe` warns; anything else still fails."""
        encoded = False
        if isinstance(data, dict) and isinstance(data.get("args"), str):
            try:
                decoded = json.loads(data["args"])
            except (ValueError, RecursionError):
                decoded = None
            if isinstance(decoded, dict):
                data, encoded = {**data, "args": decoded}, True
        rec = handler(data)
        rec._args_encoded = encoded
        return rec


class Matching(ContractModel):
    on_miss: Policy = "fail_call"
    arg_keys: dict[str, list[str]] = Field(
        default_factory=dict, description="per tool, the arg keys a keyed match compares"
    )
    per_tool_on_miss: dict[str, Policy] = Field(default_factory=dict)


class Universe(ContractModel):
    """A Contract B universe file."""

    windtunnel_universe: Annotated[Literal[1], is_version("windtunnel_universe")]
    tools: list[UniverseTool] = []
    recordings: list[Recording] = []
    matching: Matching = Field(default_factory=Matching)
    # wt-otel additive fields
    provenance: dict[str, Any] | None = None
    redaction: dict[str, Any] | None = None
    stubbed_schemas: list[str] = Field(
        default_factory=list, description="tools whose input_schema is a stub: no definition was recorded"
    )

    @model_validator(mode="after")
    def _names_resolve(self) -> Universe:
        known: dict[str, int] = {}
        errors: list[tuple[Loc, str]] = []
        for i, tool in enumerate(self.tools):
            if tool.name in known:
                errors.append(
                    (("tools", i, "name"), f"{tool.name!r} is already defined at tools[{known[tool.name]}]")
                )
            known.setdefault(tool.name, i)

        def check(loc: Loc, name: str) -> None:
            if name not in known:
                errors.append(
                    (
                        loc,
                        f"must name a tool listed in tools, got {name!r} "
                        "(add a tools entry for it, or fix the name)",
                    )
                )

        for i, rec in enumerate(self.recordings):
            check(("recordings", i, "tool_name"), rec.tool_name)
        for field in ("arg_keys", "per_tool_on_miss"):
            for name in getattr(self.matching, field):
                check(("matching", field, name), name)
        for i, name in enumerate(self.stubbed_schemas):
            check(("stubbed_schemas", i), name)
        raise_at(errors)
        return self


def load_universe(data: Any) -> Universe:
    """Validate a parsed `*.universe.json`; raises `ContractError` listing every problem."""
    return load(Universe, data)


def lint_universe(universe: Universe) -> list[Problem]:
    """Recordings holding cut values can never match a replayed call; string-encoded args were normalized."""
    problems = [
        Problem(
            f"recordings[{i}].args",
            f"recordings[{i}].args is a JSON-encoded string: read as the object it holds; store it flat "
            '(e.g. {"query": "Bluewing"}, not "{\\"query\\": ...}")',
        )
        for i, rec in enumerate(universe.recordings)
        if rec._args_encoded
    ]
    return problems + [
        p
        for i, rec in enumerate(universe.recordings)
        for p in truncated(rec.args, ("recordings", i, "args"))
        + truncated(rec.result, ("recordings", i, "result"))
    ]
