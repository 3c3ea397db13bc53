"""The format registry: every versioned file and wire format has one entry, a schema, and a loader."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.contracts.formats import FORMATS, VALIDATED, by_name, from_file_name, from_version_key, json_schema
from wt_otel.contracts.problems import ContractError
from wt_otel.contracts.validate import KINDS

EXAMPLES: dict[str, dict[str, Any]] = {
    "score": {"wt_score": 1, "scenario_id": "orders", "run_index": 1, "run_id": "sw/orders/run-1",
              "layers": {"outcome": {"passed": True, "detail": "ok"}}, "gate": ["outcome"], "passed": True},
    "results": {"wt_results": 1, "sweep_id": "sw", "started_at": "2026-01-01T00:00:00.000Z",
                "scenarios": [{"scenario_id": "orders", "verdict": "PASS", "runs": 1, "runs_passed": 1}]},
    "ledger-row": {"wt_ledger": 1, "ts": "2026-01-01T00:00:00.000Z", "sweep_id": "sw", "scenario_id": "orders",
                   "verdict": "ERROR", "detail": "reset failed"},
    "inject-response": {"wt_inject": 1, "reply": "shipped", "tool_calls": [{"name": "lookup", "arguments": {}}]},
    "surface-response": {"wt_inject": 1, "surface": {"system_instructions": [], "tool_definitions": [],
                                                      "extra_segments": []}},
    "surface": {"wt_surface": 1, "source": "http://127.0.0.1:8647", "model": "gpt-4o-mini",
                "surface": {"system_instructions": [{"type": "text", "content": "Be brief."}],
                            "tool_definitions": [{"name": "lookup"}], "extra_segments": []}},
}


def test_every_contract_module_format_is_registered() -> None:
    assert set(VALIDATED) == {"envelope", "universe", "cassette", "scenario", "trace", "surface"} == set(KINDS)
    assert set(EXAMPLES) <= set(FORMATS)
    assert all(FORMATS[name].title.startswith("wt-otel ") for name in FORMATS)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_registered_format_has_a_schema_that_accepts_its_example(name: str) -> None:
    fmt = by_name(name)
    assert fmt.load(EXAMPLES[name]).model_dump(mode="json", exclude_unset=True) == EXAMPLES[name]
    schema = json_schema(name)
    assert schema["$schema"].startswith("https://json-schema.org/") and schema["title"] == fmt.title
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema not installed: schema not checked")
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(EXAMPLES[name], schema)


@pytest.mark.parametrize("name, change, message", [
    ("ledger-row", lambda d: d.pop("verdict"), "verdict"),
    ("results", lambda d: d["scenarios"][0].update(verdict="GREEN"), "scenarios[0].verdict"),
    ("inject-response", lambda d: d.update(tool_calls=[{"name": "x", "arguments": "{}"}]),
     "tool_calls[0].arguments must be an object"),
])
def test_registered_loader_names_the_broken_field(name: str, change: Any, message: str) -> None:
    data = json.loads(json.dumps(EXAMPLES[name]))
    change(data)
    with pytest.raises(ContractError) as caught:
        by_name(name).load(data)
    assert any(message in str(p) for p in caught.value.problems), caught.value.problems


def test_unknown_format_name_says_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: envelope, universe"):
        by_name("nope")


def test_detection_by_version_key_and_name_uses_the_registry() -> None:
    assert from_version_key({"wt_trace": 1}).name == "trace"
    assert from_version_key({"wt_results": 1}) is None  # not a `validate` kind
    assert from_version_key({"wt_results": 1}, among=tuple(FORMATS)).name == "results"
    assert from_file_name("scenario.yaml").name == "scenario"
    assert from_file_name("incident.wtin.json").name == "envelope"
    assert from_file_name("run-1.score.json") is None
    assert from_file_name("run-1.score.json", among=tuple(FORMATS)).name == "score"


@pytest.mark.parametrize("name", list(FORMATS))
def test_cli_schema_offers_every_registered_format(name: str) -> None:
    result = CliRunner().invoke(main, ["schema", name])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["title"] == FORMATS[name].title


def test_renamed_classes_keep_their_schema_names() -> None:
    """Python names were made unique (EnvelopeSession, CassetteCall, RunLLMCall, ...); the schemas did not move."""
    assert {"Session"} <= set(json_schema("envelope")["$defs"])
    assert {"LLMCall", "ToolCall"} <= set(json_schema("cassette")["$defs"])
    assert {"LlmCall", "ToolCall"} <= set(json_schema("trace")["$defs"])
    assert {"Assertion"} <= set(json_schema("scenario")["$defs"])
    for name in FORMATS:
        defs = json_schema(name).get("$defs", {})
        refs = {ref.split("/")[-1] for ref in _refs(json_schema(name))}
        assert refs <= set(defs), f"{name}: dangling $ref {refs - set(defs)}"


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return ([node["$ref"]] if isinstance(node.get("$ref"), str) else []) + [r for v in node.values()
                                                                                for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []
