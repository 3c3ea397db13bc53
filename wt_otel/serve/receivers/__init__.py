"""OTLP receivers: gRPC (`TraceService`/`LogsService`) and HTTP (`/v1/traces`, `/v1/logs`).

    receivers = start_receivers(ReceiversConfig(grpc_endpoint="127.0.0.1:0"), pipeline, metrics)
    ...  # receivers.grpc_port, receivers.http_port
    receivers.stop(grace=5)   # before pipeline.stop(): stop taking data, then drain it

Both transports feed the same `Pipeline` through `common.export`, so a given
request gets the same verdict either way. Neither ever blocks on the pipeline:
a full queue is answered with 429 / RESOURCE_EXHAUSTED and the client retries.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc as _grpc

from wt_otel.ingest import spanindex
from wt_otel.ingest.otlp import check_protobuf_backend
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers.common import load_token
from wt_otel.serve.receivers.config import ReceiversConfig
from wt_otel.serve.receivers.diagnose import check_tls_files
from wt_otel.serve.receivers.grpc import start_grpc
from wt_otel.serve.receivers.http import OtlpHttpServer, start_http

__all__ = ["Receivers", "ReceiversConfig", "start_receivers"]

log = logging.getLogger("wt_otel.serve.receivers")


@dataclass
class Receivers:
    """The running receivers; a port is None when its transport is disabled."""

    grpc_server: _grpc.Server | None = None
    grpc_port: int | None = None
    http_server: OtlpHttpServer | None = None
    http_thread: threading.Thread | None = None
    http_port: int | None = None

    def stop(self, grace: float | None = 5.0) -> None:
        """Refuse new requests and give those in progress up to `grace` seconds to finish.

        Call it before `Pipeline.stop()`, so every request acknowledged to a
        client has been queued before the pipeline drains."""
        done = self.grpc_server.stop(grace) if self.grpc_server is not None else None
        if self.http_server is not None:
            self.http_server.stop(grace)
            if self.http_thread is not None:
                self.http_thread.join(grace)
        if done is not None:
            done.wait(grace)


def start_receivers(config: ReceiversConfig, pipeline: Pipeline, metrics: Metrics) -> Receivers:
    """Start every enabled receiver; on a bind failure nothing is left running (OSError)."""
    backend = check_protobuf_backend()
    if backend == "upb":
        log.info("protobuf backend: upb")
    else:
        log.warning("protobuf runs on the %r backend, not upb: OTLP decoding will be ~200x slower "
                    "(unset PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION, reinstall protobuf)", backend)
    try:
        index = spanindex.implementation()
    except spanindex.SpanIndexUnavailable as exc:
        raise ValueError(str(exc)) from None
    log.info("span index: %s", "native (C extension)" if index == "native" else
             f"off ({spanindex.ENV_VAR}=off: every request is decoded in full)" if index == "off" else
             "pure Python (the C extension is not built)" if not spanindex.native_available() else
             f"pure Python ({spanindex.ENV_VAR}=python)")
    metrics.set("wt_otel_span_index_info", 1, implementation=index)
    token = load_token(config.auth_token_file)
    if config.tls_cert is not None and config.tls_key is not None:
        check_tls_files(config.tls_cert, config.tls_key)  # ValueError naming the file, before any bind
    receivers = Receivers()
    try:
        if config.grpc_endpoint is not None:
            receivers.grpc_server, receivers.grpc_port = start_grpc(config, pipeline, metrics, token)
        if config.http_endpoint is not None:
            receivers.http_server, receivers.http_thread = start_http(config, pipeline, metrics, token)
            receivers.http_port = receivers.http_server.port
    except BaseException:
        receivers.stop(grace=0)
        raise
    scheme = "with TLS" if config.tls_cert else "without TLS"
    log.debug("OTLP receivers listening %s: gRPC port %s, HTTP port %s, auth %s", scheme, receivers.grpc_port,
             receivers.http_port, "on" if token else "off")
    return receivers
