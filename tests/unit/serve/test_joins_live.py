"""The join rule live (issue 29): serve joins traces as import does. Conversations that open alike stay apart;
a trace without an id whose history extends a written session exactly is that session's next revision.
Real `wt-otel serve` wiring (`Server`) over real OTLP/HTTP protobuf, kept by reference and rendered."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.conversations import FIRST_A, FIRST_Q, Scenario, Turn, lookalikes, texts
from wt_otel.exporters.datadir import read_index
from wt_otel.ingest.otlp_encode import traces_request
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.server import Server

N = 500


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="wt-joins-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def post(url: str, turns: list[Turn]) -> None:
    """As an OTLP exporter sends: a refusal with retry info (429/503: serve's backpressure) is sent again."""
    for i in range(0, len(turns), 50):
        body = traces_request([r for t in turns[i:i + 50] for r in t.records]).SerializeToString()
        req = urllib.request.Request(url + "/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"})
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    assert r.status == 200
                break
            except urllib.error.HTTPError as e:
                if e.code not in (429, 503) or time.monotonic() > deadline:
                    raise
                time.sleep(min(float(e.headers.get("Retry-After") or 1), 1.0))


def wait_written(server: Server, n: int) -> None:
    deadline = time.monotonic() + 60
    while server.metrics.get("wt_otel_sessions_written_total") < n:
        assert time.monotonic() < deadline, f"{server.metrics.get('wt_otel_sessions_written_total')} of {n} written"
        time.sleep(0.05)


def served(data_dir: Path, scenario: Scenario, render: str) -> dict[str, dict]:
    """Every first turn, written; then every second turn; the latest index line of each session key."""
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=data_dir, datadir={"render": render, "workers": 0},
                         assembler=AssemblerConfig(idle_timeout=600, grace=0.05))
    server = Server(config, quiet=True, warn=lambda _m: None).start()
    try:
        assert server.http_url
        post(server.http_url, scenario.first)
        wait_written(server, len(scenario.first))
        post(server.http_url, scenario.second)
        wait_written(server, len(scenario.first) + len(scenario.second))
    finally:
        server.stop()
    return {e["key"]: e for e in read_index(data_dir).entries}


def check_every_trace_once(latest: dict[str, dict], scenario: Scenario) -> None:
    seen = [t for e in latest.values() for t in e["trace_ids"]]
    assert sorted(seen) == sorted(t.trace_id for t in scenario.first + scenario.second)


def envelope(data_dir: Path, entry: dict) -> dict:
    return json.loads((data_dir / entry["path"] / "incident.wtin.json").read_text())


@pytest.mark.parametrize("render", ["flagged", "all"])
def test_conversations_with_ids_that_open_alike_stay_apart_live(fast_dir: Path, render: str) -> None:
    scenario = lookalikes(2 * N, continued=list(range(0, 2 * N, 2)), with_ids=True)
    latest = served(fast_dir, scenario, render)
    assert len(latest) == 2 * N
    check_every_trace_once(latest, scenario)
    for e in latest.values():
        c = int(e["conversation_id"].removeprefix("conv-"))
        assert len(e["trace_ids"]) == (2 if c % 2 == 0 else 1)
        if render == "all":
            own = [FIRST_Q, FIRST_A] + ([scenario.second_q[c], f"order {c} ships tomorrow"] if c % 2 == 0 else [])
            assert texts(envelope(fast_dir, e)) == own


@pytest.mark.parametrize("render", ["flagged", "all"])
def test_without_ids_n_one_turn_and_n_two_turn_conversations_are_2n_sessions_live(fast_dir: Path,
                                                                                   render: str) -> None:
    scenario = lookalikes(2 * N, continued=list(range(0, 2 * N, 2)), with_ids=False)
    latest = served(fast_dir, scenario, render)
    assert len(latest) == 2 * N
    check_every_trace_once(latest, scenario)
    two = [e for e in latest.values() if len(e["trace_ids"]) == 2]
    assert len(two) == N
    firsts = {t.trace_id for t in scenario.first}
    assert all(e["trace_ids"][0] in firsts and e["trace_ids"][1] not in firsts for e in two)
    if render == "all":
        for e in two:
            env = envelope(fast_dir, e)
            q = texts(env)[2]
            c = int(q.removeprefix("where is order ").removesuffix("?"))
            assert texts(env) == [FIRST_Q, FIRST_A, q, f"order {c} ships tomorrow"]
            assert env["provenance"]["joined_by"][-1].startswith("continuation:")


def test_a_span_link_joins_turns_that_share_no_history_live(fast_dir: Path) -> None:
    """The second turns resend nothing; each links to its first turn's trace: N sessions of two traces."""
    from tests.support.conversations import linked

    scenario = linked(N)
    latest = served(fast_dir, scenario, "all")
    assert len(latest) == N
    check_every_trace_once(latest, scenario)
    for e in latest.values():
        env = envelope(fast_dir, e)
        first, second = e["trace_ids"]
        c = int(second, 16) - N - 1
        assert texts(env) == [FIRST_Q, FIRST_A, f"where is order {c}?", f"order {c} ships tomorrow"]
        assert env["provenance"]["joined_by"][-1] == f"link:{second}"
