"""An in-process agent that calls the served universe over real MCP, and a scenario-directory writer.

Used by the spec tests (triage, robustness, conformance): the agent is a real MCP client of whatever
universe `wt-otel run` serves ($WT_UNIVERSE_URL), so every witnessed call and perturbation is real.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import yaml
from mcp import Client

from wt_otel.replay.runner import ENV_UNIVERSE_URL, RunOptions, Sweep, SweepResult, load_all
from wt_otel.replay.scenarios import find_scenarios

UNIVERSE: dict[str, Any] = {
    "windtunnel_universe": 1,
    "tools": [{"name": "lookup_order", "description": "Find an order by id.",
               "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}],
    "recordings": [{"tool_name": "lookup_order", "args": {"order_id": "A-1"}, "result": {"status": "shipped"}}],
}


async def _call(url: str, calls: list[tuple[str, dict[str, Any]]], timeout_s: float | None
                ) -> list[tuple[Any, bool]]:
    async with Client(url) as client:
        out = []
        for name, args in calls:
            res = await client.call_tool(name, args, read_timeout_seconds=timeout_s)
            text = "".join(getattr(c, "text", "") for c in res.content)
            out.append((res.structured_content if res.structured_content is not None else text, res.is_error))
        return out


class UniverseAgent:
    """Each turn calls `calls` through the universe; the reply says what came back.

    A tool error or an empty result is reported honestly ("could not find ...") unless `naive`, in which
    case the agent claims success whatever the tool said (how a fabricating agent behaves).
    """

    def __init__(self, calls: list[tuple[str, dict[str, Any]]] | None = None, *, naive: bool = False,
                 model: str | None = None, quant: str | None = None, tool_timeout_s: float | None = None) -> None:
        self.calls = calls if calls is not None else [("lookup_order", {"order_id": "A-1"})]
        self.naive, self.model, self.quant, self.tool_timeout_s = naive, model, quant, tool_timeout_s

    def __call__(self, text: str, session_id: str) -> dict[str, Any]:
        try:
            results = asyncio.run(_call(os.environ[ENV_UNIVERSE_URL], self.calls, self.tool_timeout_s)) \
                if self.calls else []
        except Exception as exc:  # the tool did not answer in time: an agent-level error, in contract
            return {"reply": "", "error": f"tool call failed: {type(exc).__name__}: {exc}",
                    "tool_calls": [{"name": n, "arguments": a} for n, a in self.calls]}
        parts = []
        for (name, _), (result, is_error) in zip(self.calls, results, strict=True):
            empty = result in (None, "", [], {}, {"result": []}, {"result": {}}, {"result": ""})
            if (is_error or empty) and not self.naive:
                parts.append(f"I could not get {name}: the tool failed or found nothing")
            else:
                parts.append(f"Order status: shipped ({json.dumps(result)})" if self.naive else
                             f"{name}: {json.dumps(result)}")
        out: dict[str, Any] = {"reply": "; ".join(parts) or "no tools needed",
                               "tool_calls": [{"name": n, "arguments": a} for n, a in self.calls]}
        if self.model:
            out["model"] = self.model
        if self.quant:
            out["quant"] = self.quant
        return out

    def reset(self) -> None:
        """Stateless: nothing to wipe."""


NAIVE = UniverseAgent(naive=True)  # for `--runtime python:tests.support.universe_agent:NAIVE`


def write_scenario(root: Path, sid: str, *, universe: Any = UNIVERSE, **fields: Any) -> Path:
    d = root / sid
    d.mkdir(parents=True)
    (d / "fixture.universe.json").write_text(json.dumps(universe))
    doc = {"wt_scenario": 1, "id": sid, "user_turns": ["Where is A-1?"],
           "fixtures": {"universe": "fixture.universe.json"}, **fields}
    if "scorer_source" in doc:
        (d / "scorer.py").write_text(doc.pop("scorer_source"))
        doc["scorer"] = "scorer.py"
    (d / "scenario.yaml").write_text(yaml.safe_dump(doc))
    return d


def run_sweep(paths: list[Path], runtime: Any, tmp_path: Path, **kwargs: Any) -> SweepResult:
    kwargs.setdefault("universe_port", 0)
    kwargs.setdefault("llm_port", 0)
    options = RunOptions(runtime=runtime, runs_dir=tmp_path / "runs", emit=lambda line: None, **kwargs)
    return Sweep(options).run(load_all(find_scenarios(paths), options.llm))
