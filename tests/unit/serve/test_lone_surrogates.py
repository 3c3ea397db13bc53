"""Issue 31 item 2: a lone surrogate in an OTLP/JSON `stringValue` (a JS SDK cutting an emoji in half) used to
give HTTP 500 and lose the whole batch (re-encoding for the segment log raised `UnicodeEncodeError`). Now the
text is kept escaped with a warning on its session, every other session of the request is written, and a record
that fails for an unforeseen reason is set aside alone. Real server, real HTTP; `import` through the CLI."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

from click.testing import CliRunner

from tests.support.hostile import genai_session, tid, to_otlp_json
from wt_otel.cli import main
from wt_otel.exporters.datadir import read_index
from wt_otel.ingest import otlp_encode
from wt_otel.serve.config import AssemblerConfig, DataDirConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.receivers.common import Signal, _set_aside
from wt_otel.serve.server import Server

CUT = "\\ud83d"  # as JSON text: the escape of a high surrogate with no low one after it


def _server(tmp_path: Path, receiver_processes: int | str = "auto") -> Server:
    config = ServeConfig(data_dir=tmp_path / "data",
                         receivers=ReceiversConfig(grpc_endpoint="127.0.0.1:0", http_endpoint="127.0.0.1:0"),
                         assembler=AssemblerConfig(idle_timeout=0.3, grace=0.05), datadir=DataDirConfig(render="all"),
                         processes={"receivers": receiver_processes})
    return Server(config, quiet=True).start()


def _post_json(server: Server, body: bytes, path: str) -> tuple[int, dict]:
    req = urllib.request.Request(server.http_url + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _mixed_traces() -> bytes:
    """Sessions 1 and 3 valid; session 2's reply and one attribute value hold a lone surrogate."""
    docs = [to_otlp_json(genai_session(tid(1))), to_otlp_json(genai_session(tid(2), reply="CUTHERE")),
            to_otlp_json(genai_session(tid(3)))]
    docs[1]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"].append(
        {"key": "app.note", "value": {"stringValue": "CUTHERE"}})
    text = json.dumps({"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]})
    return text.replace("CUTHERE", f"3 degrees {CUT}").encode()


def _logs_with_surrogate(trace: str, span_id: str) -> bytes:
    records = [{"timeUnixNano": "1500", "traceId": trace, "spanId": span_id, "eventName": "gen_ai.user.message",
                "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "CUTHERE"}}]}}},
               {"timeUnixNano": "1600", "traceId": trace, "spanId": span_id, "eventName": "app.note",
                "body": {"stringValue": "plain"}}]
    doc = {"resourceLogs": [{"resource": {"attributes": []}, "scopeLogs": [{"scope": {"name": "t"},
                                                                           "logRecords": records}]}]}
    return json.dumps(doc).replace("CUTHERE", f"hi {CUT}").encode()


def _wait(predicate, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _keys(server: Server) -> set[str]:
    return {e["key"] for e in read_index(server.config.data_dir).entries}


def test_a_lone_surrogate_over_http_json_costs_nothing(tmp_path):
    server = _server(tmp_path)
    try:
        status, _ = _post_json(server, _mixed_traces(), "/v1/traces")
        assert status == 200
        span_id = genai_session(tid(3))[0].span_id
        status, _ = _post_json(server, _logs_with_surrogate(tid(3), span_id), "/v1/logs")
        assert status == 200
        _wait(lambda: {tid(1), tid(2), tid(3)} <= _keys(server))
        assert server.metrics.get("wt_otel_log_records_received_total") == 2
        assert server.metrics.get("wt_otel_records_rejected_total", reason="quarantined") == 0
    finally:
        server.stop()
    data_dir = server.config.data_dir
    folder = {key: data_dir / entry["path"] for key, entry in read_index(data_dir).latest().items()}
    env = json.loads((folder[tid(2)] / "incident.wtin.json").read_text())
    escaped = " ".join(w for w in env["warnings"] if "not valid Unicode" in w)
    assert "attributes.app.note" in escaped and "attributes.gen_ai.output.messages" in escaped, env["warnings"]
    assert env["messages"][-1]["parts"][0]["content"].startswith("3 degrees")
    assert not any("not valid Unicode" in w for w in
                   json.loads((folder[tid(1)] / "incident.wtin.json").read_text())["warnings"])


def test_one_record_that_cannot_be_encoded_is_set_aside_not_the_request(tmp_path, monkeypatch):
    """Any unforeseen failure on one record (here the encoder refuses one span) quarantines that record."""
    real = otlp_encode.any_value

    def refuses_one(value):
        if value == "poison":
            raise RuntimeError("an encoder bug")
        return real(value)

    monkeypatch.setattr(otlp_encode, "any_value", refuses_one)
    doc = {"resourceSpans": to_otlp_json(genai_session(tid(1)))["resourceSpans"]
           + to_otlp_json(genai_session(tid(2)))["resourceSpans"]}
    doc["resourceSpans"][1]["scopeSpans"][0]["spans"][1]["attributes"].append(
        {"key": "app.note", "value": {"stringValue": "poison"}})
    server = _server(tmp_path, receiver_processes=0)  # the seam is in this process
    try:
        status, reply = _post_json(server, json.dumps(doc).encode(), "/v1/traces")
        assert status == 200
        assert reply["partialSuccess"]["rejectedSpans"] == "1", reply
        assert "set aside" in reply["partialSuccess"]["errorMessage"]
        _wait(lambda: {tid(1), tid(2)} <= _keys(server))
        assert server.metrics.get("wt_otel_records_rejected_total", reason="quarantined") == 1
    finally:
        server.stop()
    [aside] = (server.config.data_dir / "quarantine").iterdir()
    assert "an encoder bug" in (aside / "reason.txt").read_text()
    assert "poison" in (aside / "records.ndjson").read_text()


def test_records_set_aside_where_the_quarantine_cannot_be_written_are_still_counted_and_said(tmp_path, caplog):
    """Setting aside is the last resort: a quarantine that cannot be written costs the copy, never an exception."""
    (tmp_path / "quarantine").write_text("a file where the folder goes")
    pipeline = SimpleNamespace(segments=SimpleNamespace(dir=tmp_path / "segments"))
    metrics = Metrics()
    with caplog.at_level(logging.ERROR, logger="wt_otel.serve.receivers"):
        _set_aside(Signal.TRACES, [({"name": "poison"}, "span 01", "an encoder bug")], pipeline, metrics)
    assert metrics.get("wt_otel_records_rejected_total", reason="quarantined") == 1
    assert "1 traces record(s) set aside (cannot write" in caplog.text and "span 01: an encoder bug" in caplog.text


def test_import_writes_every_session_of_a_line_with_a_lone_surrogate(tmp_path):
    dump = tmp_path / "mixed.otlp.jsonl"
    dump.write_bytes(_mixed_traces() + b"\n")
    result = CliRunner().invoke(main, ["import", str(dump), "--out", str(tmp_path / "out"), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    # named after the first user turn and the trace id's tail (issue 30: readable names)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"weather-in-oslo-{tid(n)[-8:]}" for n in (1, 2, 3)]
    env = json.loads((tmp_path / "out" / f"weather-in-oslo-{tid(2)[-8:]}" / "incident.wtin.json").read_text())
    assert any("not valid Unicode" in w and "attributes.app.note" in w for w in env["warnings"]), env["warnings"]
