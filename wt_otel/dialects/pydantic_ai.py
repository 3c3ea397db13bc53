"""Placeholder: filled in once real producer fixtures exist."""

from __future__ import annotations

from wt_otel.session import Observation
from wt_otel.spans import SpanRecord

NAME = "pydantic_ai"


def extract(span: SpanRecord) -> list[Observation]:
    return []
