"""Session -> the human-facing skeleton: `scenario.yaml`, `scorer.py`, `IMPORTED.md`.

Trace text is untrusted. It enters these files only as data: YAML scalars
written by the YAML emitter, Python literals written by `repr`, Markdown code
spans/blocks fenced longer than any backtick run inside them. Comments carry
only ASCII JSON-escaped names, so no newline can escape a comment.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from wt_otel import __version__
from wt_otel.exporters.envelope import source_ref
from wt_otel.session import Session

FIXTURES = {"envelope": "incident.wtin.json", "universe": "fixture.universe.json", "cassette": "llm.cassette.json"}
MAX_FACTS = 12
MAX_ANSWER = 4000


def observed_tools(session: Session) -> list[str]:
    names = [c.tool_name for c in sorted(session.witnessed_calls, key=lambda c: c.start_ns)]
    names += [p.get("name") or "" for m in session.messages for p in m["parts"] if p.get("type") == "tool_call"]
    return [n for n in dict.fromkeys(names) if n]


def _yaml(data: dict[str, Any]) -> str:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: ~20x faster
    return yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, width=100).rstrip()


def scenario_yaml(session: Session, scenario_id: str, unreviewed_tag: bool = True) -> str:
    """The scenario as commented YAML: data by the YAML emitter, comments only from escaped names."""
    ref = source_ref(session)
    tools = observed_tools(session)
    tags = [f"origin:{ref}", "imported"] + (["unreviewed"] if unreviewed_tag else [])
    head = {
        "wt_scenario": 1,
        "id": scenario_id,
        "description": f"Replay of incident {ref}",
        "tags": tags,
        "user_turns": session.user_turns or ["TODO: the user's request was not captured; write it here"],
        "requires_tool_use": bool(tools),
    }
    tail = {"assertions": [], "fixtures": dict(FIXTURES), "scorer": "scorer.py", "runs": 1}
    lines = [
        "# Scenario skeleton written by wt-otel import. Review it before committing:",
        "# the trace shows what the agent did, not what it should have done.",
        _yaml(head),
    ]
    if tools:
        lines.append("# Tools the agent called in the incident. Trajectory checks are opt-in: uncomment to require.")
        lines.append("# must_call:")
        lines.extend(f"#   - {json.dumps(t, ensure_ascii=True)}" for t in tools)
    lines.append("# TODO assertions: tool-sequence, tool-arguments, output, policy (see README).")
    lines.append(_yaml(tail))
    return "\n".join(lines) + "\n"


def suggested_facts(answer: str) -> list[str]:
    """Short, checkable pieces of the final answer: numbers, e-mails, ids, then sentences."""
    tokens = re.findall(r"[\w.+-]+@[\w-]+\.[\w.-]+|\b\d[\d,.:/-]*\d\b|\b\d\b|#\w+", answer)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", answer) if 3 <= len(s.strip()) <= 200]
    return list(dict.fromkeys(tokens + sentences))[:MAX_FACTS]


def scorer_py(session: Session) -> str:
    answer = session.final_answer[:MAX_ANSWER]
    facts = suggested_facts(answer)
    facts_src = "".join(f"    {f!r},\n" for f in facts)
    return f'''"""Outcome scorer stub written by wt-otel import.

It fails on purpose until a human decides what a correct outcome is: the
trace shows what the agent did, not what it should have done.
"""

from __future__ import annotations

# The final answer recorded in the incident, and facts taken from it, offered
# as a starting point. They are data only; pick the ones that must hold.
RECORDED_ANSWER = {answer!r}
SUGGESTED_FACTS = [
{facts_src}]


def outcome(trace) -> tuple[bool, str]:
    """Return (passed, detail) for one replayed run (a wt_otel.results.LayerResult works too)."""
    # TODO: write the outcome check, e.g. every required fact appears in the final reply and the tools
    # returned it. wt_otel.scorers has the pieces (each returns a LayerResult):
    #     from wt_otel.scorers import all_of, substantiated_by_tools, target_facts
    #     outcome = all_of(target_facts([...]), substantiated_by_tools())
    return False, "scorer.py is an unreviewed stub: write the outcome check (see SUGGESTED_FACTS)"
'''


def _code(text: Any) -> str:
    """Inline code span that no content can break out of."""
    s = str(text).replace("\n", " ").replace("\r", " ")
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    return f"{fence} {s} {fence}"


def _block(text: str) -> str:
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, run + 1)
    return f"{fence}text\n{text}\n{fence}"


def imported_md(session: Session, scenario_id: str, source: dict[str, Any], stubbed: list[str]) -> str:
    tools = observed_tools(session)
    correlations: dict[str, int] = {}
    for c in session.witnessed_calls:
        correlations[c.correlation] = correlations.get(c.correlation, 0) + 1
    evidence = {
        "witnessed": "server-side execute_tool / TOOL spans (witnessed calls)",
        "transcript": "tool_call / tool_call_response pairs in the transcript (the agent's own account)",
        "none": "no tool calls were recorded",
    }[session.evidence]
    out = [
        f"# Imported scenario {_code(scenario_id)}",
        "",
        f"Written by wt-otel {__version__}. Everything mechanical is filled in; "
        "everything judgmental is a TODO below.",
        "",
        "## Source",
        "",
        _block(json.dumps(source, indent=2, ensure_ascii=False)),
        "",
        f"- trace ids: {', '.join(_code(t) for t in session.trace_ids)}",
        f"- service: {_code(session.service_name or 'unknown')}",
        f"- dialects read: {', '.join(_code(d) for d in session.dialects) or 'none'}",
        f"- flagged: {_code(session.flag_reason) if session.flagged else 'no'}",
        "",
        "## What was inferred, from which evidence",
        "",
        f"- user turns ({len(session.user_turns)}): from the user messages of the longest consistent history "
        f"across {len(session.llm_calls)} LLM call(s)",
        f"- tool universe: from {evidence}",
        f"- witnessed calls matched to transcript tool calls: "
        f"{', '.join(f'{k}: {v}' for k, v in sorted(correlations.items())) or 'none'}",
        f"- model: {_code(session.model or 'unknown')}, provider: {_code(session.provider or 'unknown')}",
        f"- tools observed: {', '.join(_code(t) for t in tools) or 'none'}",
        f"- requires_tool_use: {bool(tools)}",
        "",
        "## Needs human judgment",
        "",
        "- [ ] `scorer.py`: write the outcome check (it fails until you do).",
        "- [ ] `scenario.yaml`: add assertions; uncomment `must_call` only if the route matters.",
        "- [ ] Redaction: fixtures hold verbatim tool results; scrub PII and secrets before committing.",
    ]
    if stubbed:
        out.append(f"- [ ] Tool schemas stubbed (no definition recorded): {', '.join(_code(t) for t in stubbed)}")
    if not session.content_captured:
        out.append("- [ ] Message content was not captured or was redacted: fill the user turns by hand.")
    if session.warnings:
        out += ["", "## Warnings", ""] + [f"- {_code(w)}" for w in session.warnings]
    if session.omitted_parts:
        out += ["", "## Parts Contract A v1 cannot carry (kept in `omitted_parts` of the envelope)", ""]
        out += [f"- message {p['message_index']} ({_code(p['role'])}): {_code(p['part'].get('type'))}"
                for p in session.omitted_parts]
    return "\n".join(out) + "\n"
