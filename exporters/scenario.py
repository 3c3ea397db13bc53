"""Session -> the human-facing skeleton: `scenario.yaml`, `scorer.py`, `IMPORTED.md`.

Trace text is untrusted. It enters these files only as data: YAML scalars
written by the YAML emitter, Python literals written by `repr`, Markdown code
spans/blocks fenced longer than any backtick run inside them. Comments carry
only ASCII JSON-escaped names, so no newline can escape a comment.
"""

from __future__ import annotations

import functools
import io
import json
import re
from typing import Any

import orjson
import yaml

from wt_otel import __version__
from wt_otel._util import safejson
from wt_otel.exporters.envelope import source_ref
from wt_otel.ingest.capture import capture_hint
from wt_otel.model.session import Session
from wt_otel.scoring.names import AUTO_REPLAY_SCORERS

FIXTURES = {"envelope": "incident.wtin.json", "universe": "fixture.universe.json", "cassette": "llm.cassette.json"}
MAX_FACTS = 12
MAX_ANSWER = 4000
AUTO_REPLAY_TAG = "auto-replay"


def observed_tools(session: Session) -> list[str]:
    names = [c.tool_name for c in sorted(session.witnessed_calls, key=lambda c: c.start_ns)]
    names += [p.get("name") or "" for m in session.messages for p in m["parts"] if p.get("type") == "tool_call"]
    return [n for n in dict.fromkeys(names) if n]


_SafeDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: ~20x faster
_STR, _INT, _BOOL, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "int", "bool", "null"))


class _Dumper(_SafeDumper):
    """The safe dumper, with the scalars of plain JSON types represented without the generic dispatch
    (the representer, not libyaml's emitter, was most of the cost): the same nodes, so the same bytes."""

    def represent_data(self, data: Any) -> Any:
        node = _scalar(data)
        return node if node is not None else super().represent_data(data)

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """The safe resolver's tag, without its per-call list building and regexes in the common case: a
        scalar whose first character no implicit resolver is registered for (most trace text), a scalar
        asked about as quoted, or a collection. Anything else, and any resolver setup but the default one,
        takes the resolver's path."""
        resolvers = self.yaml_implicit_resolvers
        if not self.yaml_path_resolvers and None not in resolvers:
            if kind is yaml.ScalarNode:
                # the emitter asks twice per scalar: as plain (implicit[0]), then as quoted, which no implicit
                # resolver reads
                if not implicit[0] or (value and value[0] not in resolvers):
                    return self.DEFAULT_SCALAR_TAG
            elif kind is yaml.MappingNode:
                return self.DEFAULT_MAPPING_TAG
            elif kind is yaml.SequenceNode:
                return self.DEFAULT_SEQUENCE_TAG
        return super().resolve(kind, value, implicit)


def _scalar(data: Any) -> Any:
    """The node of a plain JSON scalar (str, bool, int, None), as the safe representer makes it; None otherwise."""
    kind = type(data)
    if kind is str:
        return yaml.ScalarNode(_STR, data)
    if kind is bool:
        return yaml.ScalarNode(_BOOL, "true" if data else "false")
    if kind is int:
        return yaml.ScalarNode(_INT, str(data))
    if data is None:
        return yaml.ScalarNode(_NULL, "null")
    return None


_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


class _NotPlain(Exception):
    """A value beyond plain JSON types: the representer's own dispatch handles it."""


def _node(data: Any, seen: dict[int, Any]) -> Any:
    """The node `_Dumper`'s representer makes of plain JSON data (block style, keys in order, a list or
    dict met twice is the same node: an alias), without its per-value dispatch."""
    scalar = _scalar(data)
    if scalar is not None:
        return scalar
    kind = type(data)
    if kind is dict or kind is list:
        node = seen.get(id(data))
        if node is not None:
            return node
        if kind is dict:
            pairs: list[tuple[Any, Any]] = []
            node = seen[id(data)] = yaml.MappingNode(_MAP, pairs, flow_style=False)
            pairs.extend((_node(k, seen), _node(v, seen)) for k, v in data.items())
        else:
            items: list[Any] = []
            node = seen[id(data)] = yaml.SequenceNode(_SEQ, items, flow_style=False)
            items.extend(_node(v, seen) for v in data)
        return node
    raise _NotPlain


def _dump(data: Any) -> str:
    """`yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)`: the nodes made
    here for plain data, then libyaml's serializer and emitter exactly as `yaml.dump` drives them."""
    try:
        node = _node(data, {})
    except _NotPlain:
        return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    stream = io.StringIO()
    dumper = _Dumper(stream, default_flow_style=False, width=100, allow_unicode=True, sort_keys=False)
    try:
        dumper.open()
        dumper.serialize(node)
        dumper.close()
    finally:
        dumper.dispose()
    return stream.getvalue()


def _yaml(data: dict[str, Any]) -> str:
    try:
        return _dump(data).rstrip()
    except (UnicodeEncodeError, RecursionError, yaml.YAMLError):
        # trace text the emitter refuses (lone surrogates, deep nesting): the same values, kept as text
        clean = safejson.sanitize(data)
        return _dump(clean).rstrip()


@functools.cache
def _tail_yaml() -> str:
    """The part of every scenario.yaml that no session changes, emitted once."""
    return _yaml({"assertions": [], "fixtures": dict(FIXTURES), "scorer": "scorer.py", "runs": 1})


def scenario_yaml(session: Session, scenario_id: str, unreviewed_tag: bool = True, auto_replay: bool = False,
                  tools: list[str] | None = None) -> str:
    """The scenario as commented YAML: data by the YAML emitter, comments only from escaped names.

    `auto_replay`: written by `wt-otel serve` for an automatic replay; tagged `auto-replay` (and always
    `unreviewed`) so a selection can keep such scenarios out of an authored suite (`--tag`). `tools`:
    `observed_tools(session)`, when the caller has it already (IMPORTED.md lists them too).
    """
    ref = source_ref(session)
    tools = observed_tools(session) if tools is None else tools
    tags = ([f"origin:{ref}"] if ref else []) + ["imported"] + (["unreviewed"] if unreviewed_tag or auto_replay
                                                                    else [])
    tags += [AUTO_REPLAY_TAG] if auto_replay else []
    head = {
        "wt_scenario": 1,
        "id": scenario_id,
        "description": f"Replay of incident {ref}" if ref else f"Replay of imported session {scenario_id}",
        "tags": tags,
        "user_turns": session.user_turns or ["TODO: the user's request was not captured; write it here"],
        "requires_tool_use": bool(tools),
    }
    lines = [
        "# Scenario skeleton written by wt-otel serve for an automatic replay (not reviewed by anyone):"
        if auto_replay else "# Scenario skeleton written by wt-otel import. Review it before committing:",
        "# the trace shows what the agent did, not what it should have done.",
        _yaml(head),
    ]
    if tools:
        lines.append("# Tools the agent called in the incident. Trajectory checks are opt-in: uncomment to require.")
        lines.append("# must_call:")
        lines.extend(f"#   - {json.dumps(t, ensure_ascii=True)}" for t in tools)
    lines.append("# TODO assertions: tool-sequence, tool-arguments, output, policy (see README).")
    lines.append(_tail_yaml())
    return "\n".join(lines) + "\n"


def suggested_facts(answer: str) -> list[str]:
    """Short, checkable pieces of the final answer: numbers, e-mails, ids, then sentences."""
    tokens = re.findall(r"[\w.+-]+@[\w-]+\.[\w.-]+|\b\d[\d,.:/-]*\d\b|\b\d\b|#\w+", answer)
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", answer) if 3 <= len(s.strip()) <= 200]
    return list(dict.fromkeys(tokens + sentences))[:MAX_FACTS]


def _preamble(session: Session) -> str:
    """The recorded answer and facts taken from it, as Python literals (`repr`: data, never code)."""
    answer = session.final_answer[:MAX_ANSWER]
    facts_src = "".join(f"    {f!r},\n" for f in suggested_facts(answer))
    return f"""# The final answer recorded in the incident, and facts taken from it, offered
# as a starting point. They are data only; pick the ones that must hold.
RECORDED_ANSWER = {answer!r}
SUGGESTED_FACTS = [
{facts_src}]
"""


def scorer_py(session: Session, outcome_scorers: list[str] | None = None) -> str:
    """The outcome scorer: a stub that fails until reviewed, or (`outcome_scorers`) an automatic replay's
    default check built from whitelisted `wt_otel.scorers` factory names (anything else raises ValueError:
    the names become code, so they are checked here too, not only in the config)."""
    if outcome_scorers is not None:
        return _default_scorer_py(session, outcome_scorers)
    data = _preamble(session)
    return f'''"""Outcome scorer stub written by wt-otel import.

It fails on purpose until a human decides what a correct outcome is: the
trace shows what the agent did, not what it should have done.
"""

from __future__ import annotations

{data}

def outcome(trace) -> tuple[bool, str]:
    """Return (passed, detail) for one replayed run (a wt_otel.contracts.results.LayerResult works too)."""
    # TODO: write the outcome check, e.g. every required fact appears in the final reply and the tools
    # returned it. wt_otel.scorers has the pieces (each returns a LayerResult):
    #     from wt_otel.scorers import all_of, substantiated_by_tools, target_facts
    #     outcome = all_of(target_facts([...]), substantiated_by_tools())
    return False, "scorer.py is an unreviewed stub: write the outcome check (see SUGGESTED_FACTS)"
'''


def _default_scorer_py(session: Session, names: list[str]) -> str:
    unknown = [n for n in names if n not in AUTO_REPLAY_SCORERS]
    if unknown or not names:
        raise ValueError(f"outcome scorers must be some of {sorted(AUTO_REPLAY_SCORERS)}, got {names!r}")
    names = list(dict.fromkeys(names))
    data = _preamble(session)
    calls = ", ".join(f"{n}()" for n in names)
    return f'''"""Outcome scorer written by wt-otel serve for an automatic replay. NOT REVIEWED.

The check below is the serve config's default (replay.outcome_scorers), not a
judgment about this incident: it catches a replay that left the recording or
claims what no tool returned. Replace it with the real outcome check before
this scenario joins a suite (see IMPORTED.md).
"""

from __future__ import annotations

from wt_otel.scorers import {", ".join(sorted({"all_of", *names}))}

{data}
# Default outcome check (unreviewed): {" + ".join(names)}.
outcome = all_of({calls})
'''


_FLAT = frozenset({str, bool, type(None)})


def _indented_json(data: dict[str, Any]) -> str:
    """`json.dumps(data, indent=2, ensure_ascii=False)`: orjson writes the same text for a flat object of
    strings, booleans and nulls (the envelope's source) without the stdlib's pure-Python indenting encoder;
    anything else (numbers, nesting, text orjson refuses) takes the stdlib's way."""
    if all(type(k) is str and type(v) in _FLAT for k, v in data.items()):
        try:
            return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
        except orjson.JSONEncodeError:  # a lone surrogate
            pass
    return json.dumps(data, indent=2, ensure_ascii=False)


def _code(text: Any) -> str:
    """Inline code span that no content can break out of."""
    s = str(text).replace("\n", " ").replace("\r", " ")
    run = max((len(m) for m in re.findall(r"`+", s)), default=0) if "`" in s else 0
    fence = "`" * (run + 1)
    return f"{fence} {s} {fence}"


def _block(text: str) -> str:
    run = max((len(m) for m in re.findall(r"`+", text)), default=0) if "`" in text else 0
    fence = "`" * max(3, run + 1)
    return f"{fence}text\n{text}\n{fence}"


def imported_md(session: Session, scenario_id: str, source: dict[str, Any], stubbed: list[str],
                outcome_scorers: list[str] | None = None, tools: list[str] | None = None) -> str:
    tools = observed_tools(session) if tools is None else tools
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
    ]
    if outcome_scorers is not None:
        out += [
            "> **Not reviewed.** `wt-otel serve` imported this flagged incident automatically and queued it",
            "> for replay (tags `unreviewed`, `auto-replay`). Its `scorer.py` holds the config's default outcome",
            f"> check ({', '.join(_code(n) for n in outcome_scorers)}), not a judgment of this incident: review",
            "> it, and the rest of the list below, before this scenario joins a suite.",
            "",
        ]
    out += [
        "## Source",
        "",
        _block(_indented_json(source)),
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
        "- [ ] `scorer.py`: replace the default outcome check with this incident's real one."
        if outcome_scorers is not None else "- [ ] `scorer.py`: write the outcome check (it fails until you do).",
        "- [ ] `scenario.yaml`: add assertions; uncomment `must_call` only if the route matters.",
        "- [ ] `scenario.yaml`: drop the `unreviewed` tag once the above is done (until then a replay that "
        "passes reads UNREVIEWED, never PASS).",
        "- [ ] Redaction: fixtures hold verbatim tool results; scrub PII and secrets before committing.",
    ]
    if stubbed:
        out.append(f"- [ ] Tool schemas stubbed (no definition recorded): {', '.join(_code(t) for t in stubbed)}")
    if not session.content_captured:
        out.append("- [ ] Message content was not captured or was redacted: fill the user turns by hand "
                   f"({_code(capture_hint(session))}).")
    if session.warnings:
        out += ["", "## Warnings", ""] + [f"- {_code(w)}" for w in session.warnings]
    if session.omitted_parts:
        out += ["", "## Parts Contract A v1 cannot carry (kept in `omitted_parts` of the envelope)", ""]
        out += [f"- message {p['message_index']} ({_code(p['role'])}): {_code(p['part'].get('type'))}"
                for p in session.omitted_parts]
    return "\n".join(out) + "\n"
