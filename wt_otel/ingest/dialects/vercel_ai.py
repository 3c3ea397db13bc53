"""Vercel AI SDK (JavaScript) `ai.*` attributes: AI SDK 4-6, and 7 without `@ai-sdk/otel`.

Model-call spans (`ai.generateText.doGenerate`, `ai.streamText.doStream`, ...) carry
`ai.prompt.messages` (the provider-format prompt: AI SDK message parts `tool-call` /
`tool-result`), `ai.prompt.tools` (one JSON string per tool), and the answer as
`ai.response.text` / `ai.response.toolCalls`. The outer `ai.generateText` span holds
`ai.prompt` (`{system, messages | prompt}`) and the final `ai.response.text`: the
same run again, read as transcript evidence. `ai.toolCall` spans witness each call
(`ai.toolCall.name`, `.id`, `.args`, `.result`).
"""

from __future__ import annotations

from typing import Any

from wt_otel.ingest.dialects.common import as_list, base_call, tool_definition
from wt_otel.ingest.dialects.tools import tool_execution
from wt_otel.ingest.messages import read_messages, split_system
from wt_otel.model.parts import decode_json
from wt_otel.model.session import LLMCall, Observation
from wt_otel.model.spans import SpanRecord

NAME = "vercel_ai"


def extract(span: SpanRecord) -> list[Observation]:
    a = span.attributes
    if "ai.toolCall.name" in a:
        return [tool_execution(span, str(a["ai.toolCall.name"]), a.get("ai.toolCall.args", a.get("ai.toolCall.input")),
                               a.get("ai.toolCall.result", a.get("ai.toolCall.output")), a.get("ai.toolCall.id"),
                               NAME)]
    if "ai.prompt.messages" in a:
        call = _call(span)
        call.system_instructions, call.input_messages = split_system(read_messages(a["ai.prompt.messages"]))
        call.output_messages = _answer(a)
        tools = [decode_json(t)[0] for t in as_list(a.get("ai.prompt.tools")) or []]
        call.tool_definitions = [d for d in map(tool_definition, tools) if d]
        return [call]
    if "ai.prompt" in a and str(a.get("ai.operationId") or span.name).startswith("ai."):
        prompt, _ = decode_json(a["ai.prompt"])
        call = _call(span)
        call.is_transcript = True
        if isinstance(prompt, dict):
            system = prompt.get("system")
            if isinstance(system, str) and system:
                call.system_instructions = [{"type": "text", "content": system}]
            call.input_messages = split_system(read_messages(prompt.get("messages") or prompt.get("prompt") or []))[1]
        else:
            call.input_messages = read_messages(prompt)
        call.output_messages = _answer(a)
        return [call]
    return []


def _call(span: SpanRecord) -> LLMCall:
    a = span.attributes
    call = base_call(span, NAME)
    call.model = str(a.get("ai.model.id") or call.model or "") or None
    provider = a.get("ai.model.provider") or call.provider
    call.provider = str(provider).split(".")[0].lower() if provider else None
    reason = a.get("ai.response.finishReason")
    if reason and not call.finish_reasons:
        call.finish_reasons = [str(reason)]
    return call


def _answer(a: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[Any] = []
    if isinstance(a.get("ai.response.text"), str) and a["ai.response.text"]:
        blocks.append({"type": "text", "text": a["ai.response.text"]})
    for c in as_list(a.get("ai.response.toolCalls")) or []:
        if isinstance(c, dict):
            blocks.append({"type": "tool-call", "toolCallId": c.get("toolCallId"), "toolName": c.get("toolName"),
                           "input": c.get("input", c.get("args"))})
    return read_messages([{"role": "assistant", "content": blocks}], "assistant") if blocks else []
