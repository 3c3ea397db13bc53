"""Where result spans go: flags and config first, then the OpenTelemetry SDK's own environment variables.

Every OTel component honours `OTEL_EXPORTER_OTLP_*`; a platform that sets
them once for all its services expects wt-otel to follow. Each setting is
resolved on its own, as the SDK resolves its constructor arguments: an
explicit value (flag, config key) wins, then the traces-specific variable,
then the generic one, then the default. `none` as an explicit endpoint turns
the export off even when the environment names one.

- `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is a full URL, used as it is;
  `OTEL_EXPORTER_OTLP_ENDPOINT` is a base URL (`/v1/traces` is appended for
  http/protobuf), as the specification says.
- `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`: `k1=v1,k2=v2`, values URL-decoded.
- `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: `grpc` or `http/protobuf`
  (`http/json` is refused by name: Phoenix, for one, does not accept it).
- `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`: milliseconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

__all__ = ["OtlpSettings", "parse_env_headers", "resolve_otlp"]

ENDPOINT, TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
HEADERS, TRACES_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
PROTOCOL, TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
TIMEOUT, TRACES_TIMEOUT = "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
SUPPORTED_PROTOCOLS = ("grpc", "http/protobuf")
OFF = ("none", "off", "")


@dataclass(frozen=True)
class OtlpSettings:
    """The resolved export target; `signal_path`: append `/v1/traces` to an http endpoint (a base URL)."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: dict[str, str] = field(default_factory=dict)
    signal_path: bool = True
    timeout_s: float | None = None
    source: str = "flag"  # which setting named the endpoint, for messages


def parse_env_headers(text: str, variable: str = HEADERS) -> dict[str, str]:
    """`k1=v1,k2=v2` (W3C baggage-like, values percent-encoded) to a dict with lower-case keys."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{variable}: {item.strip()!r} is not key=value (the format is k1=v1,k2=v2)")
        out[unquote(key.strip()).lower()] = unquote(value.strip())
    return out


def _first(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        value = env.get(name)
        if value is not None and value.strip():
            return name, value.strip()
    return None


def resolve_otlp(endpoint: str | None = None, protocol: str | None = None,
                 headers: Mapping[str, str] | Iterable[str] | None = None, *,
                 env: Mapping[str, str] | None = None, explicit_source: str = "flag") -> OtlpSettings | None:
    """The export target, or None when nothing names an endpoint (or the explicit one is `none`).

    `headers` given explicitly (a mapping, or `K=V` strings) replace the environment's; ValueError names
    the variable when an environment value is unusable.
    """
    env = os.environ if env is None else env
    if endpoint is not None and endpoint.strip().lower() in OFF:
        return None
    signal_path, source = True, explicit_source
    if endpoint is None:
        found = _first(env, TRACES_ENDPOINT, ENDPOINT)
        if found is None:
            return None
        source, endpoint = found
        signal_path = source == ENDPOINT
    if protocol is None:
        named = _first(env, TRACES_PROTOCOL, PROTOCOL)
        if named is not None:
            variable, protocol = named
            if protocol not in SUPPORTED_PROTOCOLS:
                raise ValueError(f"{variable}={protocol}: result spans are exported with grpc or http/protobuf "
                                 f"(set {variable}, or pass the protocol explicitly)")
    explicit = _explicit_headers(headers)
    if explicit is None:
        named = _first(env, TRACES_HEADERS, HEADERS)
        explicit = parse_env_headers(named[1], named[0]) if named else {}
    timeout_s = None
    named = _first(env, TRACES_TIMEOUT, TIMEOUT)
    if named is not None:
        try:
            timeout_s = float(named[1]) / 1000
        except ValueError:
            raise ValueError(f"{named[0]}={named[1]!r} is not a number of milliseconds") from None
        if timeout_s <= 0:
            raise ValueError(f"{named[0]}={named[1]!r} must be a positive number of milliseconds")
    return OtlpSettings(endpoint, protocol or "http/protobuf", explicit, signal_path, timeout_s, source)


def _explicit_headers(headers: Mapping[str, str] | Iterable[str] | None) -> dict[str, str] | None:
    if headers is None:
        return None
    if isinstance(headers, Mapping):
        return {str(k).strip().lower(): str(v) for k, v in headers.items()} if headers else None
    items = list(headers)
    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"OTLP header {item!r} must be KEY=VALUE (e.g. --otlp-header authorization='Bearer T')")
        out[key.strip().lower()] = value.strip()
    return out
