"""A `Server` whose start fails after its receiver process started leaves nothing running behind it.

Serve used as a library lives on after a failed start: a receiver process left there (it exits only when its socket
to serve closes) would keep the data dir's segment log, and no later `Server` on it could start. Real processes:
the receiver process is `wt_otel.serve.receiver_process`, and what is checked is whether that pid still runs.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.support.hostile import genai_session, tid, to_request
from tests.support.receivers import post_traces
from tests.unit.serve.test_receiver_process import _alive, _config, _receiver_pids, _wait, _written
from wt_otel.serve.server import Server, SessionPipeline

# the steps made to fail: one once the receiver process is ready (the session stages' threads), one once it opened
# the segment log but before it was told to go on (it then waits for "go")
STEPS = ["start_stages", "by_reference_blocker"]


@pytest.mark.parametrize("step", STEPS)
def test_a_failed_start_stops_its_receiver_process_and_the_next_server_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    data_dir = tmp_path / "data"
    server = Server(_config(data_dir), quiet=True)
    before = set(_receiver_pids(os.getpid()))  # (other tests' Servers may run in this process)
    threads = set(threading.enumerate())
    started: list[int] = []

    def fail(stages: SessionPipeline) -> None:
        started.extend(set(_receiver_pids(os.getpid())) - before)  # the one this start started, running
        raise RuntimeError(f"{step} cannot go on")

    monkeypatch.setattr(SessionPipeline, step, fail)
    with pytest.raises(RuntimeError, match=f"{step} cannot go on"):
        server.start()
    [pid] = started
    assert not _alive(pid), "the receiver process outlived the failed start"
    _wait(lambda: not [t for t in threading.enumerate() if t not in threads and t.name.startswith("wt-otel")])
    server.stop()  # after a failed start: nothing left to stop

    monkeypatch.undo()
    again = Server(_config(data_dir), quiet=True).start()
    feed, url = again.feed, again.http_url
    try:
        assert feed is not None and feed.pid is not None and _alive(feed.pid) and url is not None
        assert post_traces(url, to_request(genai_session(tid(1))).SerializeToString()) == 200
        _wait(lambda: tid(1) in _written(data_dir))
    finally:
        again.stop()
    assert not _alive(feed.pid)
