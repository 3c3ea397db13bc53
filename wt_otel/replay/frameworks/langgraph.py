"""`--runtime langgraph:MODULE:ATTR`: a compiled LangGraph graph (what `langchain.agents.create_agent`
returns), replayed as it is.

For each user turn, and only for its duration:
- every tool of every `ToolNode` in the graph is swapped for a stand-in with the same name that asks the
  universe over MCP (the same server, matching and witness log as Contract C); the live body never runs.
  The model still sees the original tools (create_agent binds them separately), so the request is the
  recorded one;
- every langchain-openai chat model (`ChatOpenAI`, `AzureChatOpenAI`, ... anything built on
  `BaseChatOpenAI`) reachable from the graph's nodes talks to $WT_LLM_BASE_URL (the cassette with
  --llm replay, the recording proxy with --llm record), Chat Completions or Responses API as configured;
  with --llm live it is left alone.
Both are put back afterwards, so the user's graph is unchanged between turns and after the run.

The graph runs with `invoke`, as users call it (on a worker thread; the MCP client stays on the turn's
event loop). The user turns run as one conversation: on a graph with a checkpointer, as one thread
(`configurable.thread_id` = the run's session id, so each run starts a fresh thread); without one, the
whole message history is passed back in each turn. The reply is the last AI message's text, the tool
calls the AI messages' `tool_calls` of the turn.

Not intercepted (they run as the graph defines them; a tool call the universe did not witness makes the
run INVALID): tools executed outside a `ToolNode` (a custom node calling a function, a `wrap_tool_call`
middleware that answers without calling the handler), provider-side tools (web search...), chat models
that are not langchain-openai's (`ChatAnthropic`, a model built inside a node on every call: those are
not reachable from the graph), and subgraphs compiled separately and called from a node function.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
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

NAME = "langgraph"
_MAX_DEPTH = 8  # how far the search for models and tool nodes follows attributes and closures


def _reachable(root: Any) -> Iterator[Any]:
    """Objects reachable from a graph: its nodes' runnables, their steps and bound objects, and the
    variables closed over by node functions (create_agent keeps its model in a closure). Bounded, no
    revisits; only containers and runnables are followed, never arbitrary user objects' attributes."""
    from langchain_core.runnables import Runnable

    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(root, 0)]
    while stack:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(obj))
        yield obj
        children: list[Any] = []
        if isinstance(obj, dict):
            children = list(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            children = list(obj)
        elif callable(obj) and getattr(obj, "__closure__", None):
            children = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        if isinstance(obj, Runnable) or type(obj).__name__ in ("PregelNode", "CompiledStateGraph"):
            for attr in ("nodes", "bound", "steps", "first", "middle", "last", "func", "afunc", "runnable",
                         "default", "branches", "mapper", "fallbacks"):
                value = getattr(obj, attr, None)
                if value is not None:
                    children.append(value)
        stack.extend((c, depth + 1) for c in children)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


class _Patch:
    """Attribute swaps on the user's objects for one turn, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def set_item(self, mapping: dict[str, Any], key: str, value: Any) -> None:
        self._undo.append((mapping, key, mapping[key]))
        mapping[key] = value

    def set_attr(self, obj: Any, attr: str, value: Any) -> None:
        self._undo.append((obj.__dict__, attr, obj.__dict__.get(attr)))
        obj.__dict__[attr] = value  # past pydantic's validate-on-assignment: these are client handles

    def undo(self) -> None:
        while self._undo:
            target, key, value = self._undo.pop()
            target[key] = value


def _stand_in(tool: Any, universe: Universe, loop: asyncio.AbstractEventLoop) -> Any:
    """A tool named like `tool` whose body asks the universe. Arguments are the ones the model sent
    (the tool call's fields), not LangGraph's injected state or runtime. The graph runs on a worker
    thread (`invoke`, as users call it); the MCP client lives on the turn's event loop."""
    from langchain_core.tools import StructuredTool

    schema = getattr(tool, "tool_call_schema", None)
    fields = set(getattr(schema, "model_fields", {}) or {}) if isinstance(schema, type) else set()

    def model_args(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in kwargs.items() if not fields or k in fields}

    async def ask_universe(**kwargs: Any) -> str:
        return await universe.call(tool.name, model_args(kwargs))

    def ask_universe_sync(**kwargs: Any) -> str:
        return asyncio.run_coroutine_threadsafe(universe.call(tool.name, model_args(kwargs)), loop).result()

    return StructuredTool(name=tool.name, description=tool.description or tool.name, args_schema=tool.args_schema,
                          func=ask_universe_sync, coroutine=ask_universe,
                          return_direct=getattr(tool, "return_direct", False), response_format="content")


class LangGraphRuntime(FrameworkRuntime):
    def __init__(self, graph: Any, *, name: str) -> None:
        try:
            from langgraph.pregel import Pregel
        except ImportError as exc:
            raise RuntimeSpecError(f"{name}: langgraph is not installed ({exc})") from None
        if not isinstance(graph, Pregel):
            hint = " (call .compile() on a StateGraph)" if type(graph).__name__ == "StateGraph" else ""
            raise RuntimeSpecError(f"{name}: expected a compiled LangGraph graph (langchain.agents.create_agent "
                                   f"returns one), got {type(graph).__name__}{hint}")
        super().__init__(name)
        self.graph = graph
        self._warned: set[str] = set()

    def _warn(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            self.warnings.append(f"{self.name}: {text}")

    def _rewire(self, universe: Universe, llm_url: str | None, patch: _Patch,
                loop: asyncio.AbstractEventLoop) -> None:
        from langgraph.prebuilt import ToolNode

        models: list[Any] = []
        tool_nodes = 0
        for obj in _reachable(self.graph):
            if isinstance(obj, ToolNode):
                tool_nodes += 1
                tools = obj.tools_by_name
                for tool_name, tool in list(tools.items()):
                    patch.set_item(tools, tool_name, _stand_in(tool, universe, loop))
            elif llm_url is not None and _is_chat_model(obj):
                models.append(obj)
        if not tool_nodes:
            self._warn("no ToolNode found in the graph: its tools are not answered by the universe")
        if llm_url is None:
            return
        for model in models:
            _point_at(model, llm_url, patch)
        if not models:
            self._warn("no langchain-openai chat model reachable from the graph: its model calls are not "
                       "pointed at the cassette")

    async def _turn(self, session_id: str, text: str) -> tuple[str, list[ToolCall]]:
        universe_url, llm_url = require_universe(self.name)
        message = {"role": "user", "content": text}
        checkpointed = getattr(self.graph, "checkpointer", None) not in (None, False)
        config: Any = {"configurable": {"thread_id": session_id}} if checkpointed else None
        history = [] if checkpointed else self._history.get(session_id, [])
        patch = _Patch()
        async with Universe(universe_url) as universe:
            try:
                self._rewire(universe, llm_url, patch, asyncio.get_running_loop())
                # invoke, as users call it (a sync-only middleware breaks under ainvoke), on a worker thread
                graph_input: Any = {"messages": [*history, message]}
                state = await asyncio.to_thread(self.graph.invoke, graph_input, config)
            finally:
                patch.undo()
        messages = list(state.get("messages", [])) if isinstance(state, dict) else []
        if not checkpointed:
            self._history[session_id] = messages
        turn = _this_turn(messages, text)
        calls = [ToolCall(name=str(c.get("name")), arguments=decoded_arguments(c.get("args")))
                 for m in turn for c in (getattr(m, "tool_calls", None) or [])]
        replies = [m for m in turn if getattr(m, "type", None) == "ai"]
        return (_content_text(replies[-1].content) if replies else ""), calls


def _is_chat_model(obj: Any) -> bool:
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:
        return False
    return isinstance(obj, BaseChatOpenAI)


def _point_at(model: Any, base_url: str, patch: _Patch) -> None:
    """The model's four OpenAI clients replaced by ones at `base_url` (retries off: a divergence is final)."""
    import openai

    sync = openai.OpenAI(base_url=base_url, api_key=api_key(), max_retries=0)
    asynchronous = openai.AsyncOpenAI(base_url=base_url, api_key=api_key(), max_retries=0)
    patch.set_attr(model, "root_client", sync)
    patch.set_attr(model, "root_async_client", asynchronous)
    patch.set_attr(model, "client", sync.chat.completions)
    patch.set_attr(model, "async_client", asynchronous.chat.completions)


def _this_turn(messages: list[Any], text: str) -> list[Any]:
    """The messages after the last human message carrying `text` (the turn just injected)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if getattr(m, "type", None) == "human" and _content_text(m.content) == text:
            return messages[i + 1:]
    return messages


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: the text ones
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                       if isinstance(b, str) or (isinstance(b, dict) and b.get("type") in ("text", None)))
    return json.dumps(content, default=str)


def factory(arg: str | None, *, url: str | None = None, timeout_s: float | None = None) -> LangGraphRuntime:
    """`langgraph:MODULE:ATTR` (entry point in the `wt_otel.runtimes` group)."""
    return LangGraphRuntime(load_object(arg, NAME), name=f"{NAME}:{arg}")
