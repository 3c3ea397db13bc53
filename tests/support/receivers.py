"""OTLP/HTTP receivers over a real `Pipeline` into a counting sink, for the receiver tests (slow clients, connection
admission): `HttpReceivers().start(**ReceiversConfig fields)`, `stop()` ends every one started."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers import Receivers, ReceiversConfig, start_receivers


class CountingSink:
    """A pipeline consumer that counts the records it is given."""

    def __init__(self) -> None:
        self.records = 0

    def consume(self, records, now) -> None:
        self.records += len(records)

    def tick(self, now) -> None:
        pass

    def close(self) -> None:
        pass


class HttpReceivers:
    """Starts OTLP/HTTP receivers (no gRPC) on 127.0.0.1:0; `stop()` stops them and their pipelines."""

    def __init__(self) -> None:
        self._made: list[tuple[Receivers, Pipeline]] = []

    def start(self, **config) -> tuple[Receivers, CountingSink, Metrics]:
        sink, metrics = CountingSink(), Metrics()
        pipeline = Pipeline(sink, metrics).start()
        receivers = start_receivers(ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0", **config),
                                    pipeline, metrics)
        self._made.append((receivers, pipeline))
        return receivers, sink, metrics

    def stop(self) -> None:
        for receivers, pipeline in self._made:
            receivers.stop(grace=1)
            pipeline.stop()


def slow_body(port: int, length: int = 1000) -> socket.socket:
    """A client busy with a request: it sends its headers and one byte of a `length`-byte body, then stalls."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
              b"Content-Length: %d\r\n\r\nx" % length)
    return s


def post_traces(url: str, body: bytes) -> int:
    """POST an OTLP/protobuf traces request to serve's HTTP base `url`; the status code (errors included)."""
    req = urllib.request.Request(url + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
