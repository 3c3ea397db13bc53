"""OTLP/HTTP against slow and many clients (issue 13, item 5): 32 connections trickling their bodies used to hold
every export slot (all exports 429), and a listen backlog of 5 reset simultaneous new connections."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.support.hostile import genai_session, tid, to_request
from tests.support.receivers import HttpReceivers, slow_body


@pytest.fixture
def receiver():
    made = HttpReceivers()
    yield lambda **config: made.start(**config)[0]
    made.stop()


def _export(port: int, timeout: float = 10) -> int:
    body = to_request(genai_session(tid(1))).SerializeToString()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                 headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_slow_bodies_do_not_hold_the_export_slots(receiver):
    receivers = receiver(http_read_timeout=1.5)
    slow = [slow_body(receivers.http_port) for _ in range(40)]  # more than the 32 export slots
    try:
        time.sleep(0.2)  # every slow request is past its headers, reading its body
        assert _export(receivers.http_port) == 200  # was 429: every slot held by a trickling body
        # and the slow ones are answered 408 once their time is up, not held forever
        slow[0].settimeout(10)
        answer = b""
        while chunk := slow[0].recv(4096):  # until the server closes
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1.5s" in answer
    finally:
        for s in slow:
            s.close()


def test_trickled_headers_are_cut_off(receiver):
    receivers = receiver(http_read_timeout=0.5)
    s = socket.create_connection(("127.0.0.1", receivers.http_port), timeout=10)
    try:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHo")  # never finishes its headers
        assert s.recv(4096) == b""  # closed by the reaper, well before this socket's 10 s (the idle timeout is 30)
    finally:
        s.close()


def test_many_simultaneous_connections_are_all_answered(receiver):
    receivers = receiver()
    port = receivers.http_port
    results: list[int | str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(200)

    def client() -> None:
        barrier.wait()
        try:
            code = _export(port, timeout=20)
        except OSError as e:  # a reset: the connection was dropped with no answer
            code = f"{type(e).__name__}: {e}"
        with lock:
            results.append(code)

    threads = [threading.Thread(target=client) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 200
    assert all(isinstance(code, int) and code in (200, 429, 503) for code in results), \
        [c for c in results if not isinstance(c, int)][:3]
    assert results.count(200) >= 100


def test_connections_beyond_the_limit_get_503_at_once(receiver):
    receivers = receiver(http_max_connections_per_client=4, http_read_timeout=5)
    held = [slow_body(receivers.http_port) for _ in range(4)]
    try:
        time.sleep(0.1)
        s = socket.create_connection(("127.0.0.1", receivers.http_port), timeout=10)
        # every connection of this address is busy with a request: let in for /healthz only (issue 31)
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        answer = s.recv(4096)
        s.close()
        assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in answer
    finally:
        for h in held:
            h.close()
    time.sleep(0.2)
    assert _export(receivers.http_port) == 200  # the slots are back once those clients are gone


def test_compressed_exports_inflating_at_once_are_bounded(receiver):
    """32 concurrent exports inflating to 31 MB each once held 1.2 GB: at most 4 inflate at a time."""
    import gzip

    receivers = receiver()
    slots = receivers.http_server.inflate_slots
    for _ in range(4):  # four exports are inflating right now
        assert slots.acquire(blocking=False)
    try:
        body = gzip.compress(to_request(genai_session(tid(1))).SerializeToString())
        req = urllib.request.Request(f"http://127.0.0.1:{receivers.http_port}/v1/traces", data=body,
                                     headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code == 429 and info.value.headers["Retry-After"] == "1"
        assert _export(receivers.http_port) == 200  # plain bodies are not held up
    finally:
        for _ in range(4):
            slots.release()
