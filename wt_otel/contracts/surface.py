"""A golden surface (`*.surface.json`, `wt_surface: 1`): an endpoint's reported prompt surface, stored to diff
later runs against (0002-inject-protocol.md, surface introspection: "tooling that diffs surfaces against
goldens is driver and CLI territory").

A golden holds only a surface that validated (`reported`): an `invalid` or
`unavailable` probe is never stored as if it were one. It is the system
prompt, so handle the file as sensitively as the prompt itself.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from wt_otel.contracts.inject import Surface
from wt_otel.contracts.problems import ContractModel, is_version, load

SURFACE_SUFFIX = ".surface.json"


class SurfaceGolden(ContractModel):
    """The stored surface and where it was reported from."""

    wt_surface: Annotated[Literal[1], is_version("wt_surface")]
    source: str = Field(description="the endpoint URL, trace file or data dir it came from")
    fetched_at: str | None = Field(None, description="ISO 8601")
    model: str | None = Field(None, description="the model the endpoint reported, when it did")
    surface: Surface = Field(description="reported, not rendered: the endpoint's account of its configured surface")


def load_golden(data: object) -> SurfaceGolden:
    """Validate a parsed `*.surface.json`; raises `ContractError` listing every problem."""
    return load(SurfaceGolden, data)
