"""The agent itself: an OpenAI Agents SDK `Agent` whose tools come from an MCP server and whose model is any
OpenAI-compatible Chat Completions endpoint, run one Contract C turn at a time.

Why it is shaped this way:

- Chat Completions (`OpenAIChatCompletionsModel`), not the Responses API: any OpenAI-compatible server
  speaks it (wt-otel's cassette server replays both, and Anthropic Messages).
- A fresh MCP connection per turn (and per surface probe), not one held for the process: `wt-otel run`
  serves each scenario's universe anew, often on the same URL, and a session held across that restart would
  talk to a server that no longer knows it. A loopback MCP handshake costs milliseconds.
- Conversation memory is a dict of input-item lists keyed by `session_id`: each inject carries only the
  newest turn (0002, the session model). A turn that fails leaves its session's history as it was.
- MCP structured content is what the model sees (`use_structured_content=True`): the tool output is then the
  JSON text of the tool's result, so the `execute_tool` span carries the result itself (which `wt-otel import`
  decodes into the universe recording) rather than the SDK's `{"type": "text", "text": ...}` wrapper, and a
  universe replaying that recording shows the model byte-for-byte the same text.
- `max_retries=0` on the model client: a bench must see a flaky model or a cassette miss, not a retry that
  papered over it.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, RunHooks, Runner, ToolCallItem
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

from wt_otel.recording import current_incident

from .config import AgentConfig

SURFACE_TIMEOUT_S = 10.0
CANCEL_GRACE_S = 1.0  # how long an expired turn may take to unwind before its error envelope leaves anyway
UNPARSED_ARGUMENTS = "_unparsed_arguments"


@dataclass
class TurnOutcome:
    """One turn's result in Contract C terms: `tool_calls` is always a list, `error` None or non-empty."""

    reply: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    model: str | None = None  # the model the last chat completion said answered (its response's `model`)


# the turn's list of answering models: the client wrapper below appends to it (the call runs in the turn's task)
_answered_by: ContextVar[list[str] | None] = ContextVar("wt_answered_by", default=None)


def _remember_models(client: AsyncOpenAI) -> None:
    """Note each chat completion's `model` (what answered, e.g. a dated snapshot), for the inject response's
    additive `model`; this client's `create` only, nothing process-wide."""
    create = client.chat.completions.create

    async def create_and_remember(*args: Any, **kwargs: Any) -> Any:
        response = await create(*args, **kwargs)
        models, model = _answered_by.get(), getattr(response, "model", None)  # a stream has no `model` here
        if models is not None and isinstance(model, str) and model:
            models.append(model)
        return response

    client.chat.completions.create = create_and_remember  # type: ignore[method-assign]


def parse_arguments(raw: Any) -> dict[str, Any]:
    """The SDK's JSON-string arguments as the object the wire requires.

    Arguments that are not a JSON object are never turned into `{}` (that would hide what the model sent):
    they travel verbatim as `{"_unparsed_arguments": raw}`.
    """
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {UNPARSED_ARGUMENTS: raw}
    return value if isinstance(value, dict) else {UNPARSED_ARGUMENTS: raw}


def tool_calls_of(items: list[Any]) -> list[dict[str, Any]]:
    """Every tool call among a run's new items, in order, as `{"name", "arguments": object}`."""
    calls = []
    for item in items:
        if isinstance(item, ToolCallItem):
            raw = item.raw_item
            arguments = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
            calls.append({"name": item.tool_name or "", "arguments": parse_arguments(arguments)})
    return calls


class ToolCallRecorder(RunHooks[Any]):
    """Tool calls as they start, for a turn that never returns a result (timeout, model or tool failure).

    A successful turn reports its calls from the run's new items instead; this list is the "whatever calls
    were witnessed before the failure" half of 0002's agent-level error rule.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        name = getattr(context, "tool_name", None) or getattr(tool, "name", "")
        self.calls.append({"name": name, "arguments": parse_arguments(getattr(context, "tool_arguments", None))})


def tool_definition(tool: Any) -> dict[str, Any]:
    """An MCP tool as a Contract A tool definition (name, description, input_schema, result_schema)."""
    definition: dict[str, Any] = {"name": tool.name}
    if tool.description:
        definition["description"] = tool.description
    definition["input_schema"] = tool.input_schema or {"type": "object"}
    if getattr(tool, "output_schema", None):
        definition["result_schema"] = tool.output_schema
    return definition


class ReferenceAgent:
    """Conversation memory plus the three Contract C operations: `inject`, `reset`, `surface`.

    All methods run on the server's event loop; `start()` there first (the model client binds to it).
    """

    def __init__(self, config: AgentConfig) -> None:
        self.configured = config  # what the environment said; `retarget` goes back to it
        self.config = config
        self.histories: dict[str, list[Any]] = {}
        self._inflight: set[asyncio.Task[Any]] = set()
        self._client: AsyncOpenAI | None = None
        self._model: OpenAIChatCompletionsModel | None = None

    async def start(self) -> None:
        self._client = AsyncOpenAI(
            base_url=self.config.openai_base_url, api_key=self.config.openai_api_key, max_retries=0
        )
        _remember_models(self._client)
        self._model = OpenAIChatCompletionsModel(model=self.config.model, openai_client=self._client)

    async def aclose(self) -> None:
        await self.reset()
        if self._client is not None:
            await self._client.close()

    # ------------------------------------------------------------ Contract C operations

    async def inject(self, session_id: str, text: str, timeout_s: float, incident: str | None = None) -> TurnOutcome:
        """Run one turn within `timeout_s`; every failure, its own deadline included, becomes `error`."""
        recorder = ToolCallRecorder()
        token = current_incident.set(incident)  # the task below copies this context
        try:
            task = asyncio.create_task(self._run_turn(session_id, text, timeout_s, recorder))
        finally:
            current_incident.reset(token)
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
            return TurnOutcome(tool_calls=recorder.calls, error=f"timed out after timeout_s={timeout_s:g} s")
        if task.cancelled():
            return TurnOutcome(tool_calls=recorder.calls, error="the turn was cancelled by /wt/reset")
        if (exc := task.exception()) is not None:
            return TurnOutcome(tool_calls=recorder.calls, error=f"{type(exc).__name__}: {exc}")
        return task.result()

    async def reset(self) -> None:
        """Destroy every session, synchronously: in-flight turns are cancelled and awaited first, so none
        can write its history back after the wipe."""
        for task in list(self._inflight):
            task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        self.histories.clear()

    async def retarget(self, universe_url: str | None = None, llm_base_url: str | None = None) -> None:
        """Follow the servers a `/wt/reset` names (`wt-otel run` serves each scenario on free ports), or, when
        it names none, go back to the configured ones. Called after the wipe, so no turn is in flight."""
        if not self.configured.follow_reset_urls:
            return
        mcp_url = universe_url or self.configured.mcp_url
        base_url = llm_base_url or self.configured.openai_base_url
        if base_url != self.config.openai_base_url and self._client is not None:
            await self._client.close()
            self.config = replace(self.config, openai_base_url=base_url)
            await self.start()
        self.config = replace(self.config, mcp_url=mcp_url, openai_base_url=base_url)

    async def surface(self) -> dict[str, Any]:
        """What a fresh session's next turn is composed from: the instructions and the MCP tool list."""
        tools: list[dict[str, Any]] = []
        if self.config.mcp_url:
            async with self._mcp_server(SURFACE_TIMEOUT_S) as server:
                tools = [tool_definition(t) for t in await server.list_tools()]
        instructions = self.config.instructions
        return {
            "system_instructions": [{"type": "text", "content": instructions}] if instructions else [],
            "tool_definitions": tools,
            "extra_segments": [],
        }

    # ------------------------------------------------------------ one turn

    async def _run_turn(self, session_id: str, text: str, timeout_s: float, recorder: ToolCallRecorder) -> TurnOutcome:
        models: list[str] = []
        _answered_by.set(models)  # this task's own context: concurrent turns never mix
        turn_input = [*self.histories.get(session_id, []), {"role": "user", "content": text}]
        async with AsyncExitStack() as stack:
            servers = [await stack.enter_async_context(self._mcp_server(timeout_s))] if self.config.mcp_url else []
            agent = Agent(name=self.config.agent_name, instructions=self.config.instructions,
                          model=self._model, mcp_servers=servers)
            run_config = RunConfig(workflow_name=self.config.agent_name, group_id=session_id,
                                   trace_include_sensitive_data=True)
            result = await Runner.run(agent, turn_input, run_config=run_config, hooks=recorder)
        self.histories[session_id] = result.to_input_list()
        reply = result.final_output if isinstance(result.final_output, str) else str(result.final_output or "")
        calls = tool_calls_of(result.new_items)
        if not reply:  # the wire allows an empty reply only next to an error
            return TurnOutcome(tool_calls=calls, error="the model returned an empty reply",
                               model=models[-1] if models else None)
        return TurnOutcome(reply=reply, tool_calls=calls, model=models[-1] if models else None)

    def _mcp_server(self, timeout_s: float) -> MCPServerStreamableHttp:
        return MCPServerStreamableHttp(
            params={"url": self.config.mcp_url, "timeout": timeout_s},
            name="tools",
            client_session_timeout_seconds=timeout_s,
            use_structured_content=True,
        )
