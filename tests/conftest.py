"""Shared test helpers: real OTel SDK spans written as real OTLP dumps."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.producers import encode_spans, to_otlp_json


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
