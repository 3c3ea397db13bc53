"""execute_tool spans (GenAI semconv): the tool side's own record of a call.

`gen_ai.tool.call.id` may be absent (the Agents SDK never sets it); the
session builder then correlates by tool name and order.
"""

from __future__ import annotations

from wt_otel.ingest.dialects.common import operation, span_error
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
    return [tool_execution(span, str(name), _first_present(a, ARG_KEYS), _first_present(a, RESULT_KEYS),
                           a.get("gen_ai.tool.call.id"), NAME)]


def tool_execution(span: SpanRecord, name: str, raw_args, raw_result, call_id, dialect: str) -> ToolExecution:
    """Build a ToolExecution, decoding JSON-encoded arguments and results."""
    args, ok = tool_arguments(raw_args)
    error_type, error_message = span_error(span)
    return ToolExecution(
        tool_name=name, args=args, result=tool_result(raw_result),
        tool_call_id=str(call_id) if call_id else None, span_id=span.span_id, trace_id=span.trace_id,
        start_ns=span.start_ns, end_ns=span.end_ns,
        error=(error_message or error_type) if error_type else None, args_decoded=ok, dialect=dialect,
    )


def _first_present(attrs, keys):
    for k in keys:
        if k in attrs:
            return attrs[k]
    return None
