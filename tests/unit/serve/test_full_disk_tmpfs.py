"""A real full disk (issue 13, item 4): serve's data dir on a small tmpfs, filled with ballast.

Needs permission to mount (root, as in CI's container); skipped otherwise -- the ENOSPC seam tests in
test_serve_faults.py cover the same behaviour everywhere."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from tests.support.hostile import genai_session, tid, to_request
from tests.support.receivers import post_traces
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.server import Server


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=10)


def _post(url: str, n: int) -> int:
    return post_traces(url, to_request(genai_session(tid(n))).SerializeToString())


def _healthz(url: str) -> int:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_full_disk_loses_nothing_acknowledged_and_writes_it_when_space_returns(tmpfs):
    config = ServeConfig(data_dir=tmpfs / "data", receivers=ReceiversConfig(grpc_endpoint=None,
                                                                            http_endpoint="127.0.0.1:0"),
                         assembler=AssemblerConfig(idle_timeout=0.2, grace=0.02))
    server = Server(config, quiet=True).start()
    ballast = tmpfs / "ballast"
    try:
        with open(ballast, "wb") as f:  # leave ~64 kB: a few sessions fit, then the disk is full
            free = subprocess.run(["df", "--output=avail", "-B1", str(tmpfs)], capture_output=True, text=True,
                                  check=True).stdout.split()[-1]
            f.write(b"\0" * max(0, int(free) - 64 * 1024))
        acknowledged, n = [], 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            n += 1
            status = _post(server.http_url, n)
            if status == 200:
                acknowledged.append(tid(n))
            elif status == 503:
                break
            time.sleep(0.05)
        assert status == 503, "the disk never filled"
        assert _healthz(server.http_url) == 503
        ballast.unlink()  # space returns
        deadline = time.monotonic() + 30
        while _healthz(server.http_url) != 200:
            assert time.monotonic() < deadline, "never recovered"
            time.sleep(0.1)
        assert _post(server.http_url, 10_000) == 200
        acknowledged.append(tid(10_000))
    finally:
        server.stop()
    written = {e["key"] for e in read_index(config.data_dir).entries}
    assert set(acknowledged) <= written, sorted(set(acknowledged) - written)


def _fill(disk) -> None:
    """Every byte of the tmpfs taken."""
    fd = os.open(disk / "ballast", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)


def test_started_on_a_full_disk_healthz_says_so_until_space_returns(tmpfs):
    """Started on a full disk, /healthz said 200 (a probe kept routing to it) while every export was refused
    (issue 31): it is degraded from the start, with the reason, and recovers once space returns."""
    (tmpfs / "data").mkdir()
    _fill(tmpfs)
    config = ServeConfig(data_dir=tmpfs / "data", receivers=ReceiversConfig(grpc_endpoint=None,
                                                                            http_endpoint="127.0.0.1:0"),
                         assembler=AssemblerConfig(idle_timeout=0.2, grace=0.02))
    server = Server(config, quiet=True).start()
    try:
        code, body = _health(server.http_url)
        assert code == 503 and "No space left on device" in body["reasons"]["segment log"], body
        assert _post(server.http_url, 1) == 503
        (tmpfs / "ballast").unlink()  # space returns: the next tick's probe says so
        deadline = time.monotonic() + 30
        while _healthz(server.http_url) != 200:
            assert time.monotonic() < deadline, "never recovered"
            time.sleep(0.05)
        assert _post(server.http_url, 2) == 200
    finally:
        server.stop()
    assert tid(2) in {e["key"] for e in read_index(config.data_dir).entries}
