"""Agents SDK guardrail / handoff / custom / new span types are kept as canonical custom spans (trace2test-core),
in the Session and the envelope, and assertions can see guardrail triggers and handoffs.

The spans are made by the real SDK (`agents.tracing`) in a subprocess (its trace processors are process-wide),
exported the way its backend exporter would (`Span.export()`), plus one line of a span type the SDK does not
have yet, as a future SDK would write it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.ingest.dumps import read_dump
from wt_otel.ingest.sessions import build_session

MAKE = textwrap.dedent('''
    import json, sys
    from agents.tracing import (TracingProcessor, agent_span, custom_span, function_span, generation_span,
                                guardrail_span, handoff_span, mcp_tools_span, response_span, set_trace_processors,
                                speech_span, trace)

    class Jsonl(TracingProcessor):
        def __init__(self, path): self.fh = open(path, "w")
        def _w(self, item):
            data = item.export()
            if data: self.fh.write(json.dumps(data, default=str) + "\\n"); self.fh.flush()
        def on_trace_start(self, t): self._w(t)
        def on_trace_end(self, t): pass
        def on_span_start(self, s): pass
        def on_span_end(self, s): self._w(s)
        def shutdown(self): self.fh.close()
        def force_flush(self): self.fh.flush()

    set_trace_processors([Jsonl(sys.argv[1])])
    with trace("refunds", group_id="conv-1"):
        with generation_span(input=[{"role": "user", "content": "Refund order 7"}],
                             output=[{"role": "assistant", "content": "Done: refunded."}], model="gpt-4o-mini"):
            pass
        with guardrail_span("pii_check", triggered=True):
            pass
        with handoff_span(from_agent="triage", to_agent="refunds"):
            pass
        with function_span("refund", input='{"order": 7}', output='{"ok": true}'):
            pass
        with custom_span("risk_score", data={"score": 0.93}):
            pass
        with agent_span("refunds", handoffs=["human"], tools=["refund"], output_type="str"):
            with mcp_tools_span(server="crm", result=["refund", "lookup_order"]):
                pass
            with response_span():
                pass
            with speech_span(model="tts-1", input="Done: refunded.", output="<audio>"):
                pass
''')


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agents") / "trace.agents.jsonl"
    script = path.parent / "make.py"
    script.write_text(MAKE)
    subprocess.run([sys.executable, str(script), str(path)], check=True, timeout=120)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    span = next(line for line in lines if line["object"] == "trace.span")
    future = {**span, "id": "span_future0000000000000001",
              "span_data": {"type": "approval_request", "tool": "refund", "approved": False}}
    path.write_text(path.read_text() + json.dumps(future) + "\n")
    return path


def session_of(path: Path):  # noqa: ANN201
    records = [r for r in read_dump(path, "agents-jsonl") if not hasattr(r, "message")]
    return build_session(records)


def test_custom_span_types_are_kept_with_their_payload(dump: Path) -> None:
    session = session_of(dump)
    by_type = {c["type"]: c for c in session.custom_spans}
    assert by_type["guardrail"]["name"] == "pii_check" and by_type["guardrail"]["triggered"] is True
    assert (by_type["handoff"]["from_agent"], by_type["handoff"]["to_agent"]) == ("triage", "refunds")
    risk = next(c for c in session.custom_spans if c["name"] == "risk_score")
    assert risk["type"] == "custom" and risk["data"]["data"] == {"score": 0.93}
    future = next(c for c in session.custom_spans if c.get("sdk_type") == "approval_request")
    assert future["type"] == "custom" and future["data"] == {"tool": "refund", "approved": False}
    assert [c.tool_name for c in session.witnessed_calls] == ["refund"]  # tools stay tools


def test_known_span_types_without_a_richer_mapping_are_kept_too(dump: Path) -> None:
    """agent, mcp_tools, response, speech...: known SDK types the session has no field for are custom spans
    with their `sdk_type` and payload; generation and function spans stay model and tool calls."""
    session = session_of(dump)
    by_sdk = {c.get("sdk_type"): c for c in session.custom_spans if c.get("sdk_type")}
    assert {"agent", "mcp_tools", "response", "speech", "approval_request"} <= set(by_sdk)
    agent = by_sdk["agent"]
    assert agent["type"] == "custom" and agent["name"] == "refunds"
    assert agent["data"]["handoffs"] == ["human"] and agent["data"]["output_type"] == "str"
    tools = by_sdk["mcp_tools"]
    assert tools["name"] == "crm" and tools["data"]["result"] == ["refund", "lookup_order"]
    assert by_sdk["speech"]["data"]["model"] == "tts-1"
    assert tools["parent_span_id"] == agent["span_id"]
    assert not {"generation", "function"} & set(by_sdk)  # richer mappings: LLM calls and tool calls
    assert [c.tool_name for c in session.witnessed_calls] == ["refund"]


def test_import_keeps_them_in_the_envelope_and_reads_them_back(dump: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["import", str(dump), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    [d] = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    env = json.loads((d / "incident.wtin.json").read_text())
    assert {c["type"] for c in env["custom_spans"]} == {"guardrail", "handoff", "custom"}
    again = CliRunner().invoke(main, ["import", str(d / "incident.wtin.json"), "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    [d2] = [p for p in (tmp_path / "again").iterdir() if p.is_dir()]
    assert json.loads((d2 / "incident.wtin.json").read_text())["custom_spans"] == env["custom_spans"]


def test_assertions_see_guardrail_triggers_and_handoffs(dump: Path, tmp_path: Path) -> None:
    suite = tmp_path / "tests" / "agents" / "guard.t2t.yaml"
    suite.parent.mkdir(parents=True)
    suite.write_text(yaml.safe_dump({"version": 1, "name": "guardrails", "tests": [
        {"id": "pii-blocked", "name": "the PII guardrail fired", "assertions": [
            {"type": "output", "tool": "guardrail:pii_check",
             "match": {"type": "object", "shape": {"triggered": {"type": "boolean", "equals": True}}}}]},
        {"id": "handed-off", "name": "triage handed off to refunds", "assertions": [
            {"type": "output", "tool": "handoff:refunds", "contains": ["triage"]}]},
        {"id": "sequence", "name": "guardrails are not tool calls", "assertions": [
            {"type": "tool-sequence", "mode": "exact", "tools": ["refund"]}]},
    ]}))
    result = CliRunner().invoke(main, ["check", str(dump), "--suite", str(suite)])
    assert result.exit_code == 0, result.output


def test_generic_jsonl_guardrails_and_handoffs_are_kept_too(tmp_path: Path) -> None:
    """trace2test's generic JSONL carries the same types (guardrails need name + triggered, handoffs from/to)."""
    base = {"trace_id": "trace_g", "workflow_name": "refunds"}
    records = [
        {"span_id": "s1", "type": "generation", "model": "gpt-x", "input": [{"role": "user", "content": "Refund 7"}],
         "output": [{"role": "assistant", "content": "Blocked."}]},
        {"span_id": "s2", "type": "guardrail", "name": "refund_limit", "triggered": True,
         "metadata": {"limit": 100}},
        {"span_id": "s3", "type": "handoff", "from_agent": "triage", "to_agent": "human"},
        {"span_id": "s4", "type": "custom", "name": "audit", "data": {"ticket": "T-9"}},
    ]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps({**base, **r}) + "\n" for r in records))
    session = build_session([r for r in read_dump(path, "generic-jsonl") if not hasattr(r, "message")])
    kinds = [(c["type"], c["name"]) for c in session.custom_spans]
    assert kinds == [("guardrail", "refund_limit"), ("handoff", "human"), ("custom", "audit")]
    assert session.custom_spans[0]["triggered"] is True
