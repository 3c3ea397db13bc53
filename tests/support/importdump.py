"""A generated multi-file dump with everything that makes importing hard, and records as OTLP protobuf.

`write_dump(dir, sessions)` writes, from a seeded RNG:

- `a.pb`: the collector's length-prefixed `format: proto` stream, sessions interleaved across requests;
- `b.pb`: late spans (the last chat span of some sessions, and every span of some sessions' second trace,
  joined by conversation id) and GenAI event log records, in traces and logs requests;
- `c.otlp.jsonl`: OTLP/JSON lines with more second traces (a session across a protobuf and a JSON file), a
  corrupt line and a trace that is not GenAI at all.

Sessions carry incident flags (some two incident ids: two scenarios), a few have no conversation id
(each turn its own trace: joined as continuations), some conversation ids collide as slugs
(`conv.N` / `conv_N`), one span is exported twice.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLog
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from wt_otel.model.spans import LogRecord, SpanRecord

T0 = 1_700_000_000_000_000_000


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=kvs(value)))
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if value is None:
        return AnyValue()
    return AnyValue(string_value=str(value))


def kvs(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def pb_span(r: SpanRecord) -> Span:
    span = Span(trace_id=bytes.fromhex(r.trace_id), span_id=bytes.fromhex(r.span_id), name=r.name,
                parent_span_id=bytes.fromhex(r.parent_span_id) if r.parent_span_id else b"",
                start_time_unix_nano=r.start_ns, end_time_unix_nano=r.end_ns, attributes=kvs(r.attributes),
                kind={"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}.get(r.kind, 0))
    for e in r.events:
        span.events.add(name=e.name, time_unix_nano=e.time_ns, attributes=kvs(e.attributes))
    for link in r.links:
        span.links.add(trace_id=bytes.fromhex(link.trace_id), span_id=bytes.fromhex(link.span_id),
                       attributes=kvs(link.attributes))
    span.status.code = {"UNSET": 0, "OK": 1, "ERROR": 2}.get(r.status_code, 0)
    span.status.message = r.status_message
    return span


def traces_request(records: list[SpanRecord]) -> ExportTraceServiceRequest:
    """One request; a resource (and scope) per run of records that share them."""
    req = ExportTraceServiceRequest()
    last: tuple | None = None
    for r in records:
        key = (json.dumps(r.resource, sort_keys=True, default=str), r.scope_name, r.scope_version)
        if key != last:
            rs = ResourceSpans(resource={"attributes": kvs(r.resource)})
            rs.scope_spans.append(ScopeSpans(scope={"name": r.scope_name, "version": r.scope_version}))
            req.resource_spans.append(rs)
            last = key
        req.resource_spans[-1].scope_spans[-1].spans.append(pb_span(r))
    return req


def logs_request(records: list[LogRecord]) -> ExportLogsServiceRequest:
    req = ExportLogsServiceRequest()
    last: tuple | None = None
    for r in records:
        key = (json.dumps(r.resource, sort_keys=True, default=str), r.scope_name)
        if key != last:
            rl = ResourceLogs(resource={"attributes": kvs(r.resource)})
            rl.scope_logs.append(ScopeLogs(scope={"name": r.scope_name}))
            req.resource_logs.append(rl)
            last = key
        log = PbLog(event_name=r.event_name, time_unix_nano=r.time_ns, severity_text=r.severity_text,
                    body=any_value(r.body), attributes=kvs(r.attributes),
                    trace_id=bytes.fromhex(r.trace_id) if r.trace_id else b"",
                    span_id=bytes.fromhex(r.span_id) if r.span_id else b"")
        req.resource_logs[-1].scope_logs[-1].log_records.append(log)
    return req


def framed(messages: list[Any]) -> bytes:
    out = bytearray()
    for m in messages:
        data = m.SerializeToString()
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


def as_proto(records: list[SpanRecord | LogRecord], per_request: int = 50) -> bytes:
    """Records as a length-prefixed stream, in their order: runs of spans and of logs, `per_request` a request."""
    messages: list[Any] = []
    run: list[Any] = []
    for r in records:
        if run and (type(r) is not type(run[0]) or len(run) >= per_request):
            messages.append(traces_request(run) if isinstance(run[0], SpanRecord) else logs_request(run))
            run = []
        run.append(r)
    if run:
        messages.append(traces_request(run) if isinstance(run[0], SpanRecord) else logs_request(run))
    return framed(messages)


# --------------------------------------------------------------------------- the generated dump


def _msg(role: str, text: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


class _Ids:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def trace(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def span(self) -> str:
        return f"{self.rng.getrandbits(64) or 1:016x}"


def _session(n: int, ids: _Ids, rng: random.Random, filler: int) -> dict[str, list[SpanRecord | LogRecord]]:
    """Records of session n by where they go: "main" (a.pb), "late" (b.pb), "json" (c.otlp.jsonl)."""
    t = T0 + n * 1_000_000_000
    named = n % 13 != 5
    conv = (f"conv.{n // 2}" if n % 2 else f"conv_{n // 2}") if n % 17 in (3, 4) else f"conv-{n:05d}"
    resource = {"service.name": f"svc-{n % 3}"}
    out: dict[str, list[SpanRecord | LogRecord]] = {"main": [], "late": [], "json": []}
    history: list[dict] = []
    turns = 2 if n % 5 == 0 else 1
    for turn in range(turns):
        trace = ids.trace()
        root = ids.span()
        attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent"}
        if named:
            attrs["gen_ai.conversation.id"] = conv
        if n % 10 == 0:
            attrs["wt.incident.id"] = f"INC-{n}-{turn}" if n % 20 == 0 else f"INC-{n}"
        where = "main" if turn == 0 else ("late" if n % 2 else "json")
        if not named:
            where = "main"
        start = t + turn * 100_000_000
        spans: list[SpanRecord | LogRecord] = [SpanRecord(trace_id=trace, span_id=root, name="invoke_agent helper",
                                                          start_ns=start, end_ns=start + 90_000_000,
                                                          attributes=attrs, resource=resource)]
        history.append(_msg("user", f"Turn {turn} of session {n}: where is order {rng.randint(1, 9999)}?"
                                    + " Details follow." * (filler // 16)))
        calls = rng.randint(0, 2)
        for i in range(calls + 1):
            chat_id = ids.span()
            out_msgs: list[dict]
            if i < calls:
                call_id = f"call_{n}_{turn}_{i}"
                out_msgs = [{"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": "lookup",
                                                              "arguments": {"order": n * 10 + i}}]}]
            else:
                out_msgs = [_msg("assistant", f"Order {n}-{turn} ships on day {rng.randint(1, 28)}.")]
            cstart = start + (2 * i + 1) * 1_000_000
            chat_attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1",
                                          "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 10 + i}
            logs: list[LogRecord] = []
            if n % 7 == 3:  # the GenAI events dialect: content in log records
                for m in history:
                    logs.append(LogRecord(event_name=f"gen_ai.{m['role']}.message", trace_id=trace, span_id=chat_id,
                                          time_ns=cstart, body={"content": m["parts"][0].get("content", "")}
                                          if m["parts"][0]["type"] == "text" else {"content": json.dumps(m)},
                                          resource=resource))
                logs.append(LogRecord(event_name="gen_ai.choice", trace_id=trace, span_id=chat_id, time_ns=cstart,
                                      body={"index": 0, "finish_reason": "stop", "message": {
                                          "content": out_msgs[0]["parts"][0].get("content")}}, resource=resource))
            else:
                chat_attrs["gen_ai.input.messages"] = json.dumps(history)
                chat_attrs["gen_ai.output.messages"] = json.dumps(out_msgs)
            chat = SpanRecord(trace_id=trace, span_id=chat_id, parent_span_id=root, name="chat m-1", start_ns=cstart,
                              end_ns=cstart + 500_000, attributes=chat_attrs, resource=resource, scope_name="gen")
            late = n % 4 == 1 and i == calls
            spans.append(chat)
            if late:
                out["late"].append(spans.pop())
            if logs:
                out["late" if n % 3 == 0 else where].extend(logs)
            if n % 11 == 0 and i == 0:
                spans.append(chat)  # exported twice
            history.extend(out_msgs)
            if i < calls:
                result = {"status": rng.choice(["shipped", "packed", "lost"]), "day": rng.randint(1, 28)}
                if n % 19 == 0:
                    result["ratio"] = float("nan") if n % 38 == 0 else 0.5
                spans.append(SpanRecord(trace_id=trace, span_id=ids.span(), parent_span_id=root,
                                        name="execute_tool lookup", start_ns=cstart + 600_000,
                                        end_ns=cstart + 900_000, resource=resource,
                                        attributes={"gen_ai.operation.name": "execute_tool",
                                                    "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": call_id,
                                                    "gen_ai.tool.call.arguments": json.dumps({"order": n * 10 + i}),
                                                    "gen_ai.tool.call.result": json.dumps(result)}))
                history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id,
                                                           "response": result}]})
        out[where].extend(spans)
    if n % 9 == 0:  # a trace without GenAI: no session
        trace = ids.trace()
        out["main"].append(SpanRecord(trace_id=trace, span_id=ids.span(), name="GET /health", start_ns=t,
                                      end_ns=t + 1000, attributes={"http.request.method": "GET"},
                                      resource=resource))
    return out


def write_dump(folder: Path, sessions: int = 1000, seed: int = 7, filler: int = 0) -> list[Path]:
    """The three files (see the module docstring); returned in the order to import them. `filler`: bytes
    of text added to each user message (every chat span repeats them)."""
    rng = random.Random(seed)
    ids = _Ids(rng)
    main: list[Any] = []
    late: list[Any] = []
    jsonl: list[Any] = []
    window: list[list[Any]] = []
    for n in range(sessions):
        parts = _session(n, ids, rng, filler)
        window.append(parts["main"])
        late.extend(parts["late"])
        jsonl.extend(parts["json"])
        if len(window) == 8:  # eight sessions at a time, their spans interleaved (concurrent conversations)
            main.extend(_interleave(window, rng))
            window = []
    main.extend(_interleave(window, rng))
    folder.mkdir(parents=True, exist_ok=True)
    a, b, c = folder / "a.pb", folder / "b.pb", folder / "c.otlp.jsonl"
    a.write_bytes(as_proto(main, per_request=64))
    late.sort(key=lambda r: isinstance(r, LogRecord))  # spans first, then the log records
    b.write_bytes(as_proto(late, per_request=40))
    lines = []
    for i in range(0, len(jsonl), 30):
        chunk = [r for r in jsonl[i:i + 30] if isinstance(r, SpanRecord)]
        logs = [r for r in jsonl[i:i + 30] if isinstance(r, LogRecord)]
        if chunk:
            lines.append(json_format.MessageToJson(traces_request(chunk), indent=None))
        if logs:
            lines.append(json_format.MessageToJson(logs_request(logs), indent=None))
        if i == 0:
            lines.append('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}')  # a corrupt line
    c.write_text("\n".join(lines) + "\n")
    return [a, b, c]


def _interleave(window: list[list[Any]], rng: random.Random) -> list[Any]:
    queues = [list(q) for q in window if q]
    out = []
    while queues:
        q = rng.choice(queues)
        out.append(q.pop(0))
        if not q:
            queues.remove(q)
    return out
