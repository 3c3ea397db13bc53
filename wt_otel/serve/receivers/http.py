"""OTLP/HTTP on the standard library's `ThreadingHTTPServer` (no web framework needed).

Routes:

=================  ======  =====================================================
path               method  answer
=================  ======  =====================================================
/v1/traces         POST    OTLP export (protobuf or JSON; gzip, deflate, zlib or zstd, or none)
/v1/logs           POST    OTLP export
/v1/metrics        POST    accepted and dropped (counted), so an app's metric exporter does not fail
/healthz           GET     200 ``{"status":"ok"}``, never needs the token (probes);
                           503 ``{"status":"degraded",...}`` while the data dir
                           cannot be written (exports get 503 meanwhile)
/metrics           GET     Prometheus text; needs the token when one is set,
                           because counters reveal traffic (Prometheus sends one
                           with ``authorization.credentials_file``)
anything else      any     404; a known path with the wrong method: 405
=================  ======  =====================================================

Export answers, in the request's encoding (`google.rpc.Status` bodies for
errors, as the OTLP spec asks): 200 (`partial_success` when records were
rejected), 400 malformed body (the message says what is wrong), 401
missing/wrong bearer token, 411 no Content-Length and not chunked, 413 body
above `max_message_bytes` or inflating above `max_decompressed_bytes`, 415
content type other than ``application/x-protobuf``/``application/json`` or a
content encoding other than gzip, deflate, zlib or zstd, 429 + Retry-After (queue full or too many
concurrent exports), 503 + Retry-After (shutting down).

Whenever a request is refused before its body is read, the connection is
closed (``Connection: close``): the unread body would otherwise be parsed as
the next request.

Slow and many clients (issue 13): a request must arrive whole -- request
line, headers and body -- within `http_read_timeout` seconds of its first
byte being awaited, or the connection is answered 408 (body) or closed (a
reaper thread ends stalled header reads); an export slot is taken only once
the body is in, so slow senders cannot hold the slots that decoding needs.
The listen backlog is `http_backlog`.

Connection admission (issue 31): idle connections cannot lock anyone out. A
new connection must begin its first request within
`http_first_request_timeout` seconds or it is closed. Beyond
`http_max_connections_per_client` connections from one address, a new one
from there closes that address's oldest idle connection; beyond
`http_max_connections`, it closes an idle connection of the address holding
the most (never-used connections first, then keep-alive idle ones, then
those still sending headers), so a new address always finds room. Only when
every connection is busy with a request does a new one get 503 + Retry-After,
and even then up to `_PROBE_RESERVE` more are let in to answer `GET /healthz`
(a liveness probe must not restart a healthy pod); anything else they ask gets
the 503. Closed and refused connections are counted in /metrics.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from google.protobuf import json_format

from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import Pipeline
from wt_otel.serve.receivers.common import (
    CONTENT_ENCODINGS,
    RETRY_AFTER_SECONDS,
    RETRY_INFO_TYPE_URL,
    Encoding,
    MalformedRequest,
    Outcome,
    Signal,
    TooLarge,
    bearer_ok,
    decompress_capped,
    export,
    retry_info_bytes,
    rpc_status_bytes,
)
from wt_otel.serve.receivers.config import ReceiversConfig, split_endpoint

log = logging.getLogger("wt_otel.serve.receivers.http")

_EXPORT_PATHS = {"/v1/traces": Signal.TRACES, "/v1/logs": Signal.LOGS, "/v1/metrics": Signal.METRICS}
_CONTENT_TYPES = {
    "application/x-protobuf": Encoding.PROTOBUF,
    "application/protobuf": Encoding.PROTOBUF,
    "application/json": Encoding.JSON,
}
_MEDIA_TYPE = {Encoding.PROTOBUF: "application/x-protobuf", Encoding.JSON: "application/json"}
# google.rpc.Code for the Status body of each HTTP error, as grpc-gateway maps them.
_RPC_CODE = {400: 3, 401: 16, 404: 5, 405: 12, 408: 4, 411: 3, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}
# Exports decoding at once; each holds up to max_message_bytes + max_decompressed_bytes.
_MAX_CONCURRENT_EXPORTS = 32
_MAX_CONCURRENT_INFLATIONS = 4  # 32 exports inflating to 31 MB each once held 1.2 GB
_IDLE_TIMEOUT_SECONDS = 30  # a keep-alive connection idle between requests is closed after this
_PROBE_RESERVE = 16  # connections beyond the limits that may still ask for /healthz (see the module doc)
# A connection's state, for admission; the lower, the sooner it is closed to make room for a new one.
_NEW, _IDLE, _HEADERS, _BUSY = 0, 1, 2, 3  # no request yet; keep-alive between requests; reading headers; a request
_TOO_MANY = "too many connections; retry later"
_REAP_SLACK_SECONDS = 0.5  # the reaper gives the handler's own 408 this long to go out first
_MAX_TRAILER_LINES = 64
_LINGER_SECONDS = 2.0  # see _Handler._linger
_LINGER_MAX_BYTES = 64 * 1024 * 1024


class _Reply(Exception):
    """Ends request handling with an HTTP error; raised from deep inside body reading."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.close = status, message, close


class OtlpHttpServer(ThreadingHTTPServer):
    """The HTTP receiver: one thread per connection, bounded concurrent exports, graceful stop."""

    daemon_threads = True

    def __init__(self, config: ReceiversConfig, pipeline: Pipeline, metrics: Metrics, token: bytes | None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        assert config.http_endpoint is not None
        host, port = split_endpoint(config.http_endpoint)
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.request_queue_size = config.http_backlog  # the listen backlog (the stdlib default is 5)
        self._deadlines: dict[socket.socket, float] = {}  # connections reading a request, and by when
        self._per_client: dict[str, int] = {}
        self._peers: dict[socket.socket, str] = {}
        self._states: dict[socket.socket, tuple[int, float]] = {}  # (state, since) of each admitted connection
        self._probes: dict[socket.socket, float] = {}  # admitted beyond the limits, for /healthz only: since
        self._reaper_stop = threading.Event()
        self.config, self.pipeline, self.metrics, self.token = config, pipeline, metrics, token
        self.stopping = False
        self.export_slots = threading.BoundedSemaphore(_MAX_CONCURRENT_EXPORTS)
        # a compressed export may inflate to max_decompressed_bytes and decode to several times that: few at once
        self.inflate_slots = threading.BoundedSemaphore(_MAX_CONCURRENT_INFLATIONS)
        self._connections: set[socket.socket] = set()
        self._busy = 0
        self._idle = threading.Condition()
        super().__init__((host, port), _Handler)
        if ssl_context is not None:
            # The handshake runs in the connection's thread (see _Handler.setup), not in the accept loop,
            # so a client that never finishes it cannot stall everyone else.
            self.socket = ssl_context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self._reaper = threading.Thread(target=self._reap, name="wt-otel-http-reaper", daemon=True)
        self._reaper.start()

    @property
    def port(self) -> int:
        return self.server_address[1]

    # -- connection and request tracking, for a graceful stop

    def process_request(self, request, client_address) -> None:
        """Admit a new connection, closing an idle one to make room if need be (see the module doc)."""
        peer = str(client_address[0]) if client_address else ""
        victim: socket.socket | None = None
        probe = False
        with self._idle:
            over = True
            if self._per_client.get(peer, 0) >= self.config.http_max_connections_per_client:
                victim = self._victim_locked(peer)
            elif len(self._connections) >= self.config.http_max_connections:
                victim = self._victim_locked(None)
            else:
                over = False
            if over and victim is None:  # every connection busy: let it in for /healthz only
                probe = True
                if len(self._probes) >= _PROBE_RESERVE:  # the reserve's oldest gives way (probes are quick)
                    victim = min(self._probes, key=self._probes.__getitem__)
                self._probes[request] = time.monotonic()
            else:
                self._connections.add(request)
                self._peers[request] = peer
                self._per_client[peer] = self._per_client.get(peer, 0) + 1
                self._states[request] = (_NEW, time.monotonic())
            if victim is not None:
                self._forget_locked(victim)
        if victim is not None:
            self.metrics.inc("wt_otel_http_connections_closed_total", reason="evicted")
            with contextlib.suppress(OSError):
                victim.shutdown(socket.SHUT_RDWR)  # its handler sees EOF and ends; its slot is already free
        if probe:
            self.metrics.inc("wt_otel_http_connections_refused_total")
        super().process_request(request, client_address)

    def _victim_locked(self, peer: str | None) -> socket.socket | None:
        """The connection to close for a new one: `peer`'s (None: any address's, the one holding the most
        connections first) that is not busy with a request, the least advanced and longest waiting first."""
        best: tuple[int, int, float] | None = None
        victim = None
        for conn, (state, since) in self._states.items():
            if state == _BUSY:
                continue
            owner = self._peers.get(conn, "")
            if peer is not None and owner != peer:
                continue
            key = (-self._per_client.get(owner, 0), state, since)
            if best is None or key < best:
                best, victim = key, conn
        return victim

    def _forget_locked(self, conn: socket.socket) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            peer = self._peers.pop(conn, "")
            self._per_client[peer] -= 1
            if not self._per_client[peer]:
                del self._per_client[peer]
        self._states.pop(conn, None)
        self._probes.pop(conn, None)
        self._deadlines.pop(conn, None)

    def probe_only(self, conn: socket.socket) -> bool:
        """Whether `conn` was let in beyond the limits, to answer /healthz only."""
        with self._idle:
            return conn in self._probes

    def mark(self, conn: socket.socket, state: int) -> None:
        with self._idle:
            if conn in self._states:
                self._states[conn] = (state, time.monotonic())

    def shutdown_request(self, request) -> None:
        with self._idle:
            self._forget_locked(request)
        super().shutdown_request(request)

    # -- read deadlines (slow clients)

    def arm(self, conn: socket.socket, seconds: float | None) -> None:
        """The request on `conn` must be read within `seconds` (None: it is read; the deadline is off)."""
        with self._idle:
            if seconds is None:
                self._deadlines.pop(conn, None)
            else:
                self._deadlines[conn] = time.monotonic() + seconds

    def deadline(self, conn: socket.socket) -> float | None:
        with self._idle:
            return self._deadlines.get(conn)

    def _reap(self) -> None:
        """End connections whose request did not arrive in time (headers trickled in, say)."""
        interval = min(1.0, max(0.05, min(self.config.http_read_timeout, self.config.http_first_request_timeout) / 4))
        while not self._reaper_stop.wait(interval):
            now = time.monotonic()
            with self._idle:
                late = [c for c, t in self._deadlines.items() if t + _REAP_SLACK_SECONDS < now]
                for conn in late:
                    del self._deadlines[conn]
            for conn in late:
                self.metrics.inc("wt_otel_http_read_timeouts_total")
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        with self._idle:
            self._busy += 1
        try:
            yield
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting, let requests in progress finish (up to `grace` s), then drop idle keep-alives."""
        self.stopping = True
        self._reaper_stop.set()
        self.shutdown()
        self.server_close()
        with self._idle:
            self._idle.wait_for(lambda: self._busy == 0, timeout=grace)
            connections = list(self._connections) + list(self._probes)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request, client_address) -> None:
        # Resets, timeouts and TLS failures are the client's business; keep them out of stderr.
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: OtlpHttpServer
    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse connections
    server_version = "wt-otel"
    timeout = _IDLE_TIMEOUT_SECONDS

    def setup(self) -> None:
        super().setup()
        self._unread_body = False
        self._requests = 0
        self._probe_only = self.server.probe_only(self.connection)
        config = self.server.config
        # the TLS handshake, if any: part of what a new connection must do before its first request
        self.server.arm(self.connection, min(config.http_read_timeout, config.http_first_request_timeout))
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def handle_one_request(self) -> None:
        """Idle until the first byte: `http_first_request_timeout` on a new connection, the keep-alive idle
        timeout between requests; from then on the whole request must arrive within http_read_timeout (the
        reaper enforces it on header reads)."""
        first = not self._requests
        self.server.arm(self.connection, None)
        self.server.mark(self.connection, _NEW if first else _IDLE)
        if first:
            self.connection.settimeout(self.server.config.http_first_request_timeout)
        try:
            if not self.rfile.peek(1):  # type: ignore[attr-defined]  # a BufferedReader (makefile("rb"))
                self.close_connection = True
                return
        except TimeoutError:
            self.close_connection = True
            if first:
                self.server.metrics.inc("wt_otel_http_connections_closed_total", reason="silent")
            return
        except (OSError, ValueError):  # reset, closed (closed to make room for another, say)
            self.close_connection = True
            return
        finally:
            if first:
                with contextlib.suppress(OSError):
                    self.connection.settimeout(self.timeout)
        self._requests += 1
        self.server.mark(self.connection, _HEADERS)
        self.server.arm(self.connection, self.server.config.http_read_timeout)
        super().handle_one_request()

    def finish(self) -> None:
        super().finish()  # flushes the response
        if self._unread_body:
            self._linger()

    def _linger(self) -> None:
        """Close politely after refusing a request whose body we did not read (401/413/415...).

        Closing a socket with unread input makes the kernel send RST, and a client still
        writing its body (http.client, for one) then sees a broken pipe instead of our
        answer. So: half-close, and discard what keeps arriving for a bounded time and size,
        like nginx's lingering close."""
        conn = self.connection
        with contextlib.suppress(OSError, ValueError):
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(_LINGER_SECONDS)
            deadline = time.monotonic() + _LINGER_SECONDS
            discarded = 0
            while discarded < _LINGER_MAX_BYTES and time.monotonic() < deadline:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                discarded += len(chunk)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib signature)
        log.debug("%s " + format, self.address_string(), *args)

    def do_POST(self) -> None:  # noqa: N802 (stdlib naming)
        self._dispatch("POST")

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch("PATCH")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_OPTIONS(self) -> None:  # noqa: N802
        self._dispatch("OPTIONS")

    # -- routing

    def _dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        self._export_signal: Signal | None = None  # the handler lives on across keep-alive requests
        media = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        encoding = _CONTENT_TYPES.get(media)  # errors answer in the request's encoding, JSON when unknown
        self.server.mark(self.connection, _BUSY)
        with self.server.busy():
            try:
                if self._probe_only and (method, path) != ("GET", "/healthz"):
                    self._status(503, _TOO_MANY, encoding, retry=True, close=True)  # over the connection limits
                elif self.server.stopping:
                    self._status(503, "wt-otel is shutting down", encoding, retry=True, close=True)
                elif path in _EXPORT_PATHS:
                    if method != "POST":
                        self._status(405, f"{path} accepts POST only", encoding, close=True, allow="POST")
                    else:
                        self._export(_EXPORT_PATHS[path], media, encoding)
                elif path in ("/healthz", "/metrics"):
                    if method != "GET":
                        self._status(405, f"{path} accepts GET only", encoding, close=True, allow="GET")
                    elif path == "/healthz":
                        admission = getattr(self.server.pipeline, "admission", None)
                        degraded = admission.degraded if admission is not None else {}
                        if degraded:  # exports are refused meanwhile (the data dir cannot be written)
                            self._send(503, json.dumps({"status": "degraded", "reasons": degraded}).encode(),
                                       "application/json", {"Retry-After": str(RETRY_AFTER_SECONDS)})
                        else:
                            self._send(200, b'{"status":"ok"}', "application/json", close=self._probe_only)
                    elif self._authorized():
                        self._send(200, self.server.metrics.render().encode(), "text/plain; version=0.0.4")
                    else:
                        self._unauthorized(encoding)
                else:
                    self._status(404, f"no such path {path!r} (OTLP uses /v1/traces, /v1/logs and /v1/metrics)",
                                 encoding, close=True)
            except (TimeoutError, ConnectionError, ssl.SSLError):
                self.close_connection = True  # the peer is gone or stalled; nobody to answer
            except Exception:
                log.exception("OTLP/HTTP %s %s failed", method, path)
                self._status(500, "internal error in wt-otel (see its log)", encoding, close=True)

    def _authorized(self) -> bool:
        token = self.server.token
        return token is None or bearer_ok(self.headers.get("Authorization"), token)

    def _unauthorized(self, encoding: Encoding | None) -> int:
        return self._status(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>'", encoding,
                            close=True, www_authenticate='Bearer realm="wt-otel"')

    # -- export

    def _export(self, signal: Signal, media: str, encoding: Encoding | None) -> int:
        """Answer one export request; returns the HTTP status sent."""
        self._export_signal = signal  # _send counts the request under this signal
        if not self._authorized():
            return self._unauthorized(encoding)
        if encoding is None:
            return self._status(415, f"unsupported Content-Type {media or '(none)'!r}: OTLP/HTTP takes "
                                     "application/x-protobuf or application/json", None, close=True)
        content_encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if content_encoding != "identity" and content_encoding not in CONTENT_ENCODINGS:
            return self._status(415, f"unsupported Content-Encoding {content_encoding!r}: use one of "
                                     f"{', '.join(CONTENT_ENCODINGS)} or none", encoding, close=True)
        try:
            body = self._read_body()  # no export slot held: a slow sender must not starve decoding
        except _Reply as reply:
            return self._status(reply.status, reply.message, encoding, close=reply.close)
        finally:
            self.server.arm(self.connection, None)
        if not self.server.export_slots.acquire(blocking=False):
            return self._status(429, "too many concurrent exports; retry later", encoding, retry=True)
        inflating = content_encoding != "identity"
        if inflating and not self.server.inflate_slots.acquire(blocking=False):
            self.server.export_slots.release()
            return self._status(429, "too many compressed exports being inflated at once; retry later", encoding,
                                retry=True)
        try:
            try:
                if content_encoding != "identity":
                    body = decompress_capped(body, content_encoding, self.server.config.max_decompressed_bytes)
            except TooLarge as e:
                return self._status(413, str(e), encoding)
            except MalformedRequest as e:
                return self._status(400, str(e), encoding)
            result = export(signal, body, encoding, self.server.pipeline, self.server.metrics,
                            client=self.client_address[0] if self.client_address else None)
        finally:
            if inflating:
                self.server.inflate_slots.release()
            self.server.export_slots.release()
        if result.outcome is Outcome.OK:
            response = result.response(signal)
            if encoding is Encoding.JSON:
                payload = json.dumps(json_format.MessageToDict(response), separators=(",", ":")).encode()
            else:
                payload = response.SerializeToString()
            return self._send(200, payload, _MEDIA_TYPE[encoding])
        status = {Outcome.MALFORMED: 400, Outcome.FULL: 429, Outcome.CLOSED: 503, Outcome.TOO_LARGE: 413,
                  Outcome.UNAVAILABLE: 503}.get(result.outcome, 500)
        return self._status(status, result.message, encoding, retry=status in (429, 503))

    def _read_body(self) -> bytes:
        """The raw body, never more than max_message_bytes; raises `_Reply` for 400/411/413."""
        cap = self.server.config.max_message_bytes
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self._read_chunked(cap)
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise _Reply(411, "Content-Length is required (or Transfer-Encoding: chunked)", close=True)
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            raise _Reply(400, f"invalid Content-Length {length_text!r}", close=True) from None
        if length > cap:
            raise _Reply(413, f"body of {length} bytes exceeds the {cap}-byte limit (max_message_bytes)", close=True)
        body = self._read_exactly(length)
        if len(body) != length:
            raise _Reply(400, f"body ended after {len(body)} of {length} bytes", close=True)
        return body

    def _read_exactly(self, n: int) -> bytes:
        """Up to `n` bytes, before the request's read deadline (else 408); short only at EOF."""
        out = bytearray()
        while len(out) < n:
            left = self._time_left()
            self.connection.settimeout(left)
            try:
                chunk = self.rfile.read1(min(n - len(out), 65536))
            except TimeoutError:
                chunk = None
            finally:
                self.connection.settimeout(self.timeout)
            if chunk is None or (not chunk and self._time_left() <= 0):
                raise _Reply(408, f"the request body did not arrive within {self.server.config.http_read_timeout:g}s "
                                  f"({len(out)} of {n} bytes read)", close=True)
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def _time_left(self) -> float:
        deadline = self.server.deadline(self.connection)
        if deadline is None:
            return float(self.timeout)
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Reply(408, f"the request did not arrive within {self.server.config.http_read_timeout:g}s",
                         close=True)
        return left

    def _read_chunked(self, cap: int) -> bytes:
        body = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _Reply(400, f"bad chunk size line {line[:40]!r}", close=True) from None
            if size == 0:
                for _ in range(_MAX_TRAILER_LINES):
                    if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                        return bytes(body)
                raise _Reply(400, "too many trailer lines", close=True)
            if len(body) + size > cap:
                raise _Reply(413, f"chunked body exceeds the {cap}-byte limit (max_message_bytes)", close=True)
            chunk = self._read_exactly(size)
            if len(chunk) != size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _Reply(400, "chunked body is truncated or malformed", close=True)
            body += chunk

    # -- responses

    def _status(self, status: int, message: str, encoding: Encoding | None, *, retry: bool = False,
                close: bool = False, allow: str | None = None, www_authenticate: str | None = None) -> int:
        """Send a `google.rpc.Status` error body in the request's encoding (JSON when unknown)."""
        code = _RPC_CODE.get(status, 2)
        details = [(RETRY_INFO_TYPE_URL, retry_info_bytes())] if retry else []
        if encoding is Encoding.PROTOBUF:
            payload, media = rpc_status_bytes(code, message, details), _MEDIA_TYPE[encoding]
        else:
            status_json: dict = {"code": code, "message": message}
            if retry:
                status_json["details"] = [{"@type": RETRY_INFO_TYPE_URL, "retryDelay": f"{RETRY_AFTER_SECONDS}s"}]
            payload, media = json.dumps(status_json).encode(), "application/json"
        headers = {}
        if retry:
            headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        if allow:
            headers["Allow"] = allow
        if www_authenticate:
            headers["WWW-Authenticate"] = www_authenticate
        return self._send(status, payload, media, headers, close=close)

    def _send(self, status: int, payload: bytes, media: str, headers: dict[str, str] | None = None,
              close: bool = False) -> int:
        if self._export_signal is not None:  # counted before the client can see the answer
            self.server.metrics.inc("wt_otel_requests_total", transport="http", signal=self._export_signal.value,
                                    code=str(status))
        self.send_response(status)
        self.send_header("Content-Type", media)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if close:
            self.close_connection = True
            # close=True means any body was left unread
            self._unread_body = "Content-Length" in self.headers or "Transfer-Encoding" in self.headers
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        return status


def start_http(config: ReceiversConfig, pipeline: Pipeline, metrics: Metrics,
               token: bytes | None) -> tuple[OtlpHttpServer, threading.Thread]:
    """Bind and serve `config.http_endpoint` in a background thread."""
    ssl_context = None
    if config.tls_cert is not None and config.tls_key is not None:
        ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ssl_context.load_cert_chain(config.tls_cert, config.tls_key)
    try:
        server = OtlpHttpServer(config, pipeline, metrics, token, ssl_context)
    except OSError as e:
        problem = (e.strerror or str(e)).lower()
        hint = (" (another process has this port: choose another with --http-endpoint, or turn it off with none)"
                if "in use" in problem else "")
        error = OSError(f"OTLP/HTTP receiver cannot listen on {config.http_endpoint}: {problem}{hint}")
        error.errno = e.errno  # the message without "[Errno N]", the number still there for callers
        raise error from None
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="wt-otel-http", daemon=True)
    thread.start()
    return server, thread
