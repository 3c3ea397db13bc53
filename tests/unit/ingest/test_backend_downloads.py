"""Import reads what tracing backends download (issue 12): pretty-printed OTLP/JSON, Tempo's `{"batches"}`,
a `{"result": …}` wrapper, and Jaeger's JSON model, each detected automatically.

The files in tests/fixtures/backends/ are the sample dump in each backend's exact output shape
(tests/fixtures/backends/generate.py says which API and what it changes); each must read back to the very
spans of the original, and import to the same sessions.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.ingest.dumps import LineError, detect_format, read_dump
from wt_otel.model.spans import SpanRecord

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "dumps" / "support-agent.otlp.jsonl"
BACKENDS = ROOT / "tests" / "fixtures" / "backends"
FILES = {"pretty.otlp.json": "otlp-json", "tempo.json": "otlp-json", "jaeger-v3.json": "otlp-json",
         "jaeger-ui.json": "jaeger-json"}


def spans(path: Path, fmt: str = "auto") -> dict[str, SpanRecord]:
    items = list(read_dump(path, fmt))
    assert not [i for i in items if isinstance(i, LineError)]
    return {s.span_id: s for s in items if isinstance(s, SpanRecord)}


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_backend_shape_is_detected(name: str) -> None:
    assert detect_format(BACKENDS / name) == FILES[name]


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_backend_shape_reads_back_to_the_original_spans(name: str) -> None:
    original, got = spans(SAMPLE), spans(BACKENDS / name)
    assert got.keys() == original.keys() and len(got) == 10
    for sid, span in original.items():
        other = got[sid]
        assert (other.trace_id, other.parent_span_id, other.name) == (span.trace_id, span.parent_span_id, span.name)
        assert (other.start_ns // 1000, other.end_ns // 1000) == (span.start_ns // 1000, span.end_ns // 1000)
        assert other.resource["service.name"] == span.resource["service.name"] == "acme-support-agent"
        assert other.status_code == span.status_code and other.scope_name == span.scope_name
        for key, value in span.attributes.items():  # Jaeger keeps arrays as JSON strings; the rest is exact
            assert other.attributes[key] == (json.dumps(value) if isinstance(value, list) and name == "jaeger-ui.json"
                                             else value), key
        assert other.kind == span.kind


def test_a_pretty_printed_document_with_an_explicit_format_is_one_document_not_600_errors(tmp_path: Path) -> None:
    """Was: `--format otlp-json` on a 608-line file gave 610 lines of `invalid JSON`."""
    items = list(read_dump(BACKENDS / "pretty.otlp.json", "otlp-json"))
    assert not [i for i in items if isinstance(i, LineError)] and len(items) == 10
    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress((BACKENDS / "tempo.json").read_bytes()))
    assert detect_format(gz) == "otlp-json" and len(spans(gz)) == 10


@pytest.mark.parametrize("name", sorted(FILES))
def test_import_of_a_backend_download_writes_the_same_sessions(name: str, tmp_path: Path) -> None:
    runner = CliRunner()
    base = runner.invoke(main, ["import", str(SAMPLE), "--out", str(tmp_path / "base")])
    assert base.exit_code == 0, base.output
    res = runner.invoke(main, ["import", str(BACKENDS / name), "--out", str(tmp_path / "got")])
    assert res.exit_code == 0, res.output
    want = sorted(p.name for p in (tmp_path / "base").iterdir())
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == want and len(want) == 2
    for slug in want:
        a = json.loads((tmp_path / "base" / slug / "incident.wtin.json").read_text())
        b = json.loads((tmp_path / "got" / slug / "incident.wtin.json").read_text())
        assert b["messages"] == a["messages"] and b.get("tool_calls") == a.get("tool_calls")


def test_a_broken_document_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text((BACKENDS / "pretty.otlp.json").read_text()[:-40])
    items = list(read_dump(bad, "otlp-json"))
    assert len(items) == 1 and isinstance(items[0], LineError)
    assert "neither one value per line nor one document" in items[0].message
    jaeger = json.loads((BACKENDS / "jaeger-ui.json").read_text())
    jaeger["data"][0]["spans"][0]["spanID"] = "zz"
    (tmp_path / "j.json").write_text(json.dumps(jaeger))
    errors = [i for i in read_dump(tmp_path / "j.json") if isinstance(i, LineError)]
    assert len(errors) == 1 and "data[0].spans[0].spanID: not a hex id" in errors[0].message
