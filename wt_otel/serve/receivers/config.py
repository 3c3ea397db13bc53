"""`ReceiversConfig`: where the OTLP receivers listen and what they let in.

Defaults bind to loopback: a receiver reachable from the network must be asked
for explicitly (and then should get a token and TLS). Port 0 picks a free port
(tests); the bound ports are on `Receivers.grpc_port` / `.http_port`.

Default ports are 14317 (gRPC) and 14318 (HTTP), not OTLP's 4317/4318: those
belong to whatever already receives OTLP on the host (the Collector, Phoenix,
Jaeger, Tempo, rotel), and wt-otel sits behind it or beside it; the `1` prefix
keeps the OTLP numbers recognisable. `none` turns a receiver off.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MiB = 1024 * 1024


DEFAULT_GRPC_ENDPOINT = "127.0.0.1:14317"
DEFAULT_HTTP_ENDPOINT = "127.0.0.1:14318"
OFF = ("none", "off", "disabled")


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """ "host:port" or "[v6addr]:port" -> (host, port); raises ValueError naming the problem."""
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host:
        raise ValueError(f"endpoint {endpoint!r} must be host:port (e.g. {DEFAULT_GRPC_ENDPOINT}), "
                         "or none to turn the receiver off")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"endpoint {endpoint!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"endpoint {endpoint!r}: port {port} is out of range 0-65535")
    return host, port


class ReceiversConfig(BaseModel):
    """Receiver settings; `None` for an endpoint disables that transport."""

    model_config = ConfigDict(extra="forbid")

    grpc_endpoint: str | None = Field(DEFAULT_GRPC_ENDPOINT,
                                      description="OTLP/gRPC host:port; none (or null): no gRPC receiver")
    http_endpoint: str | None = Field(DEFAULT_HTTP_ENDPOINT,
                                      description="OTLP/HTTP host:port; none (or null): no HTTP receiver")
    # HTTP: the body as sent (compressed). gRPC: grpc's max receive message length, which grpc
    # checks after decompression, so a compressed gRPC message gets no more room than a plain one.
    max_message_bytes: int = Field(4 * MiB, gt=0, description="largest request body as sent")
    max_decompressed_bytes: int = Field(32 * MiB, gt=0,
                                        description="largest body after decompression (gzip, deflate, zlib, zstd)")
    # OTLP/HTTP against slow and many clients: a request (line, headers, body) must arrive within
    # http_read_timeout; connections beyond the limits close idle ones (the heaviest address's first), and get an
    # immediate 503 + Retry-After only when every connection is busy with a request.
    http_read_timeout: float = Field(20.0, gt=0, description="seconds for a request to arrive whole")
    http_backlog: int = Field(1024, gt=0, description="listen backlog (the kernel caps it at somaxconn)")
    http_first_request_timeout: float = Field(5.0, gt=0, description="seconds a new connection may stay silent "
                                              "before its first request begins (idle floods are closed this soon)")
    http_max_connections: int = Field(512, gt=0, description="open connections; past it a new one closes an idle "
                                      "connection of the address holding the most (none idle: /healthz only)")
    http_max_connections_per_client: int = Field(128, gt=0, description="open connections from one address; past "
                                                 "it a new one from there closes that address's oldest idle one")
    auth_token_file: Path | None = Field(None, description="require `Authorization: Bearer <the file's content>`")
    tls_cert: Path | None = Field(None, description="PEM certificate (with tls_key: TLS on both transports)")
    tls_key: Path | None = Field(None, description="PEM private key")

    @field_validator("grpc_endpoint", "http_endpoint", mode="before")
    @classmethod
    def _off(cls, value: object) -> object:
        """`none`/`off` (YAML reads a bare `off` as false) turn the receiver off, like null."""
        if value is False or (isinstance(value, str) and value.strip().lower() in OFF):
            return None
        return value

    @field_validator("grpc_endpoint", "http_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            split_endpoint(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ReceiversConfig:
        if self.grpc_endpoint is None and self.http_endpoint is None:
            raise ValueError("both receivers are off (grpc_endpoint and http_endpoint are none): turn one on")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both (PEM files) or neither")
        if self.max_decompressed_bytes < self.max_message_bytes:
            raise ValueError("max_decompressed_bytes must be >= max_message_bytes "
                             f"({self.max_decompressed_bytes} < {self.max_message_bytes})")
        return self
