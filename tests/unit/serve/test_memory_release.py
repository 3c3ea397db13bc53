"""Memory given back (issue 31, item 5): compressed bodies that inflate past the cap are refused with a clear 413
without allocating what they inflate to (measured with tracemalloc: what Python allocated, never RSS or time), and
a written session is freed at once, not left for the cycle collector. RSS itself: bench/rss_gzip.py."""

from __future__ import annotations

import gc
import time
import tracemalloc
import urllib.error
import urllib.request
import zlib

import pytest

from tests.support.hostile import genai_session, tid, to_request
from tests.support.receivers import HttpReceivers
from wt_otel.components import CompletedSession
from wt_otel.exporters.datadir import read_index
from wt_otel.serve.config import AssemblerConfig, DataDirConfig, ServeConfig
from wt_otel.serve.receivers import ReceiversConfig
from wt_otel.serve.receivers.common import TooLarge, decompress_capped
from wt_otel.serve.server import Server

MiB = 1024 * 1024
CAP = MiB


def _gzip_of_zeros(n: int) -> bytes:
    """A gzip member of `n` zero bytes, compressed a MiB at a time (this process never holds them)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = bytes(MiB)
    return b"".join([*(z.compress(chunk) for _ in range(n // MiB)), z.flush()])


BOMB = _gzip_of_zeros(64 * MiB)  # ~64 KB that inflate to 64 MiB


def _peak_while(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("trailer", [None, 100], ids=["true-trailer", "lying-trailer"])
def test_a_gzip_bomb_is_cut_at_the_cap_while_inflating(trailer):
    """The cap is enforced while inflating (a gzip trailer's size is not trusted: a corrupt body would say anything)."""
    bomb = BOMB if trailer is None else BOMB[:-4] + trailer.to_bytes(4, "little")

    def inflate() -> None:
        with pytest.raises(TooLarge, match="inflates beyond the 1048576-byte limit"):
            decompress_capped(bomb, "gzip", CAP)

    assert _peak_while(inflate) < 4 * CAP  # never the 64 MiB it inflates to


def test_over_http_the_bomb_gets_413_naming_the_setting():
    made = HttpReceivers()
    receivers, _, _ = made.start(max_message_bytes=CAP, max_decompressed_bytes=CAP)
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{receivers.http_port}/v1/traces", data=BOMB,
                                     headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code == 413 and b"max_decompressed_bytes" in info.value.read()
    finally:
        made.stop()


def test_a_session_written_by_a_render_worker_is_freed_without_the_cycle_collector(tmp_path):
    """`done.resume` (a partial holding `done`) made every session a render worker wrote a reference cycle: its
    records stayed until a full collection, which serve's GC tuning makes rare."""
    config = ServeConfig(data_dir=tmp_path / "data", receivers=ReceiversConfig(grpc_endpoint=None,
                                                                               http_endpoint="127.0.0.1:0"),
                         assembler=AssemblerConfig(idle_timeout=0.2, grace=0.02),
                         datadir=DataDirConfig(render="all", workers=1))
    server = Server(config, quiet=True).start()
    gc.collect()
    gc.disable()
    try:
        req = urllib.request.Request(server.http_url + "/v1/traces",
                                     data=to_request(genai_session(tid(1))).SerializeToString(),
                                     headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        deadline = time.monotonic() + 30
        while tid(1) not in {e["key"] for e in read_index(config.data_dir).entries}:
            assert time.monotonic() < deadline, "never written"
            time.sleep(0.05)
        time.sleep(0.2)  # the stages after the store ran (resume)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [o for o in gc.garbage if isinstance(o, CompletedSession)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        server.stop()
    assert cyclic == []
