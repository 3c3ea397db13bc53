"""execute_tool spans (GenAI semconv): the tool side's own record of a call.

`gen_ai.tool.call.id` may be absent (the Agents SDK never sets it); the
session builder then correlates by tool name and order.
"""

from __future__ import annotations

from wt_otel.ingest.dialects.common import base_call, operation, span_error, tool_definition
from wt_otel.ingest.messages import tool_arguments, tool_result
from wt_otel.model.session import Observation, ToolExecution
from wt_otel.model.spans import SpanRecord

NAME = "execute_tool"

ARG_KEYS = ("gen_ai.tool.call.arguments", "tool_arguments", "gen_ai.tool.arguments")
RESULT_KEYS = ("gen_ai.tool.call.result", "tool_response", "gen_ai.tool.result", "gen_ai.tool.output")


def extract(span: SpanRecord) -> list[Observation]:
    a = span.attributes
    name = a.get("gen_ai.tool.name")
    if operation(span) != "execute_tool" and not (name and any(k in a for k in ARG_KEYS)):
        return []
    if not name:
        name = span.name.split(" ", 1)[1] if " " in span.name else span.name
    raw_args, raw_result = _first_present(a, ARG_KEYS), _first_present(a, RESULT_KEYS)
    call_id = a.get("gen_ai.tool.call.id")
    for ev in span.events:  # Strands: arguments in a gen_ai.tool.message event, the result in gen_ai.choice
        data = ev.body if isinstance(ev.body, dict) else ev.attributes
        kind = ev.name if ev.name.startswith("gen_ai.") else str(ev.attributes.get("event.name") or ev.name)
        if kind == "gen_ai.tool.message" and raw_args is None:
            raw_args, call_id = data.get("content"), call_id or data.get("id")
        elif kind == "gen_ai.choice" and raw_result is None:
            raw_result = data.get("message", data.get("content"))
    found: list[Observation] = [tool_execution(span, str(name), raw_args, raw_result, call_id, NAME)]
    schema = a.get("gen_ai.tool.json_schema")
    if schema is None:  # (most tool spans): no input schema, so no definition to offer
        return found
    definition = tool_definition({"name": name, "description": a.get("gen_ai.tool.description"),
                                  "parameters": schema})
    if definition and "input_schema" in definition:  # the tool span also says how the tool was offered
        offered = base_call(span, NAME)
        offered.is_transcript, offered.tool_definitions = True, [definition]
        found.append(offered)
    return found


def tool_execution(span: SpanRecord, name: str, raw_args, raw_result, call_id, dialect: str) -> ToolExecution:
    """Build a ToolExecution, decoding JSON-encoded arguments and results."""
    args, ok = tool_arguments(raw_args)
    error_type, error_message = span_error(span)
    return ToolExecution(
        tool_name=name.removesuffix(".__call__"),  # a span named after a callable object: `lookup.__call__`
        args=args, result=tool_result(raw_result),
        tool_call_id=str(call_id) if call_id else None, span_id=span.span_id, trace_id=span.trace_id,
        start_ns=span.start_ns, end_ns=span.end_ns,
        error=(error_message or error_type) if error_type else None, args_decoded=ok, dialect=dialect,
    )


def _first_present(attrs, keys):
    for k in keys:
        if k in attrs:
            return attrs[k]
    return None
