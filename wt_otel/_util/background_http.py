"""A stdlib HTTP server on a daemon thread: the shared start/stop of the replay servers.

`start()` binds (port 0 picks a free port) and returns `base_url`; `stop()` stops accepting, cuts the
connections still open (a kept-alive client must not hold `stop()` up) and joins the thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import ThreadingHTTPServer
from typing import Self


class BackgroundHTTPServer:
    host: str
    port: int
    thread_name = "wt-http-server"
    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def _make_server(self) -> ThreadingHTTPServer:
        """The bound server (its handler reaches this object as `server.owner`)."""
        raise NotImplementedError

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> str:
        if self._httpd is None:
            self._httpd = self._make_server()
            self.port = self._httpd.server_address[1]
            # a short poll interval: stop() waits for it, and tests start and stop many servers
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name=self.thread_name, daemon=True)
            self._thread.start()
        return self.base_url

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        for conn in list(getattr(self._httpd, "connections", ())):
            with contextlib.suppress(OSError):  # already closed by the client
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
