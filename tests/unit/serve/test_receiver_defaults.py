"""serve's receivers (issue 12): defaults that do not collide with a collector, and `none` to turn one off."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wt_otel.serve.config import ConfigError, load_serve_config
from wt_otel.serve.receivers.config import ReceiversConfig, split_endpoint

COLLECTOR_PORTS = {4317, 4318}  # OTLP's standard ports: the Collector, Phoenix (gRPC), Jaeger, Tempo, rotel
REPO = Path(__file__).resolve().parents[3]


def test_default_ports_leave_otlps_standard_ports_to_the_collector() -> None:
    config = ReceiversConfig()
    assert config.grpc_endpoint and config.http_endpoint
    ports = {split_endpoint(config.grpc_endpoint)[1], split_endpoint(config.http_endpoint)[1]}
    assert ports == {14317, 14318} and not ports & COLLECTOR_PORTS


def test_the_shipped_collector_configs_listen_on_4317_and_forward_to_serves_default() -> None:
    otelcol = yaml.safe_load((REPO / "collector-config" / "otelcol.yaml").read_text())
    assert otelcol["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")
    assert otelcol["exporters"]["otlp/wt-otel"]["endpoint"] == ReceiversConfig().grpc_endpoint
    rotel = dict(line.split("=", 1) for line in (REPO / "collector-config" / "rotel.env").read_text().splitlines()
                 if line and not line.startswith("#"))
    assert rotel["ROTEL_OTLP_GRPC_ENDPOINT"].endswith(":4317")
    assert rotel["ROTEL_OTLP_EXPORTER_ENDPOINT"] == f"http://{ReceiversConfig().grpc_endpoint}"


@pytest.mark.parametrize("word", ["none", "None", "off"])
def test_none_turns_a_receiver_off_from_the_command_line_or_the_file(word: str, tmp_path: Path) -> None:
    config = load_serve_config(None, {"receivers.grpc_endpoint": word})
    assert config.receivers.grpc_endpoint is None and config.receivers.http_endpoint == "127.0.0.1:14318"
    (tmp_path / "serve.yaml").write_text(f"receivers: {{http_endpoint: {word}}}\n")
    assert load_serve_config(tmp_path / "serve.yaml").receivers.http_endpoint is None
    (tmp_path / "null.yaml").write_text("receivers: {http_endpoint: null}\n")
    assert load_serve_config(tmp_path / "null.yaml").receivers.http_endpoint is None


def test_both_receivers_off_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="both receivers are off"):
        load_serve_config(None, {"receivers.grpc_endpoint": "none", "receivers.http_endpoint": "none"})


def test_a_bad_endpoint_says_none_is_the_way_to_turn_it_off() -> None:
    with pytest.raises(ConfigError, match="must be host:port .* or none to turn the receiver off"):
        load_serve_config(None, {"receivers.grpc_endpoint": "nowhere"})
