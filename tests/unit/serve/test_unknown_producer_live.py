"""A producer no dialect and no key prefix knows (issue 29), through a real `wt-otel serve` with its GenAI filter
on: its model call names the model and counts tokens, so the trace reaches the shape reader, as in import."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.serve.test_by_reference import serve
from wt_otel.exporters.datadir import read_index
from wt_otel.model.spans import SpanRecord

TRACE = "ac" * 16


def acme_turn() -> list[SpanRecord]:
    def span(sid: str, name: str, attrs: dict, parent: str | None = None, start: int = 1) -> SpanRecord:
        return SpanRecord(trace_id=TRACE, span_id=sid * 8, name=name, parent_span_id=parent, start_ns=start,
                          end_ns=start + 100, attributes=attrs, resource={"service.name": "acme-bot"})

    run = span("01", "acme.agent.run", {"acme.span.kind": "agent", "acme.input": "Lisbon?", "acme.output": "Sunny."})
    model = span("02", "acme.model.call", {
        "acme.span.kind": "llm", "acme.model.name": "m", "acme.usage.input_tokens": 5,
        "acme.input.messages": json.dumps([{"role": "user", "content": "Lisbon?"}]),
        "acme.output.messages": json.dumps([{"role": "assistant", "content": "Sunny."}])}, parent="01" * 8, start=2)
    return [model, run]


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="wt-acme-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_producer_in_a_namespace_of_its_own_gives_its_session_in_serve(fast_dir: Path) -> None:
    serve(fast_dir, acme_turn(), render="all")
    [entry] = read_index(fast_dir).latest().values()
    env = json.loads((fast_dir / entry["path"] / "incident.wtin.json").read_text())
    texts = [(m["role"], m["parts"][0]["content"]) for m in env["messages"]]
    assert texts == [("user", "Lisbon?"), ("assistant", "Sunny.")]
    assert entry["trace_ids"] == [TRACE]


def test_model_call_bits_need_a_model_and_a_token_count() -> None:
    from wt_otel.ingest.keys import MODEL_CALL, NAMES_MODEL, model_call_bits

    assert model_call_bits("acme.model.name") | model_call_bits(b"acme.usage.Output_Tokens") == MODEL_CALL
    assert model_call_bits("http.model") == NAMES_MODEL
    assert model_call_bits("auth.token") == 0  # a token that counts nothing
    assert model_call_bits("acme.to\u212aen.input") == 0  # ASCII case folding only, as the C walk does
