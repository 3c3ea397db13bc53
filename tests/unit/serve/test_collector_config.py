"""The shipped collector configs, checked as files (no Go collector can be installed here).

Each config must parse, name only components that exist in the OpenTelemetry Collector contrib
distribution, wire every pipeline to defined components, and point at wt-otel's default ports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT
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
WT_OTEL_GRPC_PORT = int(ReceiversConfig().grpc_endpoint.rsplit(":", 1)[1])  # serve's default


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


def test_loadbalancing_routes_by_trace_id_to_wt_otel_instances():
    config = load(CONFIG_DIR / "otelcol-loadbalancing.yaml")
    lb = config["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"
    assert lb["protocol"]["otlp"]["tls"]["insecure"] is True
    hosts = lb["resolver"]["static"]["hostnames"]
    assert len(hosts) >= 2 and all(h.rsplit(":", 1)[1] == str(WT_OTEL_GRPC_PORT) for h in hosts)
    for signal in ("traces", "logs"):
        assert config["service"]["pipelines"][signal]["exporters"] == ["loadbalancing"]
    assert "sessions.ndjsonl" in (CONFIG_DIR / "otelcol-loadbalancing.yaml").read_text()
