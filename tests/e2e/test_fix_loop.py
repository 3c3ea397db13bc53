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
import shlex
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
from wt_otel.contracts.universe import load_universe
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse

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


# ---------------------------------------------------------------- a fix that calls another tool

CONTACTS_PROMPT = OLD_PROMPT + " Phone numbers are in client_contacts."
CONTACTS = [{"kind": "email", "value": "ops@bluewing.example"}, {"kind": "phone", "value": PHONE}]
CONTACTS_TOOL = {"name": "client_contacts", "description": "A client's contact points.",
                 "input_schema": {"type": "object", "properties": {"client": {"type": "string"}},
                                  "required": ["client"]}}
# production: the lookup has no phone; the contacts tool (offered, never called in the incident) has it
PRODUCTION = {"windtunnel_universe": 1, "tools": [UNIVERSE["tools"][0], CONTACTS_TOOL], "recordings": [
    {"tool_name": "client_lookup", "args": {"query": "Bluewing"},
     "result": {"name": "Bluewing", "email": "ops@bluewing.example"}},
    {"tool_name": "client_contacts", "args": {"client": "Bluewing"}, "result": CONTACTS}]}


def decide_contacts(messages: list[dict], tools_offered: bool) -> dict:
    """Look the client up (in client_contacts when the prompt says so), then quote what the tool returned."""
    system = " ".join(str(m.get("content")) for m in messages if m.get("role") == "system")
    results = [m for m in messages if m.get("role") == "tool"]
    if tools_offered and not results:
        if "client_contacts" in system:
            return {"tool_call": ("call_contacts1", "client_contacts", json.dumps({"client": "Bluewing"}))}
        return {"tool_call": ("call_lookup1", "client_lookup", json.dumps({"query": "Bluewing"}))}
    phone = None
    for m in results:
        content = m.get("content")
        if isinstance(content, list):  # content parts (an error result, say)
            content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        try:
            data = json.loads(content or "")
        except (TypeError, ValueError):
            continue
        if isinstance(data, dict):  # MCP structured content wraps a list as {"result": [...]}
            data = data.get("result")
        for item in data if isinstance(data, list) else []:
            if isinstance(item, dict) and item.get("kind") == "phone":
                phone = item.get("value")
    return {"text": "Bluewing: ops@bluewing.example" + (f", phone {phone}." if phone else ".")}


def printed(out: str, command: str) -> list[str]:
    """The `wt-otel <command> ...` lines `wt-otel run` printed, as argv for `main` (without `wt-otel`)."""
    return [shlex.split(line.strip())[1:] for line in out.splitlines() if line.strip().startswith(f"wt-otel {command}")]


def test_a_fix_that_calls_another_tool_reaches_pass_with_the_commands_run_prints(tmp_path: Path) -> None:
    """Incident (client_lookup, no phone) -> fix (the prompt sends the agent to client_contacts) -> the
    prompt change is named -> re-recorded live, the new tool call is a miss and `run` prints how to answer it
    -> `universe record` asks the real tool server -> PASS live and on replay -> the old prompt back is a
    regression, not a recording gap."""
    server, port = fake_openai.start_server(decide_fn=decide_contacts)
    upstream = f"http://127.0.0.1:{port}/v1"
    directory = tmp_path / "bluewing-contact"
    directory.mkdir()
    universe_file = directory / "fixture.universe.json"
    recorded = {**UNIVERSE, "tools": [UNIVERSE["tools"][0], CONTACTS_TOOL],
                "recordings": [{**PRODUCTION["recordings"][0], "source": "witnessed"}]}
    universe_file.write_text(json.dumps(recorded))
    (directory / "scenario.yaml").write_text(yaml.safe_dump({
        "wt_scenario": 1, "id": "bluewing-contact", "user_turns": [TURN], "requires_tool_use": True,
        "assertions": [{"type": "output", "contains": PHONE}],
        "fixtures": {"universe": "fixture.universe.json", "cassette": "llm.cassette.json"}, "runs": 1}))
    crm = UniverseMCPServer(RecordedUniverse(load_universe(PRODUCTION)), port=0)  # the real tool server
    crm.start()
    try:
        code, out = run(directory, OLD_PROMPT, "record", "--llm-upstream", upstream)  # the incident
        assert code == 1 and re.search(r"^FAIL +bluewing-contact", out, re.M), out

        code, out = run(directory, CONTACTS_PROMPT, "replay")  # the fix: its prompt change is named
        assert code == 1 and "system prompt changed:" in out and "re-record" in out, out
        assert "wt-otel universe add" not in out
        row = last_row(directory)
        assert row["triage"] == "prompt_changed", row

        code, out = run(directory, CONTACTS_PROMPT, "record", "--llm-upstream", upstream)  # live: a new tool call
        assert code == 1, out
        [add] = printed(out, "universe add")
        assert add[:6] == ["universe", "add", str(universe_file), "--tool", "client_contacts", "--args"], add
        assert json.loads(add[6]) == {"client": "Bluewing"} and add[7:] == ["--result", "RESULT_JSON"]
        assert "+ client: \"Bluewing\"" not in out  # a tool with no recording says so, not a bogus diff
        assert "no recording of 'client_contacts'" in out, out
        assert last_row(directory)["triage"] == "recording_gap"
        [record] = printed(out, "universe record")
        assert "URL_OR_COMMAND" in record

        res = CliRunner().invoke(main, [crm.url if a == "URL_OR_COMMAND" else a for a in record],
                                 catch_exceptions=False)
        assert res.exit_code == 0, res.output
        assert 'client_contacts({"client": "Bluewing"}) -> [{"kind": "email"' in res.output, res.output
        saved = json.loads(universe_file.read_text())["recordings"][-1]
        assert saved == {"tool_name": "client_contacts", "args": {"client": "Bluewing"}, "result": CONTACTS,
                         "source": "recorded"}, "stored as the tool returned it: a list, not {'result': [...]}"

        code, out = run(directory, CONTACTS_PROMPT, "record", "--llm-upstream", upstream)  # verified live
        assert code == 0 and re.search(r"^PASS +bluewing-contact", out, re.M), out
        assert "wt-otel universe add" not in out
        code, out = run(directory, CONTACTS_PROMPT, "replay")  # green, hermetically
        assert code == 0 and re.search(r"^PASS +bluewing-contact", out, re.M), out

        code, out = run(directory, OLD_PROMPT, "replay")  # the bug re-introduced: a regression, named as such
        assert code == 1 and "the old behaviour is back" in out, out
        assert last_row(directory)["triage"] == "agent_regression"
    finally:
        crm.stop()
        server.shutdown()
        server.server_close()


def last_row(directory: Path) -> dict:
    return json.loads((directory.parent / "runs" / "ledger.ndjsonl").read_text().splitlines()[-1])
