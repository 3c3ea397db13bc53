"""`wt-otel surface`: golden fetch/store, diff live or recorded surfaces (exit 1 on drift and on invalid),
and drift derived from serve's data dir (0002, surface introspection)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.support.inject_endpoint import Endpoint
from wt_otel.cli import main
from wt_otel.contracts.surface import load_golden
from wt_otel.model.session import Session

SURFACE: dict[str, Any] = {
    "system_instructions": [{"type": "text", "content": "You are the ops assistant.\nAnswer from tools only."}],
    "tool_definitions": [
        {"name": "client_lookup", "description": "Look up a client.",
         "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
        {"name": "order_status", "description": "Status of an order.", "input_schema": {"type": "object"}},
    ],
    "extra_segments": [{"name": "narration:tool_started", "content": "Checking {tool_name}…"}],
}


def body(surface: dict[str, Any], model: str = "gpt-4o-mini") -> dict[str, Any]:
    return {"wt_inject": 1, "surface": surface, "model": model}


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, ["surface", *args])


def fetched(tmp_path: Path, ep: Endpoint) -> Path:
    out = tmp_path / "golden.surface.json"
    result = cli("fetch", "--url", ep.url, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_fetch_stores_a_validated_golden_and_an_unchanged_surface_is_same(tmp_path: Path) -> None:
    with Endpoint(surface=body(SURFACE)) as ep:
        golden = fetched(tmp_path, ep)
        result = cli("diff", str(golden), "--url", ep.url)
    stored = load_golden(json.loads(golden.read_text()))
    assert stored.model == "gpt-4o-mini" and stored.source == ep.url
    assert [t.name for t in stored.surface.tool_definitions] == ["client_lookup", "order_status"]
    assert result.exit_code == 0 and result.output.startswith("SAME ")


def test_drift_is_a_readable_diff_and_json_and_exit_1(tmp_path: Path) -> None:
    changed = copy.deepcopy(SURFACE)
    changed["system_instructions"][0]["content"] = "You are the ops assistant.\nAnswer from memory if you must."
    changed["tool_definitions"][0]["description"] = "Look up a client record by free text."
    changed["tool_definitions"][0]["input_schema"]["properties"]["query"]["type"] = "integer"
    changed["tool_definitions"][1:] = [{"name": "refund", "description": "Refund an order."}]
    with Endpoint(surface=body(SURFACE)) as ep:
        golden = fetched(tmp_path, ep)
        ep.surface = body(changed, model="gpt-4.1")
        text = cli("diff", str(golden), "--url", ep.url, "--out", str(tmp_path / "diff.json"))
        as_json = cli("diff", str(golden), "--url", ep.url, "--format", "json")
    assert text.exit_code == 1 and as_json.exit_code == 1
    out = text.output
    assert out.startswith("DRIFT ")
    assert "~ model changed: gpt-4o-mini -> gpt-4.1" in out
    assert "-Answer from tools only." in out and "+Answer from memory if you must." in out
    assert "- tool removed order_status" in out and "+ tool added refund: Refund an order." in out
    assert "~ tool changed client_lookup: description: Look up a client. -> Look up a client record" in out
    assert 'input_schema.properties.query.type: string -> integer' in out
    doc = json.loads(as_json.output)
    assert doc["status"] == "drift" and not doc["ok"]
    assert {c["kind"] for c in doc["changes"]} >= {"model_changed", "instructions_changed", "tool_added",
                                                   "tool_removed", "tool_changed"}
    assert json.loads((tmp_path / "diff.json").read_text()) == doc


def test_an_invalid_surface_is_a_hard_failure_and_never_stored(tmp_path: Path) -> None:
    broken = {k: v for k, v in SURFACE.items() if k != "extra_segments"}
    with Endpoint(surface=body(SURFACE)) as ep:
        golden = fetched(tmp_path, ep)
        ep.surface = body(broken)
        result = cli("diff", str(golden), "--url", ep.url)
        refused = cli("fetch", "--url", ep.url, "--out", str(tmp_path / "bad.surface.json"))
    assert result.exit_code == 1 and result.output.startswith("INVALID ")
    assert "extra_segments" in result.output and "hard failure" in result.output
    assert refused.exit_code == 1 and not (tmp_path / "bad.surface.json").exists()


def test_an_endpoint_without_the_route_cannot_be_gated(tmp_path: Path) -> None:
    with Endpoint(surface=body(SURFACE)) as ep:
        golden = fetched(tmp_path, ep)
    with Endpoint() as bare:
        result = cli("diff", str(golden), "--url", bare.url)
    assert result.exit_code == 1 and result.output.startswith("UNAVAILABLE ")


def test_diff_a_recorded_run_trace(tmp_path: Path) -> None:
    with Endpoint(surface=body(SURFACE)) as ep:
        golden = fetched(tmp_path, ep)
    changed = copy.deepcopy(SURFACE)
    changed["extra_segments"] = []
    trace = {"wt_trace": 1, "scenario_id": "s", "run_index": 1, "run_id": "w/s/run-1",
             "started_at": "2026-01-01T00:00:00Z", "runtime": "http_inject",
             "surface": {"status": "reported", "surface": changed}, "turns": [],
             "evidence": {"witness": "available", "llm": "replay"}, "integrity": {"status": "PASS"}}
    path = tmp_path / "run-1.trace.json"
    path.write_text(json.dumps(trace))
    result = cli("diff", str(golden), "--trace", str(path))
    assert result.exit_code == 1 and "- segment removed narration:tool_started" in result.output


def test_a_broken_golden_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "g.surface.json"
    bad.write_text(json.dumps({"wt_surface": 1, "source": "x"}))
    result = cli("diff", str(bad), "--url", "http://127.0.0.1:9")
    assert result.exit_code == 2 and "surface is required" in result.output


# ---------------------------------------------------------------- drift in production, from telemetry


def session(key: str, service: str, started_s: int, instructions: str, tools: list[dict[str, Any]]) -> Session:
    return Session(key=key, trace_ids=[key], service_name=service, started_ns=started_s * 10**9,
                   ended_ns=(started_s + 1) * 10**9, model="gpt-4o-mini",
                   system_instructions=[{"type": "text", "content": instructions}], tool_definitions=tools,
                   messages=[{"role": "user", "parts": [{"type": "text", "content": "hi"}]},
                             {"role": "assistant", "parts": [{"type": "text", "content": "hello"}]}])


def test_drift_from_the_data_dir_per_service(tmp_path: Path) -> None:
    from wt_otel.exporters.datadir import DataDirStore

    lookup = SURFACE["tool_definitions"][0]
    renamed = {**lookup, "description": "Find a client."}
    with DataDirStore(tmp_path / "data") as store:
        store.write(session("a" * 32, "support", 100, "Be brief.", [lookup]))
        store.write(session("b" * 32, "support", 200, "Be brief.", [lookup]))
        store.write(session("c" * 32, "support", 300, "Be brief.", [renamed]))
        store.write(session("d" * 32, "billing", 150, "Bill.", [lookup]))
        store.write(session("e" * 32, "billing", 250, "Bill.", [{"name": "client_lookup"}]))  # schema not recorded
    result = CliRunner().invoke(main, ["surface", "drift", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 1, result.output
    assert "STABLE billing: 2 session(s), 1 surface version(s)" in result.output  # a missing schema is no drift
    assert "DRIFT support: 3 session(s), 2 surface version(s)" in result.output
    assert "~ tool changed client_lookup: description: Look up a client. -> Find a client." in result.output
    only = CliRunner().invoke(main, ["surface", "drift", "--data-dir", str(tmp_path / "data"), "--service",
                                     "billing", "--format", "json"])
    assert only.exit_code == 0
    assert [r["service"] for r in json.loads(only.output)] == ["billing"]


def test_drift_without_a_data_dir_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["surface", "drift", "--data-dir", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "sessions.ndjsonl" in result.output


def test_validate_and_schema_know_golden_surfaces(tmp_path: Path) -> None:
    with Endpoint(surface=body(SURFACE)) as ep:
        golden = fetched(tmp_path, ep)
    assert CliRunner().invoke(main, ["validate", str(golden)]).exit_code == 0
    broken = tmp_path / "broken.surface.json"
    broken.write_text(json.dumps({"wt_surface": 1, "source": "x", "surface": {"tool_definitions": []}}))
    result = CliRunner().invoke(main, ["validate", str(broken)])
    assert result.exit_code == 1 and "surface.system_instructions" in result.output
    schema = CliRunner().invoke(main, ["schema", "surface"])
    assert schema.exit_code == 0 and '"wt_surface"' in schema.output
