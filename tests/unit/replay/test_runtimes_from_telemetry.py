"""Framework agents (OpenAI Agents SDK, LangGraph, pydantic-ai) replayed as they are, from their own
recorded telemetry.

Per framework, once per module: the user's agent (ordinary code in a module of its own) runs against the
fake provider (never the network) with the framework's real instrumentation (the OTel contrib GenAI
instrumentations for the Agents SDK, on its default Responses model; OpenInference for LangChain;
pydantic-ai's own), the spans go to a collector-style dump, and `wt-otel import` turns it into a scenario.
Then `wt-otel run SCENARIO --runtime FRAMEWORK:MODULE:ATTR --llm replay` must PASS with zero divergence
while the live tool body (which fails the test once the recording is done) never runs; the same agent
with a tool path that answers outside the universe must come out INVALID.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.producers import FIRST_ANSWER  # also puts the fake provider (fake_openai) on sys.path
from wt_otel.cli import main
from wt_otel.contracts.run import load_trace

pytest.importorskip("langgraph", reason="langgraph is a test dependency")
pytest.importorskip("pydantic_ai", reason="pydantic-ai is a test dependency")

from fake_openai import start_server  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from otlp_dump import JsonlSpanExporter  # noqa: E402

ASK = "What is the email on file for Bluewing?"
DEAD_URL = "http://127.0.0.1:9/v1"  # discard port: a model call that escapes the runtime fails, never leaves

# The user's agents. `LIVE` counts live tool runs; once `FORBID` is set (after the recording) a live run
# fails the test. The bypass variant answers the tool outside the universe (a tool guardrail, a
# middleware, a toolset wrapper answering from a cache), as a real agent's shortcut would.
OPENAI_AGENTS_AGENT = '''
import dataclasses

from agents import Agent, ToolGuardrailFunctionOutput, function_tool, tool_input_guardrail

LIVE = []
FORBID = False


@function_tool
def client_lookup(query: str) -> dict:
    """Look up a client by name or account id."""
    LIVE.append(query)
    if FORBID:
        raise AssertionError("the live tool body ran during a replay")
    return {"email": "ops@bluewing.example"}


@tool_input_guardrail
def cached(data):
    """A shortcut that answers from a local cache: the universe never sees the call."""
    return ToolGuardrailFunctionOutput.reject_content('{"email": "ops@bluewing.example"}')


agent = Agent("crm", instructions="You are a CRM assistant.", model="gpt-4o-mini", tools=[client_lookup])
bypassing = agent.clone(tools=[dataclasses.replace(client_lookup, tool_input_guardrails=[cached])])
'''

LANGGRAPH_AGENT = '''
from langchain.agents import create_agent
from langchain.agents.middleware import wrap_tool_call
from langchain_core.messages import ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

LIVE = []
FORBID = False
SYSTEM = "You are a CRM assistant. Use client_lookup to find client details."


@tool
def client_lookup(query: str) -> dict:
    """Look up a client by name or account id."""
    LIVE.append(query)
    if FORBID:
        raise AssertionError("the live tool body ran during a replay")
    return {"email": "ops@bluewing.example"}


@wrap_tool_call
def cached(request, handler):
    """A shortcut that answers from a local cache: the universe never sees the call."""
    return ToolMessage(content='{"email": "ops@bluewing.example"}', tool_call_id=request.tool_call["id"],
                       name=request.tool_call["name"])


model = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test", max_retries=0)
agent = create_agent(model, tools=[client_lookup], system_prompt=SYSTEM)
bypassing = create_agent(model, tools=[client_lookup], system_prompt=SYSTEM, middleware=[cached])
'''

PYDANTIC_AI_AGENT = '''
from dataclasses import dataclass

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.toolsets import FunctionToolset, WrapperToolset

LIVE = []
FORBID = False
INSTRUCTIONS = "You are a CRM assistant. Use client_lookup to find client details."


def client_lookup(query: str) -> dict:
    """Look up a client by name or account id.

    Args:
        query: The client name or account id.
    """
    LIVE.append(query)
    if FORBID:
        raise AssertionError("the live tool body ran during a replay")
    return {"email": "ops@bluewing.example"}


@dataclass
class Cached(WrapperToolset):
    """A shortcut that answers from a local cache: the universe never sees the call."""

    async def call_tool(self, name, tool_args, ctx, tool):
        return {"email": "ops@bluewing.example"}


model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(api_key="sk-test"))
agent = Agent(model, name="crm-assistant", instructions=INSTRUCTIONS, tools=[client_lookup])
bypassing = Agent(model, name="crm-assistant", instructions=INSTRUCTIONS,
                  toolsets=[Cached(FunctionToolset([client_lookup]))])
'''


def _record_openai_agents(mod: Any, provider: TracerProvider) -> None:
    """The reference agent's instrumentation set-up (contrib openai + openai-agents GenAI), into `provider`."""
    from agents import Runner
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    from opentelemetry.instrumentation.genai.openai_agents import OpenAIAgentsInstrumentor

    from wt_otel.recording import SEMCONV_ENV

    saved = {k: os.environ.get(k) for k in SEMCONV_ENV}
    os.environ.update(SEMCONV_ENV)
    instrumentors = [OpenAIInstrumentor(), OpenAIAgentsInstrumentor()]
    instrumentors[0].instrument(tracer_provider=provider)
    instrumentors[1].instrument(tracer_provider=provider, disable_openai_trace_export=True)
    try:
        assert Runner.run_sync(mod.agent, ASK).final_output == FIRST_ANSWER
    finally:
        for instrumentor in reversed(instrumentors):
            instrumentor.uninstrument()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _record_langgraph(mod: Any, provider: TracerProvider) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        state = mod.agent.invoke({"messages": [{"role": "user", "content": ASK}]})
    finally:
        instrumentor.uninstrument()
    assert state["messages"][-1].content == FIRST_ANSWER


def _record_pydantic_ai(mod: Any, provider: TracerProvider) -> None:
    from pydantic_ai import Agent, InstrumentationSettings

    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    try:
        assert mod.agent.run_sync(ASK).output == FIRST_ANSWER
    finally:
        Agent.instrument_all(False)


FRAMEWORKS = {
    "openai-agents": (OPENAI_AGENTS_AGENT, _record_openai_agents),
    "langgraph": (LANGGRAPH_AGENT, _record_langgraph),
    "pydantic-ai": (PYDANTIC_AI_AGENT, _record_pydantic_ai),
}


REVIEWED_SCORER = """from wt_otel.scorers import all_of, substantiated_by_tools, target_facts

outcome = all_of(target_facts(["ops@bluewing.example"]), substantiated_by_tools())
"""


def review(scenario: Path) -> None:
    """What a developer does with an imported scenario: write the outcome check, drop `unreviewed`."""
    (scenario / "scorer.py").write_text(REVIEWED_SCORER)
    spec = scenario / "scenario.yaml"
    spec.write_text(spec.read_text().replace("- unreviewed\n", ""))


class Recorded:
    """One framework's agent module, recorded and imported: `scenario` is the imported directory."""

    def __init__(self, framework: str, root: Path, module: str, mod: Any, scenario: Path) -> None:
        self.framework, self.root, self.module, self.mod, self.scenario = framework, root, module, mod, scenario

    def run(self, attr: str, runs_dir: str) -> tuple[int, str, list]:
        res = CliRunner().invoke(main, ["run", str(self.scenario), "--runtime",
                                        f"{self.framework}:{self.module}:{attr}", "--llm", "replay",
                                        "--universe-port", "0", "--llm-port", "0", "--runs-dir", runs_dir],
                                 catch_exceptions=False)
        traces = [load_trace(json.loads(p.read_text()))
                  for p in sorted((self.root / runs_dir).rglob("*.trace.json"))]
        return res.exit_code, res.output, traces


@pytest.fixture(scope="module", params=sorted(FRAMEWORKS))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    framework = request.param
    source, record = FRAMEWORKS[framework]
    root = tmp_path_factory.mktemp(framework)
    module = f"wt_user_agent_{framework.replace('-', '_')}"
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    server, port = start_server()
    saved = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    os.environ["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"  # the user's provider while recording
    os.environ["OPENAI_API_KEY"] = "sk-test"
    sys.path.insert(0, str(root))
    try:
        mod = __import__(module)
        provider = TracerProvider(resource=Resource.create({"service.name": f"crm-{framework}"}))
        dump = root / "dump.otlp.jsonl"
        provider.add_span_processor(SimpleSpanProcessor(JsonlSpanExporter(str(dump))))
        record(mod, provider)
        provider.shutdown()
    finally:
        server.shutdown()
        server.server_close()
    res = CliRunner().invoke(main, ["import", str(dump), "--out", str(root / "scenarios")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    [scenario] = [p.parent for p in (root / "scenarios").rglob("scenario.yaml")]
    review(scenario)
    assert mod.LIVE == ["Bluewing"]  # the recording ran the live tool once
    mod.FORBID = True
    os.environ["OPENAI_BASE_URL"] = DEAD_URL  # from here on, a model call the runtime missed goes nowhere
    cwd = os.getcwd()
    os.chdir(root)
    try:
        yield Recorded(framework, root, module, mod, scenario)
    finally:
        os.chdir(cwd)
        sys.path.remove(str(root))
        sys.modules.pop(module, None)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_replays_from_its_own_telemetry_with_zero_divergence(recorded: Recorded):
    code, out, [trace] = recorded.run("agent", "runs-replay")
    assert code == 0 and "PASS" in out, out
    assert recorded.mod.LIVE == ["Bluewing"], "a live tool body ran during the replay"
    [turn] = trace.turns
    assert turn.error is None and turn.reply == FIRST_ANSWER
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("client_lookup", {"query": "Bluewing"})]
    assert [(c.tool_name, c.match) for c in trace.mcp_calls] == [("client_lookup", "exact")]
    assert [c.match for c in trace.llm_calls] == ["exact", "exact"]
    assert trace.integrity.status == "PASS" and trace.evidence.llm == "replay"


def test_a_tool_answered_outside_the_universe_is_invalid(recorded: Recorded):
    code, out, [trace] = recorded.run("bypassing", "runs-bypass")
    assert code == 1 and "INVALID" in out, out
    assert recorded.mod.LIVE == ["Bluewing"]
    assert trace.mcp_calls == []  # the universe never saw the call the agent reports
    assert [c.name for c in trace.turns[0].tool_calls] == ["client_lookup"]
    assert trace.integrity.status != "PASS"


def test_the_users_agent_is_unchanged_after_a_replay(recorded: Recorded):
    """The runtime swaps tools and model clients for a turn only: the agent's own objects come back."""
    recorded.run("agent", "runs-unchanged")
    if recorded.framework == "openai-agents":
        assert recorded.mod.agent.tools == [recorded.mod.client_lookup]
        assert recorded.mod.agent.model == "gpt-4o-mini"
    elif recorded.framework == "langgraph":
        tools = recorded.mod.agent.nodes["tools"].bound.tools_by_name
        assert tools["client_lookup"] is recorded.mod.client_lookup
        assert str(recorded.mod.model.root_client.base_url).startswith("http://127.0.0.1:")
        assert str(recorded.mod.model.root_client.base_url) != DEAD_URL + "/"  # built before the swap
    else:
        assert recorded.mod.agent.model is recorded.mod.model
        assert [t.name for t in recorded.mod.agent.toolsets[0].tools.values()] == ["client_lookup"]


@pytest.mark.parametrize(("spec", "message"), [
    ("langgraph:json:dumps", "expected a compiled LangGraph graph"),
    ("pydantic-ai:json:dumps", "expected a pydantic_ai.Agent"),
    ("langgraph", "needs a target"),
    ("pydantic-ai:no_such_module_here:agent", "cannot import"),
])
def test_a_target_that_is_not_an_agent_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         spec: str, message: str):
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "scenario.yaml").write_text("wt_scenario: 1\nid: x\nuser_turns: [hi]\n")
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["run", "sc", "--runtime", spec, "--universe-port", "0"])
    assert res.exit_code == 2 and message in res.output, res.output
