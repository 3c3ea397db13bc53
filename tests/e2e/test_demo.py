"""`make demo` (the README's first command) closes the loop: `python -m examples.demo` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

pytest.importorskip("agents", reason="openai-agents is in the demo extra")


def test_the_demo_replays_the_flagged_incident_and_shows_where_everything_went(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "examples.demo", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    assert "queued incident INC-DEMO-1 for replay" in text, text
    assert "\nFAIL     inc-demo-1  0/1" in text, text  # the table: the incident reproduces, hermetically
    assert "unsubstantiated: '199'" in text
    assert f"ledger:       {out}/wt-data/runs/ledger.ndjsonl" in text
    assert "result spans: 5 span(s) sent over OTLP/HTTP" in text
    spans = [json.loads(line) for line in (out / "result-spans.jsonl").read_text().splitlines()]
    [scenario] = [s for s in spans if s["name"] == "scenario inc-demo-1"]
    assert scenario["attributes"]["wt.verdict"] == "FAIL" and scenario["links"]
    [row] = [json.loads(line) for line in (out / "wt-data/runs/ledger.ndjsonl").read_text().splitlines()]
    assert row["verdict"] == "FAIL" and row["origin"] == "INC-DEMO-1"


def test_the_demo_reserves_its_ports_outside_the_ephemeral_range() -> None:
    """The replay binds the model port minutes after the demo chose it: a port any outgoing connection could
    take meanwhile (the kernel's ephemeral range) made the replay fail with EADDRINUSE."""
    from examples.demo.stage import ephemeral_low, free_port

    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < ephemeral_low() for p in ports), sorted(ports)
    assert len(ports) > 1  # chosen at random, not one fixed port
