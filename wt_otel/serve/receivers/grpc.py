"""OTLP/gRPC: `TraceService/Export` and `LogsService/Export` on a grpcio server (and `MetricsService/Export`,
which accepts and drops metrics).

The servicers subclass the generated `*ServiceServicer`s, but are registered
with a pass-through request deserializer: grpc answers INTERNAL when its own
deserializer fails, and the OTLP spec wants INVALID_ARGUMENT with a message
for malformed payloads, so parsing happens in `common.decode` like for HTTP.
(Registered with the generated `add_*Servicer_to_server` instead they still
work; they then receive parsed messages.)

Status codes: OK (with `partial_success` when records were rejected),
INVALID_ARGUMENT (malformed), RESOURCE_EXHAUSTED (queue full, with RetryInfo
both in `grpc-status-details-bin` and in `google.rpc.retryinfo-bin`, the key
the OTel Python exporter reads; also grpc's own answer to a message above
`max_message_bytes`), UNAVAILABLE (shutting down), UNAUTHENTICATED (missing
or wrong `authorization: Bearer <token>` metadata). gzip and deflate from
clients are handled by grpc itself; zstd is not (grpc's core has no zstd):
a Collector set to `compression: zstd` sends it over OTLP/HTTP, or gzip here.

`grpc.health.v1.Health/Check` answers gRPC probes (a Kubernetes `grpc:` probe,
grpc_health_probe) as `/healthz` answers HTTP ones, and needs no token.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers.common import (
    RETRY_AFTER_SECONDS,
    RETRY_INFO_TYPE_URL,
    Encoding,
    Outcome,
    Signal,
    bearer_ok,
    export,
    retry_info_bytes,
    rpc_status_bytes,
)
from wt_otel.serve.receivers.config import ReceiversConfig
from wt_otel.serve.receivers.diagnose import bind_cause, captured_fd2

log = logging.getLogger("wt_otel.serve.receivers.grpc")

# Decoding holds the GIL, so more threads buy little; the cap on concurrent RPCs keeps
# the memory held by in-flight requests bounded (grpc answers RESOURCE_EXHAUSTED beyond it).
_WORKERS = 8
_MAX_CONCURRENT_RPCS = 64

_TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
_HINT = " (another process has this port: choose another with --grpc-endpoint, or turn it off with none)"
_METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"


class _ExportServicer:
    """The Export method shared by both services; subclasses name the signal."""

    signal: Signal

    def __init__(self, pipeline: Pipeline, metrics: Metrics, token: bytes | None) -> None:
        self._pipeline = pipeline
        self._metrics = metrics
        self._token = token

    def Export(self, request: bytes | Message, context: grpc.ServicerContext):  # noqa: N802 (generated name)
        if self._token is not None and not bearer_ok(_metadata(context, "authorization"), self._token):
            self._abort(context, grpc.StatusCode.UNAUTHENTICATED,
                        "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'")
        try:
            result = export(self.signal, request, Encoding.PROTOBUF, self._pipeline, self._metrics,
                            client=_peer_host(context))
        except Exception:  # a bug here must not look like the client's fault
            log.exception("OTLP/gRPC %s export failed", self.signal.value)
            self._abort(context, grpc.StatusCode.INTERNAL, "internal error in wt-otel (see its log)")
        if result.outcome is Outcome.OK:
            self._count(grpc.StatusCode.OK)
            return result.response(self.signal)
        if result.outcome is Outcome.MALFORMED:
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, result.message)
        if result.outcome is Outcome.TOO_LARGE:  # no RetryInfo: the same batch would be refused again
            self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, result.message)
        code = grpc.StatusCode.RESOURCE_EXHAUSTED if result.outcome is Outcome.FULL else grpc.StatusCode.UNAVAILABLE
        self._abort(context, code, result.message, retry=True)

    def _abort(self, context: grpc.ServicerContext, code: grpc.StatusCode, message: str,
               retry: bool = False) -> NoReturn:
        """Count, attach RetryInfo when the client should come back, and end the RPC (raises)."""
        self._count(code)
        if retry:
            info = retry_info_bytes(RETRY_AFTER_SECONDS)
            status = rpc_status_bytes(code.value[0], message, [(RETRY_INFO_TYPE_URL, info)])
            context.set_trailing_metadata((("grpc-status-details-bin", status), ("google.rpc.retryinfo-bin", info)))
        context.abort(code, message)
        raise AssertionError("grpc's context.abort returned")  # it raises; this keeps type checkers honest

    def _count(self, code: grpc.StatusCode) -> None:
        self._metrics.inc("wt_otel_requests_total", transport="grpc", signal=self.signal.value, code=code.name)


class TraceService(_ExportServicer, trace_service_pb2_grpc.TraceServiceServicer):
    signal = Signal.TRACES


class LogsService(_ExportServicer, logs_service_pb2_grpc.LogsServiceServicer):
    signal = Signal.LOGS


class MetricsService(_ExportServicer, metrics_service_pb2_grpc.MetricsServiceServicer):
    """Accepts and drops metrics (counted), so an app exporting all signals here does not log failures."""

    signal = Signal.METRICS


def _peer_host(context: grpc.ServicerContext) -> str | None:
    """ "ipv4:127.0.0.1:5555" -> "127.0.0.1", "ipv6:[::1]:5555" -> "::1": the client, whichever port and transport."""
    peer = context.peer() or ""
    host = peer.partition(":")[2].rpartition(":")[0] if peer.startswith(("ipv4:", "ipv6:")) else peer
    return host.strip("[]") or None  # the same key as the HTTP receiver's client address


def _metadata(context: grpc.ServicerContext, key: str) -> str | None:
    for item in context.invocation_metadata() or ():
        if item.key == key:
            return item.value if isinstance(item.value, str) else None
    return None


class _Health(health_pb2_grpc.HealthServicer):
    """`Check`: SERVING while exports are taken, NOT_SERVING while they are all refused (the data dir cannot
    be written: /healthz says degraded), for the server ("") and each OTLP service by name; NOT_FOUND for
    any other. `Watch` is left UNIMPLEMENTED (probes call Check)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def Check(self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext):  # noqa: N802
        if request.service not in ("", _TRACE_SERVICE, _LOGS_SERVICE, _METRICS_SERVICE):
            context.abort(grpc.StatusCode.NOT_FOUND, f"no such service {request.service[:200]!r}")
        degraded = self.pipeline.admission.degraded
        status = health_pb2.HealthCheckResponse.NOT_SERVING if degraded else health_pb2.HealthCheckResponse.SERVING
        return health_pb2.HealthCheckResponse(status=status)


def _add_export_service(server: grpc.Server, service: str, servicer: _ExportServicer, response_cls) -> None:
    """Register `servicer.Export` receiving raw bytes (see the module docstring)."""
    handlers = {"Export": grpc.unary_unary_rpc_method_handler(
        servicer.Export, request_deserializer=None, response_serializer=response_cls.SerializeToString)}
    register = getattr(server, "add_registered_method_handlers", None)  # grpcio >= 1.62: no per-call lookup
    if register is not None:
        register(service, handlers)
    else:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))


def start_grpc(config: ReceiversConfig, pipeline: Pipeline, metrics: Metrics,
               token: bytes | None) -> tuple[grpc.Server, int]:
    """Start the gRPC receiver on `config.grpc_endpoint`; returns the server and its bound port."""
    assert config.grpc_endpoint is not None
    options = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.so_reuseport", 0),  # grpc's default lets a stale server on the same port steal connections
    ]
    server = grpc.server(ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="wt-otel-grpc"),
                         options=options, maximum_concurrent_rpcs=_MAX_CONCURRENT_RPCS)
    _add_export_service(server, _TRACE_SERVICE, TraceService(pipeline, metrics, token), ExportTraceServiceResponse)
    _add_export_service(server, _LOGS_SERVICE, LogsService(pipeline, metrics, token), ExportLogsServiceResponse)
    _add_export_service(server, _METRICS_SERVICE, MetricsService(pipeline, metrics, token),
                        ExportMetricsServiceResponse)
    health_pb2_grpc.add_HealthServicer_to_server(_Health(pipeline), server)
    port = 0
    failure: str | None = None
    with captured_fd2() as core_lines:  # gRPC core's own lines: routed to logging, the cause kept
        try:
            if config.tls_cert is not None and config.tls_key is not None:
                credentials = grpc.ssl_server_credentials([(config.tls_key.read_bytes(),
                                                            config.tls_cert.read_bytes())])
                port = server.add_secure_port(config.grpc_endpoint, credentials)
            else:
                port = server.add_insecure_port(config.grpc_endpoint)
        except RuntimeError as e:  # grpcio reports a failed bind this way
            failure = str(e)
    if failure is not None or port == 0:  # older grpcio returns 0 instead of raising
        cause = bind_cause(core_lines) or failure or "grpc could not bind it"
        raise OSError(f"OTLP/gRPC receiver cannot listen on {config.grpc_endpoint}: {cause}"
                      f"{_HINT if 'in use' in cause else ''}") from None
    server.start()
    return server, port
