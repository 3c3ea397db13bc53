"""Ask the real tool server for the answers a universe lacks (`wt-otel universe record`).

The source is what an agent's MCP client would be configured with: a streamable-HTTP URL, or the command
that starts a stdio server. It is reached through the `mcp` SDK's own client, once per call, and its
answers are kept as the tool returned them: `structuredContent` unless it is only the SDK's
`{"result": value}` wrapping of a non-object value (then the value), else the text content decoded.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from wt_otel.model.parts import decode_result


@dataclass(frozen=True)
class ToolAnswer:
    """One call's answer: the value, or `error` (the tool's own error text) when the server said isError."""

    tool: str
    args: dict[str, Any]
    result: Any
    error: str | None


def result_value(structured: Any, texts: Sequence[str]) -> Any:
    """What the tool returned, from a CallToolResult's structured and text content."""
    text = "".join(texts)
    if isinstance(structured, dict):
        if set(structured) == {"result"} and not isinstance(structured["result"], dict):
            return structured["result"]  # the SDK's wrap of a list, string or number: store what the tool gave
        return structured
    return decode_result(text) if texts else None


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


async def _ask(source: str, calls: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[dict[str, Any]],
                                                                                  list[ToolAnswer]]:
    from mcp import Client, StdioServerParameters
    from mcp.types import TextContent

    if is_url(source):
        client = Client(source)
    else:
        argv = shlex.split(source)
        if not argv:
            raise ValueError("--from is empty: give an MCP URL (http://...) or the command that starts the server")
        client = Client(StdioServerParameters(command=argv[0], args=argv[1:]), mode="legacy")
    async with client:
        listed = await client.list_tools()
        tools = [{"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
                 for t in listed.tools]
        answers = []
        for tool, args in calls:
            res = await client.call_tool(tool, args)
            texts = [b.text for b in res.content if isinstance(b, TextContent)]
            value = result_value(res.structured_content, texts)
            error = ("".join(texts) or "the tool reported an error") if res.is_error else None
            answers.append(ToolAnswer(tool, dict(args), None if error else value, error))
        return tools, answers


def ask_tool_server(source: str, calls: Sequence[tuple[str, dict[str, Any]]], timeout_s: float = 60.0
                    ) -> tuple[list[dict[str, Any]], list[ToolAnswer]]:
    """`(the server's tool listing, one answer per call)`. Raises OSError/ValueError/TimeoutError (and the
    SDK's own errors) when the server cannot be reached or speaks no MCP; the caller reports them."""

    async def bounded() -> tuple[list[dict[str, Any]], list[ToolAnswer]]:
        with anyio.fail_after(timeout_s):
            return await _ask(source, calls)

    return anyio.run(bounded)


__all__ = ["ToolAnswer", "ask_tool_server", "is_url", "result_value"]
