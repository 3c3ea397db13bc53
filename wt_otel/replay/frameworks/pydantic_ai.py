"""`--runtime pydantic-ai:MODULE:ATTR`: a `pydantic_ai.Agent`, replayed as it is.

Each user turn runs `agent.run` inside `agent.override(...)` (pydantic-ai's own test hook, undone when
the turn ends), so the user's agent is never changed:
- every `FunctionToolset` in the agent's toolsets (the `@agent.tool` / `@agent.tool_plain` tools, and
  function toolsets passed in `toolsets=`, also inside wrappers) is wrapped so that a call goes to the
  universe over MCP (the same server, matching and witness log as Contract C); the tool definitions the
  model sees are the agent's own, and the live bodies never run;
- the model (an `OpenAIChatModel`, `OpenAIResponsesModel` or `AnthropicModel`, or a name such as
  `openai:gpt-4o-mini`) is copied with a client at $WT_LLM_BASE_URL (the cassette with --llm replay, the
  recording proxy with --llm record); with --llm live it is left alone.
The user turns run as one conversation (each run gets the previous runs' `all_messages()` as
`message_history`); the reply is the run's output (JSON when structured), the tool calls the run's
`ToolCallPart`s except the output tools'.

Not intercepted (they run as the agent defines them; a tool call the universe did not witness makes the
run INVALID): toolsets that are not function toolsets (MCP servers, custom `AbstractToolset`s) and
wrappers that answer a call themselves before reaching the function toolset, provider-side native tools
(web search, code execution), models of other providers (Gemini, Bedrock...), and a model passed per run
to `agent.run(model=...)` inside the user's own code. No `deps` are passed (an agent whose instructions
need them cannot run).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from wt_otel.contracts.inject import RuntimeSpecError, ToolCall
from wt_otel.replay.frameworks import (
    FrameworkRuntime,
    Universe,
    api_key,
    decoded_arguments,
    load_object,
    require_universe,
)

NAME = "pydantic-ai"
_OPENAI_PREFIXES = {"openai": "chat", "openai-chat": "chat", "openai-responses": "responses"}


def _universe_toolset(wrapped: Any, universe: Universe) -> Any:
    """`wrapped` (a FunctionToolset) with every call answered by the universe."""
    from dataclasses import dataclass

    from pydantic_ai.toolsets import WrapperToolset

    @dataclass
    class UniverseToolset(WrapperToolset[Any]):
        async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
            return await universe.call(name, tool_args)

    return UniverseToolset(wrapped)


class PydanticAIRuntime(FrameworkRuntime):
    def __init__(self, agent: Any, *, name: str) -> None:
        try:
            from pydantic_ai import Agent
        except ImportError as exc:
            raise RuntimeSpecError(f"{name}: pydantic-ai is not installed ({exc})") from None
        if not isinstance(agent, Agent):
            raise RuntimeSpecError(f"{name}: expected a pydantic_ai.Agent, got {type(agent).__name__}")
        super().__init__(name)
        self.agent = agent

    def _warn(self, text: str) -> None:
        line = f"{self.name}: {text}"
        if line not in self.warnings:
            self.warnings.append(line)

    def _model(self, llm_url: str) -> Any:
        """The agent's model with its client at `llm_url` (retries off: a divergence is final)."""
        import openai
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        model = self.agent.model
        if model is None:
            raise RuntimeSpecError(f"{self.name}: the agent has no model (pass one to Agent(...))")
        if isinstance(model, str):
            prefix, _, model_name = model.partition(":")
            kind = _OPENAI_PREFIXES.get(prefix)
            if kind is None:
                self._warn(f"model {model!r} is not an OpenAI or Anthropic model; its calls are not pointed at "
                           "the cassette")
                return None
            client = openai.AsyncOpenAI(base_url=llm_url, api_key=api_key(), max_retries=0)
            cls = OpenAIChatModel if kind == "chat" else OpenAIResponsesModel
            return cls(model_name, provider=OpenAIProvider(openai_client=client))
        provider: Any
        if isinstance(model, OpenAIChatModel | OpenAIResponsesModel):
            provider = OpenAIProvider(openai_client=openai.AsyncOpenAI(base_url=llm_url, api_key=api_key(),
                                                                      max_retries=0))
        elif type(model).__name__ == "AnthropicModel":
            import anthropic
            from pydantic_ai.providers.anthropic import AnthropicProvider

            provider = AnthropicProvider(anthropic_client=anthropic.AsyncAnthropic(
                base_url=llm_url, api_key=api_key("ANTHROPIC_API_KEY"), max_retries=0))
        else:
            self._warn(f"model {type(model).__name__} is not an OpenAI or Anthropic model; its calls are not "
                       "pointed at the cassette")
            return None
        clone = copy.copy(model)  # same name, profile and settings; only the client changes
        clone._provider = provider
        return clone

    def _toolsets(self, universe: Universe) -> list[Any]:
        from pydantic_ai.toolsets import FunctionToolset

        def answer(toolset: Any) -> Any:
            return _universe_toolset(toolset, universe) if isinstance(toolset, FunctionToolset) else toolset

        return [toolset.visit_and_replace(answer) for toolset in self.agent.toolsets]

    async def _turn(self, session_id: str, text: str) -> tuple[str, list[ToolCall]]:
        from pydantic_ai.messages import ModelResponse, ToolCallPart

        universe_url, llm_url = require_universe(self.name)
        history = self._history.get(session_id)
        overrides: dict[str, Any] = {}
        if llm_url is not None:
            model = self._model(llm_url)
            if model is not None:
                overrides["model"] = model
        async with Universe(universe_url) as universe:
            # tools=[] empties the agent's own function toolset; its wrapped copy comes back in toolsets
            with self.agent.override(tools=[], toolsets=self._toolsets(universe), **overrides):
                result = await self.agent.run(text, message_history=history)
        self._history[session_id] = result.all_messages()
        output_tools = {d.name for d in getattr(getattr(self.agent, "_output_toolset", None), "_tool_defs", [])}
        calls = [ToolCall(name=part.tool_name, arguments=decoded_arguments(part.args))
                 for message in result.new_messages() if isinstance(message, ModelResponse)
                 for part in message.parts
                 if isinstance(part, ToolCallPart) and part.tool_name not in output_tools]
        output = result.output
        return (output if isinstance(output, str) else json.dumps(_plain(output), default=str)), calls


def _plain(output: Any) -> Any:
    """A structured output as JSON data (pydantic models dumped)."""
    dump = getattr(output, "model_dump", None)
    return dump(mode="json") if callable(dump) else output


def factory(arg: str | None, *, url: str | None = None, timeout_s: float | None = None) -> PydanticAIRuntime:
    """`pydantic-ai:MODULE:ATTR` (entry point in the `wt_otel.runtimes` group)."""
    return PydanticAIRuntime(load_object(arg, NAME), name=f"{NAME}:{arg}")
