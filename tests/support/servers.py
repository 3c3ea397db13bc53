"""Servers a test starts as it goes (recording proxies, cassette servers), all stopped when it ends.

A test that fails midway would otherwise leave the ones it started listening; `with StartedServers() as start:`
in a fixture stops every one, and `start(server)` hands the server back so a test reads as one line a server.
"""

from __future__ import annotations

from typing import Any, Protocol, Self, TypeVar


class Startable(Protocol):
    def start(self) -> Any: ...

    def stop(self) -> Any: ...


S = TypeVar("S", bound=Startable)


class StartedServers:
    """Starts each server given and, on leaving `with`, stops them all (a server whose start failed too)."""

    def __init__(self) -> None:
        self.started: list[Startable] = []

    def __call__(self, server: S) -> S:
        self.started.append(server)
        server.start()
        return server

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for server in self.started:
            server.stop()
