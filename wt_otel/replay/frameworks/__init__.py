"""Framework runtimes: replay an agent object as it is, through its framework's own entry point.

Each is a `Runtime` (components.Runtime) registered in the `wt_otel.runtimes` entry-point group as
`NAME:MODULE:ATTR`. What they share is here: where the runner serves the universe and the model
($WT_UNIVERSE_URL, $WT_LLM_BASE_URL, exported for the scenario's duration), and the turn result.
"""

from __future__ import annotations

import os
from typing import Any

from wt_otel.contracts.inject import RuntimeSpecError
from wt_otel.replay.runtimes import import_object

ENV_UNIVERSE_URL = "WT_UNIVERSE_URL"
ENV_LLM_BASE_URL = "WT_LLM_BASE_URL"


def served_urls() -> tuple[str | None, str | None]:
    """(universe MCP URL, model base URL or None for --llm live), as the runner exported them."""
    return os.environ.get(ENV_UNIVERSE_URL) or None, os.environ.get(ENV_LLM_BASE_URL) or None


def load_object(spec: str | None, framework: str) -> Any:
    """`MODULE:ATTR` -> the object (not necessarily callable: an Agent, a compiled graph)."""
    if not spec or ":" not in spec:
        raise RuntimeSpecError(f"the {framework} runtime needs a target: --runtime {framework}:MODULE:ATTR")
    module_name, _, attr = spec.partition(":")
    return import_object(module_name, attr, f"{framework}:{spec}")
