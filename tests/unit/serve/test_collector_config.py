"""The shipped collector configs, checked as files (no Go collector can be installed here).

Each config must parse, name only components that exist in the OpenTelemetry Collector contrib
distribution, wire every pipeline to defined components, and point at wt-otel's default ports.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT
from wt_otel.ingest.dialects.common import conversation_id
from wt_otel.ingest.keys import CONVERSATION_KEYS
from wt_otel.serve.receivers.config import ReceiversConfig

CONFIG_DIR = ROOT / "collector-config"
OTELCOL_CONFIGS = sorted(CONFIG_DIR.glob("otelcol*.yaml"))

# Component type names -> the module that provides them, from the contrib distribution's manifest:
# open-telemetry/opentelemetry-collector-releases, distributions/otelcol-contrib/manifest.yaml at
# commit 008cde8ca78cc0286ee3f0de92fa95e1641a445a (components v0.136.0). A subset: what these configs
# use and what a user is likely to add next to them. Type names are the components' own (e.g.
# `filterprocessor` registers `filter`), so extend this from the component READMEs, not by guessing.
CONTRIB_COMPONENTS = {
    "receivers": {
        "otlp": "receiver/otlpreceiver",
        "nop": "receiver/nopreceiver",
        "filelog": "receiver/filelogreceiver",
        "otlpjsonfile": "receiver/otlpjsonfilereceiver",
        "kafka": "receiver/kafkareceiver",
        "zipkin": "receiver/zipkinreceiver",
        "jaeger": "receiver/jaegerreceiver",
    },
    "processors": {
        "batch": "processor/batchprocessor",
        "memory_limiter": "processor/memorylimiterprocessor",
        "filter": "processor/filterprocessor",
        "transform": "processor/transformprocessor",
        "attributes": "processor/attributesprocessor",
        "resource": "processor/resourceprocessor",
        "redaction": "processor/redactionprocessor",
        "tail_sampling": "processor/tailsamplingprocessor",
        "groupbytrace": "processor/groupbytraceprocessor",
        "probabilistic_sampler": "processor/probabilisticsamplerprocessor",
        "k8sattributes": "processor/k8sattributesprocessor",
        "resourcedetection": "processor/resourcedetectionprocessor",
        "span": "processor/spanprocessor",
    },
    "exporters": {
        "otlp": "exporter/otlpexporter",
        "otlphttp": "exporter/otlphttpexporter",
        "debug": "exporter/debugexporter",
        "nop": "exporter/nopexporter",
        "file": "exporter/fileexporter",
        "loadbalancing": "exporter/loadbalancingexporter",
        "kafka": "exporter/kafkaexporter",
    },
    "extensions": {
        "health_check": "extension/healthcheckextension",
        "pprof": "extension/pprofextension",
        "zpages": "extension/zpagesextension",
        "file_storage": "extension/storage/filestorage",
        "bearertokenauth": "extension/bearertokenauthextension",
        "basicauth": "extension/basicauthextension",
        "headers_setter": "extension/headerssetterextension",
        "oauth2client": "extension/oauth2clientauthextension",
    },
    "connectors": {
        "forward": "connector/forwardconnector",
        "routing": "connector/routingconnector",
        "count": "connector/countconnector",
    },
}
SECTIONS = tuple(CONTRIB_COMPONENTS)
WT_OTEL_GRPC_PORT = int((ReceiversConfig().grpc_endpoint or "").rsplit(":", 1)[1])  # serve's default


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def component_type(name: str) -> str:
    """`otlp/wt-otel` -> `otlp`: the part before the slash is the type, the rest an instance name."""
    return name.split("/", 1)[0]


def test_the_expected_configs_exist():
    assert {p.name for p in OTELCOL_CONFIGS} >= {"otelcol.yaml", "otelcol-loadbalancing.yaml"}


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.y*ml")), ids=lambda p: p.name)
def test_every_yaml_parses(path):
    assert isinstance(load(path), dict)


@pytest.mark.parametrize("path", OTELCOL_CONFIGS, ids=lambda p: p.name)
def test_every_component_exists_in_contrib(path):
    config = load(path)
    for section in SECTIONS:
        for name in config.get(section) or {}:
            assert component_type(name) in CONTRIB_COMPONENTS[section], f"{path.name}: {section}.{name}"
    for name in config["service"].get("extensions", []):
        assert component_type(name) in CONTRIB_COMPONENTS["extensions"], f"{path.name}: service.extensions"


@pytest.mark.parametrize("path", OTELCOL_CONFIGS, ids=lambda p: p.name)
def test_pipelines_reference_defined_components_only(path):
    config = load(path)
    connectors = set(config.get("connectors") or {})
    assert set(config["service"].get("extensions", [])) <= set(config.get("extensions") or {})
    pipelines = config["service"]["pipelines"]
    assert {"traces", "logs"} <= {component_type(p) for p in pipelines}, "wt-otel needs traces AND logs"
    for pname, pipeline in pipelines.items():
        assert pipeline.get("receivers") and pipeline.get("exporters"), pname
        assert set(pipeline["receivers"]) <= set(config["receivers"]) | connectors, pname
        assert set(pipeline.get("processors", [])) <= set(config.get("processors") or {}), pname
        assert set(pipeline["exporters"]) <= set(config["exporters"]) | connectors, pname


def test_otelcol_exports_traces_and_logs_to_wt_otel():
    config = load(CONFIG_DIR / "otelcol.yaml")
    exporter = config["exporters"]["otlp/wt-otel"]
    assert exporter["endpoint"] == f"127.0.0.1:{WT_OTEL_GRPC_PORT}"
    assert exporter["tls"]["insecure"] is True
    for signal in ("traces", "logs"):
        pipeline = config["service"]["pipelines"][signal]
        assert pipeline["exporters"] == ["otlp/wt-otel"] and "batch" in pipeline["processors"]


def test_otelcol_shows_how_to_keep_only_genai_traffic():
    text = (CONFIG_DIR / "otelcol.yaml").read_text()
    for needle in ("filter/genai:", 'IsMatch(name, "^(chat|execute_tool|invoke_agent)")',
                   'attributes["gen_ai.operation.name"]', "root span"):
        assert needle in text


LB_CONFIG = CONFIG_DIR / "otelcol-loadbalancing.yaml"
ROUTE_ATTR = "wt.routing_key"
_SET = re.compile(r'set\(attributes\["wt\.routing_key"\], Concat\(\["(conv|trace)", (.+?)\], ":"\)\)(?: where (.*))?$')
_CONV_SOURCE = re.compile(r'attributes\["([^"]+)"\]$')
_ZERO_TRACE_ID = "TraceID(0x" + "0" * 32 + ")"


def route_statements(config: dict, signal: str) -> list[str]:
    """The `transform/routing_key` statements for one signal (`trace` or `log`), in the order they run."""
    groups = config["processors"]["transform/routing_key"][f"{signal}_statements"]
    assert {g["context"] for g in groups} == {"span" if signal == "trace" else "log"}
    return [s for g in groups for s in g["statements"]]


def route_key(statements: list[str], attrs: dict, trace_id: str) -> str | None:
    """What `wt.routing_key` the statements leave on a record: an evaluator of exactly the OTTL shapes the
    config uses (delete_key, then guarded `set ... Concat`), so a statement of any other shape fails here."""
    attrs = dict(attrs)
    for stmt in statements:
        if stmt == f'delete_key(attributes, "{ROUTE_ATTR}")':
            attrs.pop(ROUTE_ATTR, None)
            continue
        m = _SET.match(stmt)
        assert m, f"statement of an unexpected shape: {stmt}"
        prefix, source, where = m.groups()
        conditions = (where or "").split(" and ") if where else []
        assert conditions and conditions[0] == f'attributes["{ROUTE_ATTR}"] == nil', stmt  # first one wins
        if prefix == "conv":
            key = _CONV_SOURCE.match(source)
            assert key, stmt
            k = key.group(1)
            assert conditions[1:] == [f'attributes["{k}"] != nil', f'attributes["{k}"] != ""'], stmt
            value = attrs.get(k)
            if ROUTE_ATTR not in attrs and value is not None and value != "":
                attrs[ROUTE_ATTR] = f"conv:{value}"
        else:
            assert source == "trace_id.string", stmt
            assert conditions[1:] in ([], [f"trace_id != {_ZERO_TRACE_ID}"]), stmt
            if ROUTE_ATTR not in attrs and (trace_id.strip("0") or not conditions[1:]):
                attrs[ROUTE_ATTR] = f"trace:{trace_id}"
    return attrs.get(ROUTE_ATTR)


def test_loadbalancing_routes_on_one_key_to_wt_otel_instances():
    """`routing_attributes` is a composite key (every listed attribute, missing ones hashed as empty), so
    the config routes on one attribute that it writes itself, for traces and logs alike."""
    config = load(LB_CONFIG)
    lb = config["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "attributes"
    assert lb["routing_attributes"] == [ROUTE_ATTR]
    assert lb["protocol"]["otlp"]["tls"]["insecure"] is True
    hosts = lb["resolver"]["static"]["hostnames"]
    assert len(hosts) >= 2 and all(h.rsplit(":", 1)[1] == str(WT_OTEL_GRPC_PORT) for h in hosts)
    for signal in ("traces", "logs"):
        pipeline = config["service"]["pipelines"][signal]
        assert pipeline["exporters"] == ["loadbalancing"]
        assert "transform/routing_key" in pipeline["processors"]
        assert config["processors"]["transform/routing_key"]["error_mode"] == "ignore"
    assert "sessions.ndjsonl" in LB_CONFIG.read_text()


@pytest.mark.parametrize("signal", ["trace", "log"])
def test_routing_key_is_the_conversation_id_wt_otel_reads_else_the_trace_id(signal):
    statements = route_statements(load(LB_CONFIG), signal)
    sets = [m.groups() for s in statements if (m := _SET.match(s))]
    conv_sources = [source for prefix, source, _ in sets if prefix == "conv"]
    assert conv_sources == [f'attributes["{k}"]' for k in CONVERSATION_KEYS], "every conversation key, in precedence"
    assert sets[-1][:2] == ("trace", "trace_id.string"), "the trace id last, as the fall-back"
    tid = "0af7651916cd43dd8448eb211c80319c"
    cases: list[dict[str, object]] = [
        {},
        {"gen_ai.conversation.id": "c-1"},
        {"session.id": "c-1"},
        {"session.id": "c-1", "gen_ai.conversation.id": "c-2"},  # precedence, as wt-otel reads it
        {"gen_ai.conversation.id": "", "thread.id": "t-9"},  # an empty value is no id
        {"openai_agents.group_id": 42},
        {ROUTE_ATTR: "spoofed"},  # a producer's own value never steers
        {ROUTE_ATTR: "spoofed", "langfuse.session.id": "l-3", "http.route": "/chat"},
    ]
    cases.extend({k: f"id-{i}"} for i, k in enumerate(CONVERSATION_KEYS))
    for attrs in cases:
        conv = conversation_id({k: v for k, v in attrs.items() if k != ROUTE_ATTR})
        expected = f"conv:{conv}" if conv else f"trace:{tid}"
        assert route_key(statements, attrs, tid) == expected, attrs
    # records of one conversation route alike whichever key carries the id; traces without one by trace id
    assert route_key(statements, {"session.id": "s"}, tid) == route_key(statements, {"thread.id": "s"}, "f" * 32)
    assert route_key(statements, {}, tid) != route_key(statements, {}, "f" * 32)


def test_log_records_without_a_trace_id_get_no_trace_key():
    """wt-otel drops log records without a trace id; the all-zero id must not become one shared key."""
    statements = route_statements(load(LB_CONFIG), "log")
    assert route_key(statements, {}, "0" * 32) is None
    assert route_key(statements, {"session.id": "s"}, "0" * 32) == "conv:s"
