"""Session -> Contract B universe (`fixture.universe.json`).

Recordings come from witnessed calls when the tool side recorded them, else
they are reconstructed from tool_call / tool_call_response pairs (the agent's
own account). Tools without a recorded definition get a schema inferred from
the arguments seen, listed in `stubbed_schemas` for a human to check.
"""

from __future__ import annotations

from typing import Any

from wt_otel.exporters.envelope import object_args, provenance
from wt_otel.model.parts import canonical_json, unwrap_mcp
from wt_otel.model.session import Session

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def recordings(session: Session) -> list[dict[str, Any]]:
    """Recorded (tool, args, result) triples, de-duplicated, witnessed evidence first."""
    out: list[dict[str, Any]] = []
    if session.witnessed_calls:
        for c in sorted(session.witnessed_calls, key=lambda c: c.start_ns):
            rec = {"tool_name": c.tool_name, "args": object_args(c.args), "result": c.result,
                   "source": "witnessed", "tool_call_id": c.tool_call_id, "span_id": c.span_id}
            if c.error:
                rec["error"] = c.error
            out.append(rec)
    else:
        responses = {p.get("id"): p for m in session.messages for p in m["parts"]
                     if p.get("type") == "tool_call_response"}
        for m in session.messages:
            for p in m["parts"]:
                if p.get("type") == "tool_call" and p.get("id") in responses:
                    out.append({"tool_name": p.get("name") or "", "args": object_args(p.get("arguments")),
                                "result": unwrap_mcp(responses[p["id"]].get("response")), "source": "transcript",
                                "tool_call_id": p["id"]})
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for r in out:
        key = (r["tool_name"], canonical_json(r["args"]), canonical_json(r["result"]))
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


def infer_schema(arg_sets: list[dict[str, Any]]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for args in arg_sets:
        for k, v in args.items():
            props.setdefault(k, {"type": _JSON_TYPES.get(type(v), "string")} if v is not None else {})
    return {"type": "object", "properties": props}


def universe(session: Session) -> dict[str, Any]:
    recs = recordings(session)
    tools: list[dict[str, Any]] = [
        {"name": d["name"], "description": d.get("description", ""),
         "input_schema": d.get("input_schema") or {"type": "object"}}
        for d in session.tool_definitions
    ]
    defined = {t["name"] for t in tools}
    stubbed = [t["name"] for t in tools if "input_schema" not in next(
        d for d in session.tool_definitions if d["name"] == t["name"])]
    for name in dict.fromkeys(r["tool_name"] for r in recs):
        if name not in defined:
            args = [r["args"] for r in recs if r["tool_name"] == name]
            tools.append({"name": name, "description": "", "input_schema": infer_schema(args)})
            stubbed.append(name)
    out = {
        "windtunnel_universe": 1,
        "tools": tools,
        "recordings": recs,
        "matching": {"on_miss": "fail_call"},
        "stubbed_schemas": stubbed,
        "provenance": provenance(session),
    }
    if session.redaction:
        out["redaction"] = session.redaction
    return out
