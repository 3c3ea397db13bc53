"""OTEL_EXPORTER_OTLP_* for result spans (wt_otel/_util/otlp_env.py): explicit settings first, then the env."""

from __future__ import annotations

import pytest

from wt_otel._util.otlp_env import parse_env_headers, resolve_otlp
from wt_otel.exporters.result_spans import ResultSpansExporter


def test_nothing_named_means_no_export() -> None:
    assert resolve_otlp(env={}) is None
    assert resolve_otlp(env={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}) is None  # no endpoint: nothing to refuse


def test_generic_endpoint_is_a_base_url_and_traces_endpoint_a_full_one() -> None:
    base = resolve_otlp(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://sink:4318"})
    assert base is not None and base.source == "OTEL_EXPORTER_OTLP_ENDPOINT"
    assert ResultSpansExporter.from_settings(base).target.url == "http://sink:4318/v1/traces"
    full = resolve_otlp(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318",
                             "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://sink:4318/custom/traces"})
    assert full is not None and full.source == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    assert ResultSpansExporter.from_settings(full).target.url == "http://sink:4318/custom/traces"


def test_each_setting_resolves_on_its_own_and_explicit_wins() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
           "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20T,x-team=a%3Db",
           "OTEL_EXPORTER_OTLP_TIMEOUT": "2500"}
    got = resolve_otlp(env=env)
    assert got is not None
    assert (got.endpoint, got.protocol, got.timeout_s) == ("http://env:4317", "grpc", 2.5)
    assert got.headers == {"authorization": "Bearer T", "x-team": "a=b"}
    flag = resolve_otlp("http://flag:4318", "http/protobuf", ["k=v"], env=env)
    assert flag is not None
    assert (flag.endpoint, flag.protocol, flag.headers, flag.signal_path) == (
        "http://flag:4318", "http/protobuf", {"k": "v"}, True)
    config = resolve_otlp(None, None, {"x": "1"}, env=env)  # config headers replace the env's
    assert config is not None and config.headers == {"x": "1"} and config.endpoint == "http://env:4317"


def test_none_turns_the_export_off_even_when_the_environment_names_one() -> None:
    assert resolve_otlp("none", env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://sink:4318"}) is None


@pytest.mark.parametrize(("env", "says"), [
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://s", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
     "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://s", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"},
     "OTEL_EXPORTER_OTLP_HEADERS: 'novalue'"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://s", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "soon"},
     "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT='soon'"),
])
def test_a_bad_environment_value_is_an_error_naming_the_variable(env: dict[str, str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        resolve_otlp(env=env)


def test_an_unusable_env_endpoint_is_reported_with_its_variable() -> None:
    settings = resolve_otlp(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "sink:4318"})
    assert settings is not None
    with pytest.raises(ValueError, match=r"^OTEL_EXPORTER_OTLP_ENDPOINT=sink:4318: .*needs a scheme"):
        ResultSpansExporter.from_settings(settings)


def test_parse_env_headers_skips_empty_items() -> None:
    assert parse_env_headers(" a=1 , ,b=") == {"a": "1", "b": ""}
