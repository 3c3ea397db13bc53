"""Every producer fixture with an `expected.json` imports to exactly the sessions it recorded.

The fixtures under tests/fixtures/producers/<producer>/ were emitted by the real
library driving the travel-weather story (see _common/weather_story.py); their
`expected.json` is the ground truth. Each dump must import to one session per
story session, with each user turn once, each final answer, every tool call with
its arguments as an object and its result, and nothing extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import PRODUCERS
from tests.support.session_fields import observed
from wt_otel.components import load
from wt_otel.ingest.importer import import_dumps


def _dumps() -> list[str]:
    found = []
    for expected in sorted(PRODUCERS.glob("*/expected.json")):
        for dump in sorted(expected.parent.iterdir()):
            if dump.name.startswith(("dump", "trace")) and dump.is_file():
                found.append(str(dump.relative_to(PRODUCERS)))
    return found


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _observed(env: dict[str, Any]) -> dict[str, Any]:
    """What a person reading the envelope would take the session to be (`session_fields.observed`), plus
    empty messages and every witnessed call in the transcript's terms (what the universe is built from)."""
    return {
        **observed(env),
        "empty": [i for i, m in enumerate(env["messages"]) if not m["parts"]],
        "witnessed": sorted((w["tool_name"], _canon(w["args"]), _canon(w["result"])) for w in env["witnessed_calls"]),
    }


def _wanted(session: dict[str, Any]) -> dict[str, Any]:
    return {
        "users": [t["user"] for t in session["turns"]],
        "answers": [t["answer"] for t in session["turns"]],
        "tool_calls": [{k: c[k] for k in ("name", "arguments", "result")} for t in session["turns"]
                       for c in t["tool_calls"]],
        "empty": [],
        "witnessed": [],
    }


# Dumps in which the producer recorded no message content: the import must say so (naming a setting),
# keep what the tool spans witnessed, and invent no turn.
CONTENT_OFF = {
    "bedrock-openllmetry/dump-metrics-off.otlp.jsonl",  # OpenLLMetry bedrock with TRACELOOP_METRICS_ENABLED=false
}
# ... and in which not even the tool spans hold arguments or results: nothing to import, and the import says why.
NOTHING = {
    "google-adk/dump-default-no-content.otlp.jsonl": "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
}


@pytest.mark.parametrize("dump", sorted(NOTHING))
def test_producer_without_any_content_imports_nothing_and_names_the_setting(dump: str, tmp_path: Path):
    report = import_dumps([PRODUCERS / dump], load("exporters", "scenario-dir")(tmp_path))
    assert report.written == [] and report.errors == []
    assert report.why_none and "content capture is off" in report.why_none and NOTHING[dump] in report.why_none


@pytest.mark.parametrize("dump", sorted(CONTENT_OFF))
def test_producer_without_content_is_said_so_and_keeps_the_witnessed_calls(dump: str, tmp_path: Path):
    path = PRODUCERS / dump
    expected = json.loads((path.parent / "expected.json").read_text())
    report = import_dumps([path], load("exporters", "scenario-dir")(tmp_path))
    assert report.errors == []
    envelopes = [json.loads((d / "incident.wtin.json").read_text()) for d in report.written]
    assert len(envelopes) == len(expected["sessions"])
    for env in envelopes:
        assert env["messages"] == [] and env["provenance"]["content_captured"] is False
        [off] = [d for d in env["diagnostics"] if d["kind"] == "content_off"]
        assert "TRACELOOP_TRACE_CONTENT" in off["setting"]
    witnessed = sorted((w["tool_name"], _canon(w["args"]), _canon(w["result"]))
                       for env in envelopes for w in env["witnessed_calls"])
    assert witnessed == sorted((c["name"], _canon(c["arguments"]), _canon(c["result"]))
                               for s in expected["sessions"] for t in s["turns"] for c in t["tool_calls"])


# Producers of issue 29 that do not import exactly yet: each names what is still wrong. Strict xfail: a dump
# that becomes exact fails here until it is taken off this list.
KNOWN_INEXACT: dict[str, str] = {}


def _exact_param(dump: str):
    if dump in KNOWN_INEXACT:
        return pytest.param(dump, marks=pytest.mark.xfail(reason=KNOWN_INEXACT[dump], strict=True))
    return dump


@pytest.mark.parametrize("dump", [_exact_param(d) for d in _dumps() if d not in CONTENT_OFF and d not in NOTHING])
def test_producer_imports_to_exactly_the_recorded_sessions(dump: str, tmp_path: Path):
    path = PRODUCERS / dump
    expected = json.loads((path.parent / "expected.json").read_text())
    report = import_dumps([path], load("exporters", "scenario-dir")(tmp_path))
    assert report.errors == []
    envelopes = [json.loads((d / "incident.wtin.json").read_text()) for d in report.written]
    got = sorted((_observed(e) for e in envelopes), key=lambda s: s["users"][:1])
    want = sorted((_wanted(s) for s in expected["sessions"]), key=lambda s: s["users"][:1])
    assert len(got) == len(want), [s["users"] for s in got]
    for g, w in zip(got, want, strict=True):
        if g["witnessed"]:  # a producer that records tool spans: each call once, as the model asked for it
            w["witnessed"] = sorted((c["name"], _canon(c["arguments"]), _canon(c["result"])) for c in w["tool_calls"])
        assert g == w
    for env in envelopes:
        assert all(isinstance(p["arguments"], dict) for m in env["messages"] for p in m["parts"]
                   if p["type"] == "tool_call")
