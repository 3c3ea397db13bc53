"""Ground truth of the issue-10 producer fixtures: the `expected.json` beside each dump.

`weather_story.write_expected` (tests/fixtures/producers/_common) writes it; this is
its schema, so tests that import a producer's dump can compare sessions against
what the producer was driven to do (user turns in order, tool calls with argument
and result objects, final answers) and read the producer's quirks in `notes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

PRODUCERS = Path(__file__).resolve().parent.parent / "fixtures" / "producers"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExpectedToolCall(_Strict):
    name: str
    arguments: dict[str, Any]
    result: Any
    round: int  # index of the model response that asked for it, within its turn


class ExpectedTurn(_Strict):
    user: str
    tool_calls: list[ExpectedToolCall]
    answer: str


class ExpectedSession(_Strict):
    story_session: str
    session_id: str | None  # the id the producer carries, when it carries one
    system: str
    turns: list[ExpectedTurn]


class ExpectedProducer(_Strict):
    sessions: list[ExpectedSession]
    notes: list[str]


def load_expected(producer_dir: Path) -> ExpectedProducer:
    return ExpectedProducer.model_validate_json((producer_dir / "expected.json").read_text(encoding="utf-8"))


def producers_with_expected() -> list[Path]:
    """Producer fixture directories that carry an expected.json."""
    return sorted(p.parent for p in PRODUCERS.glob("*/expected.json") if not p.parent.name.startswith("_"))


def dumps_of(producer_dir: Path) -> list[Path]:
    return sorted(producer_dir.glob("dump*.otlp.jsonl"))
