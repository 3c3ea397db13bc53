"""The issue-10 producer fixtures hold what their expected.json says they hold.

Checks the fixtures themselves, not the importer: every directory with an
expected.json is a complete, regenerable producer (generator + pinned
requirements or package-lock), its dumps are small OTLP/JSON request lines, and
the real library's output really carries the story (each user turn, answer,
tool name and argument value appears in some dump), so a test that imports the
dump can hold the importer to expected.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.producer_expected import PRODUCERS, dumps_of, load_expected, producers_with_expected

MAX_DUMP_BYTES = 200_000
DIRS = producers_with_expected()


def missing_content(producer_dir: Path, dumps: list[Path]) -> list[str]:
    """Story strings (user turns, answers, tool names, argument values) found in none of `dumps`."""
    text = "\n".join(d.read_text(encoding="utf-8") for d in dumps)
    wanted: list[str] = []
    for session in load_expected(producer_dir).sessions:
        for turn in session.turns:
            wanted += [turn.user, turn.answer]
            for call in turn.tool_calls:
                wanted.append(call.name)
                wanted += [v for v in call.arguments.values() if isinstance(v, str)]
    return [w for w in dict.fromkeys(wanted) if w not in text]


def test_there_are_issue_10_producers():
    names = {d.name for d in DIRS}
    assert {"langchain-openinference", "langchain-openllmetry", "strands-default", "strands-latest",
            "vercel-ai-sdk-genai", "vercel-ai-sdk-legacy", "anthropic-native", "openai-agents-v2-contrib",
            "openllmetry-events", "generic-unfamiliar"} <= names


@pytest.mark.parametrize("producer_dir", DIRS, ids=lambda p: p.name)
def test_producer_is_regenerable(producer_dir: Path):
    if (producer_dir / "package.json").exists():
        needed = ["package.json", "package-lock.json", "generate.mjs", "generate.sh"]
    else:
        needed = ["generate.py", "requirements.txt"]
    assert [n for n in needed if not (producer_dir / n).is_file()] == []
    if (producer_dir / "requirements.txt").exists():
        pins = [ln for ln in (producer_dir / "requirements.txt").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
        assert pins and all("==" in ln for ln in pins), "requirements must pin exact versions"


@pytest.mark.parametrize("producer_dir", DIRS, ids=lambda p: p.name)
def test_dumps_are_small_otlp_json_lines(producer_dir: Path):
    dumps = dumps_of(producer_dir)
    assert dumps, "no dump*.otlp.jsonl"
    for dump in dumps:
        assert dump.stat().st_size < MAX_DUMP_BYTES, dump.name
        for n, line in enumerate(dump.read_text(encoding="utf-8").splitlines(), 1):
            request = json.loads(line)
            assert set(request) <= {"resourceSpans", "resourceLogs"} and request, f"{dump.name}:{n}"


@pytest.mark.parametrize("producer_dir", DIRS, ids=lambda p: p.name)
def test_expected_json_is_the_story_and_the_dumps_carry_it(producer_dir: Path):
    expected = load_expected(producer_dir)
    turns = [t for s in expected.sessions for t in s.turns]
    assert len(expected.sessions) >= 2 and len(turns) >= 3
    assert any(len(t.tool_calls) >= 2 for t in turns), "a turn with two tool calls"
    assert all(t.user and t.answer for t in turns)
    assert expected.notes, "say what the producer does oddly"
    assert missing_content(producer_dir, dumps_of(producer_dir)) == []


def test_content_check_notices_a_dump_without_content():
    """ADK's default spans carry no content: the check must say what is missing."""
    adk = PRODUCERS / "google-adk"
    missing = missing_content(adk, [adk / "dump-default-no-content.otlp.jsonl"])
    story = load_expected(adk)
    assert story.sessions[0].turns[0].user in missing
    assert story.sessions[0].turns[0].answer in missing
