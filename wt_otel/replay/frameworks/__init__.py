"""Framework runtimes: replay an agent object as it is, through its framework's own entry point.

Each is a `Runtime` (components.Runtime) registered in the `wt_otel.runtimes` entry-point group as
`NAME:MODULE:ATTR`. What they share is here: where the runner serves the universe and the model
($WT_UNIVERSE_URL, $WT_LLM_BASE_URL, exported for the scenario's duration), and the turn result.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from wt_otel.contracts.inject import RuntimeSpecError, SurfaceProbe, ToolCall, TurnResult
from wt_otel.replay.runtimes import describe_exception, import_object

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


class FrameworkRuntime:
    """What every framework runtime shares: a conversation history per session id, no surface, and `inject`
    running the framework's async turn (`_turn`), the agent's own failures scored rather than raised."""

    url: str | None = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.warnings: list[str] = []
        self._history: dict[str, list[Any]] = {}

    def reset(self) -> None:
        self._history.clear()

    def surface(self) -> SurfaceProbe:
        return SurfaceProbe(status="unavailable", detail=f"{self.name}: the framework runtime reports no surface")

    def close(self) -> None:
        """Nothing held between turns: each turn opens and closes its own clients."""

    async def _turn(self, session_id: str, text: str) -> tuple[str, list[ToolCall]]:
        raise NotImplementedError

    def inject(self, session_id: str, text: str) -> TurnResult:
        started = time.perf_counter()
        try:
            reply, calls = asyncio.run(self._turn(session_id, text))
            error = None
        except RuntimeSpecError:
            raise
        except Exception as exc:  # the agent's own failure (a model error, a divergence): scored, not a crash
            reply, calls, error = "", [], describe_exception(exc)
        return TurnResult(reply, calls, error, round((time.perf_counter() - started) * 1000, 1))


def tool_output(result: Any) -> str:
    """An MCP CallToolResult as the tool output a framework hands its model: the text content (strings
    verbatim, other results as JSON, as the universe server renders them)."""
    parts = [getattr(c, "text", None) for c in getattr(result, "content", None) or []]
    text = "".join(p for p in parts if isinstance(p, str))
    structured = getattr(result, "structured_content", None)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    return text


def decoded_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as an object: a JSON string decoded, anything undecodable kept under
    `_raw_arguments` (never silently `{}`: the universe reports the miss with what was sent)."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str | bytes) else raw
    except ValueError:
        return {"_raw_arguments": raw}
    return value if isinstance(value, dict) else {"_raw_arguments": raw}


class Universe:
    """The scenario's universe as an MCP client for one turn: `await call(name, arguments)` -> tool output.

    Every call goes over MCP to the server `wt-otel run` serves, so the universe's matching, miss policy
    and witness log are the ones Contract C agents get."""

    def __init__(self, url: str) -> None:
        from mcp import Client

        self._client = Client(url)
        self.calls = 0

    async def __aenter__(self) -> Universe:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._client.__aexit__(*exc)

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        self.calls += 1
        return tool_output(await self._client.call_tool(name, arguments))


def require_universe(name: str) -> tuple[str, str | None]:
    """(universe URL, model URL or None) or a usage error when not run under `wt-otel run`."""
    universe_url, llm_url = served_urls()
    if not universe_url:
        raise RuntimeSpecError(f"{name}: no universe URL (${ENV_UNIVERSE_URL}): run it with wt-otel run")
    return universe_url, llm_url


def api_key(env: str = "OPENAI_API_KEY") -> str:
    """The provider key the client sends: the user's own (a recording proxy forwards it), or a placeholder
    that the cassette server ignores."""
    return os.environ.get(env) or "sk-wt-replay"
