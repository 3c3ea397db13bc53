"""Shared test helpers: real OTel SDK spans written as real OTLP dumps."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "producers" / "_common"))
from otlp_dump import encode_spans, to_otlp_json  # noqa: E402


@pytest.fixture
def otlp_dump(tmp_path: Path) -> Callable[..., Path]:
    """Run `build(tracer)` under a real SDK TracerProvider and write the spans as an
    OTLP/JSON dump (one request per top-level call, like the collector's file exporter)."""

    def make(build: Callable, name: str = "dump.otlp.jsonl", service: str = "test-agent") -> Path:
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        build(provider.get_tracer("wt-otel-tests"))
        provider.shutdown()
        path = tmp_path / name
        with path.open("a") as f:
            f.write(json.dumps(to_otlp_json(encode_spans(exporter.get_finished_spans()))) + "\n")
        return path

    return make


def chat_span(tracer, model: str = "gpt-x", inputs=None, outputs=None, **attrs):
    """A semconv >= 1.37 chat span with JSON-string message attributes."""
    span_attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                  "gen_ai.provider.name": "openai", **attrs}
    if inputs is not None:
        span_attrs["gen_ai.input.messages"] = json.dumps(inputs)
    if outputs is not None:
        span_attrs["gen_ai.output.messages"] = json.dumps(outputs)
    with tracer.start_as_current_span(f"chat {model}", attributes=span_attrs) as span:
        return span


def user(text: str) -> dict:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def assistant(text: str | None = None, calls: list[tuple[str, str, dict]] = ()) -> dict:
    parts = [{"type": "text", "content": text}] if text else []
    parts += [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in calls]
    return {"role": "assistant", "parts": parts}


def tool(call_id: str, response) -> dict:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": response}]}
