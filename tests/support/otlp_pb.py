"""The producer fixtures' OTLP/JSON dumps as the protobuf requests serve receives.

The dumps are what the Collector's `file` exporter writes (one JSON export request per line, ids as
hex); `ParseDict` wants proto3 JSON (ids as base64). Every traces line becomes the serialized
`ExportTraceServiceRequest` an SDK would have sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.paths import ROOT

PRODUCERS = ROOT / "tests" / "fixtures" / "producers"
_ID_KEYS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}  # logs' too


def _b64_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_KEYS and isinstance(v, str) else
                _b64_ids(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_b64_ids(v) for v in node]
    return node


def trace_request(doc: dict[str, Any]) -> bytes | None:
    """One OTLP/JSON line as a serialized traces request; None for a logs (or empty) line."""
    resource_spans = doc.get("resourceSpans", doc.get("resource_spans"))
    if not resource_spans:
        return None
    request = ParseDict({"resourceSpans": _b64_ids(resource_spans)}, ExportTraceServiceRequest(),
                        ignore_unknown_fields=True)
    return request.SerializeToString()


def logs_request(doc: dict[str, Any]) -> bytes | None:
    """One OTLP/JSON line as a serialized logs request; None for a traces (or empty) line."""
    resource_logs = doc.get("resourceLogs", doc.get("resource_logs"))
    if not resource_logs:
        return None
    request = ParseDict({"resourceLogs": _b64_ids(resource_logs)}, ExportLogsServiceRequest(),
                        ignore_unknown_fields=True)
    return request.SerializeToString()


def exports(dump: Path) -> Iterator[tuple[str, bytes]]:
    """Every line of the dump as ("traces" | "logs", serialized request), in file order."""
    for line in dump.read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            for signal, convert in (("traces", trace_request), ("logs", logs_request)):
                body = convert(doc)
                if body is not None:
                    yield signal, body


def producer_dumps() -> list[Path]:
    """Every OTLP/JSON dump of the producer fixtures."""
    return sorted(PRODUCERS.glob("*/*.otlp.jsonl"))


def trace_requests(dump: Path) -> Iterator[bytes]:
    """The dump's traces lines as serialized requests, in file order."""
    for line in dump.read_text(encoding="utf-8").splitlines():
        if line.strip():
            body = trace_request(json.loads(line))
            if body is not None:
                yield body
