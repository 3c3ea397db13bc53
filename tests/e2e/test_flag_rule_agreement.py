"""One flag rule: the same dump yields the same incidents through `wt-otel import` and `wt-otel serve`.

Before the rule moved to `wt_otel.ingest.flags`, import flagged only `wt.incident`-style keys on
spans and serve ran its configurable rules (negative feedback, event attributes), so a thumbs-down
was an incident to serve and not to import. The dump here is written by the real OTel SDK; serve
receives it over OTLP/HTTP JSON (the collector `file` exporter's lines, posted as they are).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.fixtures.producers._common.otlp_dump import to_otlp_json
from wt_otel.cli import main
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import load_serve_config
from wt_otel.serve.server import Server


def _chat(tracer, ask: str, answer: str, **attrs) -> None:
    chat_attrs = {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x", "gen_ai.provider.name": "openai",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": ask}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}],
                                               "finish_reason": "stop"}]), **attrs}
    with (tracer.start_as_current_span("invoke_agent helper", attributes={"gen_ai.operation.name": "invoke_agent"}),
          tracer.start_as_current_span("chat gpt-x", attributes=chat_attrs) as span):
        if ask == "feedback event":
            span.add_event("user.feedback", {"user.feedback": "thumbs_down"})


def write_dump(path: Path) -> Path:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "flag-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("wt-otel-tests")
    _chat(tracer, "quiet", "ok")
    _chat(tracer, "incident", "boom", **{"wt.incident": "true", "wt.incident.id": "INC-7"})
    _chat(tracer, "legacy id", "boom", **{"incident.id": "INC-8"})
    _chat(tracer, "thumbs down", "meh", **{"gen_ai.feedback.rating": -1})
    _chat(tracer, "feedback event", "meh")
    _chat(tracer, "vip", "hello", **{"app.customer_tier": "vip"})
    provider.shutdown()
    with path.open("w") as f:
        for span in exporter.get_finished_spans():  # one request per span, like a collector flushing often
            f.write(json.dumps(to_otlp_json(encode_spans([span]))) + "\n")
    return path


CONFIG = """
flagger:
  rules:
    - {name: incident-attribute, keys: [wt.incident, wt.incident.id, wt.flag, incident.id], ref_from_value: true,
       ref_attribute: wt.incident.id}
    - {name: negative-feedback, keys: ["gen_ai.feedback.*", "user.feedback"], match: negative}
    - {name: vip, keys: [app.customer_tier], match: equals, value: vip}
"""


def imported(dump: Path, out: Path, *args: str) -> dict[str, tuple]:
    r = CliRunner().invoke(main, ["import", str(dump), "--out", str(out), *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    found = {}
    for d in out.iterdir():
        env = json.loads((d / "incident.wtin.json").read_text())
        source, prov = env["source"], env["provenance"]
        found[prov["trace_ids"][0]] = (bool(source.get("flag")), source.get("flag"), source.get("ref") if
                                        source.get("flag") else None)
    return found


def served(dump: Path, data_dir: Path, config_path: Path | None) -> dict[str, tuple]:
    config = load_serve_config(config_path, {"data_dir": str(data_dir), "receivers.grpc_endpoint": "127.0.0.1:0",
                                             "receivers.http_endpoint": "127.0.0.1:0"})
    server = Server(config, quiet=True).start()
    try:
        for line in dump.read_text().splitlines():
            req = urllib.request.Request(server.http_url + "/v1/traces", data=line.encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200
    finally:
        server.stop()  # writes every open session
    latest = read_index(data_dir).latest()
    return {e["trace_ids"][0]: (e["flagged"], e["flag_reason"], e["flag_ref"]) for e in latest.values()}


@pytest.mark.parametrize("with_config", [False, True], ids=["default-rules", "config-rules"])
def test_import_and_serve_flag_the_same_sessions_the_same_way(tmp_path: Path, with_config: bool):
    dump = write_dump(tmp_path / "dump.otlp.jsonl")
    config = None
    if with_config:
        config = tmp_path / "serve.yaml"
        config.write_text(CONFIG)
    by_import = imported(dump, tmp_path / "out", *(["--config", str(config)] if config else []))
    by_serve = served(dump, tmp_path / "data", config)
    assert len(by_import) == 6
    assert by_import == by_serve
    flagged = sorted(ref for flag, _, ref in by_import.values() if flag)
    assert "INC-7" in flagged and "INC-8" in flagged
    reasons = [reason for flag, reason, _ in by_import.values() if flag]
    assert any(r.startswith("negative-feedback: gen_ai.feedback.rating=-1") for r in reasons)
    assert any("thumbs_down" in r for r in reasons), "an attribute on a span event counts, in both"
    assert sum(r.startswith("vip:") for r in reasons) == (1 if with_config else 0)
    assert len(flagged) == (5 if with_config else 4)


def test_import_rejects_a_config_with_a_bad_flag_rule(tmp_path: Path):
    dump = write_dump(tmp_path / "dump.otlp.jsonl")
    bad = tmp_path / "bad.yaml"
    bad.write_text("flagger:\n  rules:\n    - {name: x, kind: attribute}\n")
    r = CliRunner().invoke(main, ["import", str(dump), "--out", str(tmp_path / "out"), "--config", str(bad)])
    assert r.exit_code == 2 and "an attribute rule needs `keys`" in r.output
