"""Write examples/dumps/crm-agent.otlp.jsonl: the reference agent's own telemetry, which replays against it.

The reference agent (examples/agent) runs live as its own process, as in `make demo`: the demo's scripted
model (examples/demo/fake_llm.py, never a real provider) and CRM tool server, its OTel GenAI
instrumentation writing OTLP/JSON lines to the file. Two conversations: the e-mail asked for (a good
answer), and the phone number, whose wrong answer the user flags as incident `INC-2026-1129-8`.
Imported, each replays against the same agent with zero divergence (same system prompt, tools and
requests): tests/e2e/test_reference_sample.py checks it.

    python -m examples.make_reference_dump          (from the repository root, in the project's venv)
"""

from __future__ import annotations

from pathlib import Path

from examples.demo.fake_llm import FakeLLM
from examples.demo.stage import ProductionAgent, crm_tools, inject

OUT = Path(__file__).parent / "dumps" / "crm-agent.otlp.jsonl"
INCIDENT = "INC-2026-1129-8"
CONVERSATIONS = [  # (session id, user turn, incident flagged by the user, or None)
    ("conv-bluewing-email", "What is the email on file for Bluewing?", None),
    ("conv-bluewing-phone", "What is the phone number on file for Bluewing?", INCIDENT),
]


def main() -> None:
    OUT.unlink(missing_ok=True)
    llm, tools = FakeLLM(), crm_tools()
    tools.start()
    try:
        with ProductionAgent(llm.base_url, tools.url, otlp_file=OUT, service_name="crm-agent") as agent:
            for session_id, text, incident in CONVERSATIONS:
                print(f"{session_id}: {text!r} -> {inject(agent.url, session_id, text, incident)['reply']!r}")
    finally:
        tools.stop()
        llm.stop()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
