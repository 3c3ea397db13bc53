"""`--runtime openai-agents:MODULE:ATTR`: an OpenAI Agents SDK `Agent`, replayed as it is.

Per scenario run, the user's agent is cloned (never changed in place) so that:
- every `FunctionTool` keeps its name, description and schema (what the model sees is unchanged) but is
  answered by the universe over MCP, the same server, matching and witness log as Contract C; its live
  body never runs;
- its `mcp_servers` are replaced by the universe's MCP server (their tool list then comes from the
  recording);
- its model talks to $WT_LLM_BASE_URL (the cassette with --llm replay, the recording proxy with --llm
  record) with the model class and name it has (a name or None: the SDK's default, the Responses API);
  with --llm live it is left alone;
- handoff targets get the same treatment, recursively.
The user turns run as one conversation through `Runner.run` (the history carried with
`result.to_input_list()`); the reply is `final_output`, the tool calls the run's `ToolCallItem`s.

Not intercepted (they run as the agent defines them; the run reports them, and a tool call the
universe did not witness makes the run INVALID): hosted tools (web/file search, code interpreter,
computer use), agents-as-tools (`Agent.as_tool`: the inner agent's own tools are not rewired),
guardrails' own model calls through another client, and a `Model` subclass that is not one of the
SDK's two OpenAI models.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from wt_otel.contracts.inject import RuntimeSpecError, ToolCall
from wt_otel.replay.frameworks import FrameworkRuntime, load_object, served_urls

NAME = "openai-agents"


def _text(result: Any) -> str:
    """An MCP CallToolResult as the tool output the model sees."""
    parts = [getattr(c, "text", None) for c in getattr(result, "content", []) or []]
    text = "".join(p for p in parts if isinstance(p, str))
    if not text and getattr(result, "structuredContent", None) is not None:
        text = json.dumps(result.structuredContent)
    return text


class OpenAIAgentsRuntime(FrameworkRuntime):
    def __init__(self, agent: Any, *, name: str) -> None:
        import agents

        if not isinstance(agent, agents.Agent):
            raise RuntimeSpecError(f"{name}: expected an agents.Agent, got {type(agent).__name__}")
        super().__init__(name)
        self.agent = agent

    def _model(self, model: Any, client: Any) -> Any:
        import agents

        if model is None or isinstance(model, str):
            name = model or agents.models.get_default_model()
            return agents.OpenAIResponsesModel(name, client)
        for cls in (agents.OpenAIResponsesModel, agents.OpenAIChatCompletionsModel):
            if isinstance(model, cls):
                return cls(model.model, client)
        self.warnings.append(f"{self.name}: model {type(model).__name__} is not an OpenAI SDK model; its calls "
                             "are not pointed at the cassette")
        return model

    def _rewire(self, agent: Any, universe: Any, client: Any, seen: dict[int, Any]) -> Any:
        import agents

        if id(agent) in seen:
            return seen[id(agent)]

        async def invoke(tool_name: str, ctx: Any, arguments: str) -> str:
            try:
                args = json.loads(arguments or "{}")
            except ValueError:
                args = {"_raw_arguments": arguments}
            return _text(await universe.call_tool(tool_name, args if isinstance(args, dict) else {}))

        def answered(tool: Any) -> Any:
            async def on_invoke(ctx: Any, arguments: str) -> str:
                return await invoke(tool.name, ctx, arguments)
            return dataclasses.replace(tool, on_invoke_tool=on_invoke)

        tools = [answered(t) if isinstance(t, agents.FunctionTool) else t for t in agent.tools]
        changes: dict[str, Any] = {"tools": tools, "mcp_servers": [universe] if agent.mcp_servers else []}
        if client is not None:
            changes["model"] = self._model(agent.model, client)
        clone = agent.clone(**changes)
        seen[id(agent)] = clone
        clone.handoffs = [self._rewire(h, universe, client, seen) if isinstance(h, agents.Agent) else h
                          for h in agent.handoffs]
        return clone

    async def _turn(self, session_id: str, text: str) -> tuple[str, list[ToolCall]]:
        import agents
        import openai
        from agents.mcp import MCPServerStreamableHttp

        universe_url, llm_url = served_urls()
        if not universe_url:
            raise RuntimeSpecError(f"{self.name}: no universe URL ($WT_UNIVERSE_URL): run it with wt-otel run")
        client = (openai.AsyncOpenAI(base_url=llm_url, api_key=os.environ.get("OPENAI_API_KEY") or "sk-wt-replay",
                                     max_retries=0) if llm_url else None)
        universe = MCPServerStreamableHttp(params={"url": universe_url}, name="wt-universe",
                                           cache_tools_list=True)
        await universe.connect()
        try:
            agent = self._rewire(self.agent, universe, client, {})
            history = self._history.get(session_id, [])
            result = await agents.Runner.run(agent, [*history, {"role": "user", "content": text}],
                                             run_config=agents.RunConfig(tracing_disabled=True))
        finally:
            await universe.cleanup()
        self._history[session_id] = result.to_input_list()
        calls = []
        for item in result.new_items:
            if isinstance(item, agents.ToolCallItem):
                raw = item.raw_item
                name = getattr(raw, "name", None) or (raw.get("name") if isinstance(raw, dict) else None)
                arguments = getattr(raw, "arguments", None) or (raw.get("arguments") if isinstance(raw, dict)
                                                                 else None)
                try:
                    args = json.loads(arguments or "{}")
                except ValueError:
                    args = {"_raw_arguments": arguments}
                calls.append(ToolCall(name=str(name), arguments=args if isinstance(args, dict) else {}))
        output = result.final_output
        return (output if isinstance(output, str) else json.dumps(output, default=str)), calls


def factory(arg: str | None, *, url: str | None = None, timeout_s: float | None = None) -> OpenAIAgentsRuntime:
    """`openai-agents:MODULE:ATTR` (entry point in the `wt_otel.runtimes` group)."""
    return OpenAIAgentsRuntime(load_object(arg, NAME), name=f"{NAME}:{arg}")
