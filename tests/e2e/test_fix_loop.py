"""The fix-to-green loop, end to end (docs/fix-loop.md), with the reference agent (examples/agent).

The model is a fake provider (tests/fixtures/producers/_common/fake_openai.py) whose answer depends on the
system prompt, as a real model's would: it gives the phone only when the prompt asks for it. The incident
is recorded with `--llm record` under the old prompt, then:

    replay, old prompt        -> FAIL reproduced, zero divergence
    replay, fixed prompt      -> FAIL with the divergence as a diff: "system prompt changed: + ..."
    record, fixed prompt      -> PASS live; the cassette gains the new baseline run
    replay, fixed prompt      -> PASS hermetically, zero divergence
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import fake_openai
import pytest
import yaml
from click.testing import CliRunner

import tests.support.producers  # noqa: F401  (puts the fake provider on sys.path)
from wt_otel.cli import main
from wt_otel.contracts.cassette import load_cassette

pytest.importorskip("agents", reason="openai-agents is a test dependency")

from examples.agent import AgentConfig, start_in_thread  # noqa: E402

OLD_PROMPT = "You are the CRM assistant. Answer from client_lookup only."
NEW_PROMPT = OLD_PROMPT + " Always give the phone number too."
TURN = "How do I reach Bluewing?"
PHONE = "+1-555-0100"
UNIVERSE = {
    "windtunnel_universe": 1,
    "tools": [{"name": "client_lookup", "description": "Look up a client record by name.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}],
    "recordings": [{"tool_name": "client_lookup", "args": {"query": "Bluewing"},
                    "result": {"name": "Bluewing", "email": "ops@bluewing.example", "phone": PHONE}}],
}


def decide(messages: list[dict], tools_offered: bool) -> dict:
    """The fake model: look the client up, then answer; the phone only when the system prompt asks."""
    if tools_offered and not any(m.get("role") == "tool" for m in messages):
        return {"tool_call": ("call_lookup1", "client_lookup", json.dumps({"query": "Bluewing"}))}
    system = " ".join(str(m.get("content")) for m in messages if m.get("role") == "system")
    return {"text": "Bluewing: ops@bluewing.example" + (f", phone {PHONE}." if "phone" in system else ".")}


@pytest.fixture
def provider() -> Iterator[str]:
    server, port = fake_openai.start_server(decide_fn=decide)
    yield f"http://127.0.0.1:{port}/v1"
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    directory = tmp_path / "bluewing-contact"
    directory.mkdir()
    (directory / "fixture.universe.json").write_text(json.dumps(UNIVERSE))
    (directory / "scenario.yaml").write_text(yaml.safe_dump({
        "wt_scenario": 1, "id": "bluewing-contact", "user_turns": [TURN], "requires_tool_use": True,
        "assertions": [{"type": "output", "contains": PHONE}],
        "fixtures": {"universe": "fixture.universe.json", "cassette": "llm.cassette.json"}, "runs": 1}))
    return directory


def run(scenario: Path, prompt: str, llm: str, *extra: str) -> tuple[int, str]:
    universe_port, llm_port = free_port(), free_port()
    config = AgentConfig(mcp_url=f"http://127.0.0.1:{universe_port}/mcp",
                         openai_base_url=f"http://127.0.0.1:{llm_port}/v1", instructions=prompt)
    with start_in_thread(config, port=0) as agent:
        res = CliRunner().invoke(main, ["run", str(scenario), "--llm", llm, "--inject-url", agent.url,
                                        "--universe-port", str(universe_port), "--llm-port", str(llm_port),
                                        "--runs-dir", str(scenario.parent / "runs"), *extra],
                                 catch_exceptions=False)
    return res.exit_code, res.output


def test_fail_reproduced_prompt_fixed_divergence_diff_record_then_pass_on_replay(scenario: Path, provider: str):
    cassette = scenario / "llm.cassette.json"
    code, out = run(scenario, OLD_PROMPT, "record", "--llm-upstream", provider)  # the incident, recorded
    assert code == 1 and re.search(r"^FAIL +bluewing-contact", out, re.M), out
    [incident] = load_cassette(json.loads(cassette.read_text())).history_keys

    code, out = run(scenario, OLD_PROMPT, "replay")  # 1. the FAIL reproduced, hermetically
    assert code == 1 and re.search(r"^FAIL +bluewing-contact", out, re.M), out
    assert "diverged" not in out and "matched no recording" not in out

    code, out = run(scenario, NEW_PROMPT, "replay")  # 2. the fix meets the old recording: a readable diff
    assert code == 1, out
    assert "LLM request #1 of the run matched no recording; against the nearest recorded call #1:" in out
    assert f"  system prompt changed:\n      - {OLD_PROMPT}\n      + {NEW_PROMPT}\n" in out, out
    assert "--llm record" in out

    code, out = run(scenario, NEW_PROMPT, "record", "--llm-upstream", provider)  # 3. verified live, recorded
    assert code == 0 and re.search(r"^PASS +bluewing-contact", out, re.M), out
    history = load_cassette(json.loads(cassette.read_text())).history_keys
    assert history[0] == incident and len(history) == 2, "the new baseline is appended, the incident kept"

    code, out = run(scenario, NEW_PROMPT, "replay")  # 4. green, hermetically
    assert code == 0 and re.search(r"^PASS +bluewing-contact", out, re.M), out
    assert "matched no recording" not in out
    traces = sorted((scenario.parent / "runs").rglob("*.trace.json"), key=lambda p: p.stat().st_mtime)
    last = json.loads(traces[-1].read_text())
    assert last["evidence"]["llm"] == "replay" and all(c["match"] == "exact" for c in last["llm_calls"])
    assert [c["tool_name"] for c in last["mcp_calls"]] == ["client_lookup"]
