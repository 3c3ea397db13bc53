"""`wt-otel check` finds tests/agents/*.t2t.yaml by convention and runs several suites in one call,
one JUnit <testsuite> per suite (trace2test-core: "Suites live under tests/agents/*.t2t.yaml")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from junitparser import JUnitXml

from wt_otel.cli import main


def trace(path: Path) -> Path:
    """A generic-JSONL refund: lookup_order, verify_identity, refund."""
    base = {"trace_id": "trace_refund_1", "workflow_name": "refunds"}
    records = [
        {"span_id": "s1", "type": "agent", "name": "Refunder", "tools": ["lookup_order", "verify_identity", "refund"]},
        {"span_id": "s2", "parent_id": "s1", "type": "tool", "name": "lookup_order", "input": {"order_id": "A-1"},
         "output": {"status": "delivered"}},
        {"span_id": "s3", "parent_id": "s1", "type": "tool", "name": "verify_identity", "input": {"user": "u1"},
         "output": {"verified": True}},
        {"span_id": "s4", "parent_id": "s1", "type": "tool", "name": "refund", "input": {"order_id": "A-1"},
         "output": "refunded"},
        {"span_id": "s5", "parent_id": "s1", "type": "generation", "model": "gpt-x",
         "input": [{"role": "user", "content": "Refund A-1"}],
         "output": [{"role": "assistant", "content": "Refunded order A-1."}]},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({**base, **r}) + "\n" for r in records))
    return path


def suite(path: Path, name: str, tools: list[str], **extra: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"version": 1, "name": name, **extra, "tests": [
        {"id": "sequence", "name": f"{name}: the calls", "assertions": [
            {"type": "tool-sequence", "mode": "exact", "tools": tools}]},
        {"id": "answer", "name": f"{name}: the answer", "assertions": [{"type": "output", "contains": "A-1"}]},
    ]}))
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    trace(tmp_path / "traces" / "good.jsonl")
    runner = {"type": "replay-mock", "trace": "../../traces/good.jsonl", "format": "generic-jsonl"}
    suite(tmp_path / "tests" / "agents" / "a-refund.t2t.yaml", "Refund safety",
          ["lookup_order", "verify_identity", "refund"], runner=runner)
    suite(tmp_path / "tests" / "agents" / "b-lookup.t2t.yaml", "Lookups", ["lookup_order"], runner=runner)
    (tmp_path / "tests" / "agents" / "notes.yaml").write_text("not a suite: wrong suffix\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_suites_are_discovered_and_each_is_a_junit_testsuite(project: Path) -> None:
    result = CliRunner().invoke(main, ["check", "--out", "results.xml"])
    assert result.exit_code == 1, result.output  # Lookups' exact sequence fails
    assert "== Refund safety (tests/agents/a-refund.t2t.yaml)" in result.output
    assert "== Lookups (tests/agents/b-lookup.t2t.yaml)" in result.output
    suites = {s.name: s for s in JUnitXml.fromfile(str(project / "results.xml"))}
    assert set(suites) == {"Refund safety", "Lookups"}
    assert (suites["Refund safety"].tests, suites["Refund safety"].failures) == (2, 0)
    assert (suites["Lookups"].tests, suites["Lookups"].failures) == (2, 1)


def test_several_suites_named_explicitly(project: Path) -> None:
    a = project / "tests" / "agents" / "a-refund.t2t.yaml"
    twin = project / "elsewhere" / "refund.t2t.yaml"
    twin.parent.mkdir()
    twin.write_text(a.read_text().replace("../../traces", "../traces"))
    result = CliRunner().invoke(main, ["check", "--suite", str(a), "--suite", str(twin), "--suite", str(a),
                                       "--out", "r.xml"])
    assert result.exit_code == 0, result.output
    names = [s.name for s in JUnitXml.fromfile(str(project / "r.xml"))]
    assert len(names) == 2 and len(set(names)) == 2  # same name twice: still one testsuite per suite


def test_no_suite_anywhere_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2 and "tests/agents/*.t2t.yaml" in result.output


def test_one_broken_suite_does_not_hide_the_others(project: Path) -> None:
    (project / "tests" / "agents" / "c-broken.t2t.yaml").write_text("version: 2\nname: x\ntests: []\n")
    result = CliRunner().invoke(main, ["check"])
    assert result.exit_code == 2
    assert "== Refund safety" in result.output and "c-broken.t2t.yaml: invalid suite" in result.output
