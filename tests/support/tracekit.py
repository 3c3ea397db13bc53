"""Hand-built Traces for scorer, assertion and scoring tests (no agent, no server)."""

from __future__ import annotations

from typing import Any

from wt_otel.contracts.run import Trace

Call = tuple[str, dict[str, Any], Any] | tuple[str, dict[str, Any], Any, str]


def make_trace(reply: str = "The email is ops@bluewing.example.", calls: list[Call] | None = None, *,
               witness: str = "available", reported: list[tuple[str, dict[str, Any]]] | None = None,
               user: str = "What is the email for Bluewing?", integrity: str = "PASS",
               integrity_detail: str | None = None, llm_calls: list[dict[str, Any]] | None = None,
               run_index: int = 1, turns: list[dict[str, Any]] | None = None, **extra: Any) -> Trace:
    """One run. `calls` are witnessed (name, args, result[, match]); the agent reports the same calls unless
    `reported` says otherwise; `witness="unavailable"` leaves only the report."""
    calls = calls or []
    mcp = [] if witness == "unavailable" else [
        {"tool_name": c[0], "args": c[1], "result": c[2], "match": c[3] if len(c) > 3 else "exact",
         **({"divergence": {"policy": c[3], "matched": None}} if len(c) > 3 and c[3] not in ("exact", "keyed")
            else {})}
        for c in calls]
    reported = reported if reported is not None else [(c[0], c[1]) for c in calls]
    if turns is None:
        turns = [{"text": user, "reply": reply, "latency_ms": 1.0,
                  "tool_calls": [{"name": n, "arguments": a} for n, a in reported]}]
    data: dict[str, Any] = {
        "wt_trace": 1, "scenario_id": "s", "run_index": run_index, "run_id": f"sweep/s/run-{run_index}",
        "started_at": "2026-01-01T00:00:00Z", "runtime": "http_inject", "turns": turns, "mcp_calls": mcp,
        "llm_calls": llm_calls or [], "evidence": {"witness": witness, "llm": "live"},
        "integrity": {"status": integrity, **({"detail": integrity_detail or f"{integrity.lower()} run"}
                                              if integrity != "PASS" else {})},
        **extra,
    }
    return Trace.model_validate(data)


LOOKUP = ("client_lookup", {"query": "Bluewing"}, {"email": "ops@bluewing.example", "phone": "+1-555-0100"})
