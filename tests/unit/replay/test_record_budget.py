"""Recording that cannot hurt (issue 30, item 2) and the model name normalised in record mode (item 11).

The real `openai` client talks through the real recording proxy to a fake provider. A run is written
once, when it ends within its budget; a run over budget has its next model call refused (400, never
retried by the SDK), says which budget stopped it, and leaves the cassette, ring buffer included, byte
for byte as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fake_openai
import openai
import pytest
from click.testing import CliRunner

from tests.support.llm_calls import ASK, CALLS, cassette
from tests.support.producers import CountingProvider  # (puts the fake provider on sys.path)
from tests.support.servers import StartedServers
from wt_otel.cli import main
from wt_otel.cli._record_options import ByteSize
from wt_otel.contracts.cassette import HISTORY_CAP, add_run, load_cassette
from wt_otel.replay.cassette_server import CassetteServer
from wt_otel.replay.model_apis._record import CallRecording
from wt_otel.replay.record_budget import RecordBudget
from wt_otel.replay.recorder import BUDGET_ERROR, RecordingProxy

QUESTION = [{"role": "user", "content": ASK}]


@pytest.fixture
def provider() -> Iterator[CountingProvider]:
    p = CountingProvider(lambda n: {"text": fake_openai.FIRST_ANSWER})
    yield p
    p.close()


@pytest.fixture
def full_baseline(tmp_path: Path) -> Path:
    """A cassette whose ring buffer is full: one more written run would evict the oldest."""
    data = cassette(CALLS)
    for n in range(1, HISTORY_CAP):
        add_run(data, {"trace_id": f"{n:032x}", "calls": CALLS})
    path = tmp_path / "llm.cassette.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    assert len(load_cassette(data).history_keys) == HISTORY_CAP
    return path


@pytest.fixture
def proxies() -> Iterator[StartedServers]:
    with StartedServers() as start:
        yield start


def ask(proxy: RecordingProxy, model: str = "gpt-4o-mini") -> str:
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-live")  # the SDK's default retries (2) stay on
    return client.chat.completions.create(model=model, messages=QUESTION).choices[0].message.content or ""


def test_the_call_over_budget_is_refused_named_and_the_full_ring_buffer_untouched(full_baseline, provider, proxies):
    before = full_baseline.read_bytes()
    proxy = proxies(RecordingProxy(provider.url, full_baseline, port=0, budget=RecordBudget(max_calls=3)))
    for _ in range(3):
        assert ask(proxy) == fake_openai.FIRST_ANSWER
    with pytest.raises(openai.BadRequestError) as refused:
        ask(proxy)
    assert refused.value.code == BUDGET_ERROR
    assert "--max-llm-calls 3 reached" in str(refused.value) and "call #4" in str(refused.value)
    assert provider.requests == 3, "the refused call never reached the provider, and was not retried"
    ended = proxy.end_run(keep=True)
    assert not ended.written and ended.calls == 3 and "--max-llm-calls 3" in (ended.stopped_by or "")
    assert "nothing written" in ended.describe() and "is unchanged" in ended.describe()
    assert full_baseline.read_bytes() == before, "no eviction, no rewrite"
    # the budget is per run: the next run starts afresh and, within budget, is written (evicting the oldest)
    ask(proxy)
    ended = proxy.end_run(keep=True)
    assert ended.written
    data = json.loads(full_baseline.read_text())
    assert data["latest_trace_id"] == ended.run and len(data["history_keys"]) == HISTORY_CAP


def test_the_bytes_budget_stops_a_run(tmp_path, provider, proxies):
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(provider.url, out, port=0, budget=RecordBudget(max_bytes=500)))
    ask(proxy)  # this call's record is over 500 bytes: the run is over budget from here on
    with pytest.raises(openai.BadRequestError, match="--max-bytes 500 exceeded"):
        ask(proxy)
    assert not proxy.end_run(keep=True).written and not out.exists()


def test_the_seconds_budget_counts_from_the_first_model_call(tmp_path, provider, proxies):
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(provider.url, out, port=0, budget=RecordBudget(max_seconds=0.3)))
    time.sleep(0.4)  # idle before the first call: not counted
    ask(proxy)
    time.sleep(0.4)
    with pytest.raises(openai.BadRequestError, match="--max-seconds 0.3 passed"):
        ask(proxy)
    assert not proxy.end_run(keep=True).written and not out.exists()


def test_a_stream_over_the_bytes_budget_is_cut_and_not_written(tmp_path, provider, proxies):
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(provider.url, out, port=0, budget=RecordBudget(max_bytes=300)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-live", max_retries=0)
    with pytest.raises(openai.APIConnectionError):  # the connection was cut mid-stream
        list(client.chat.completions.create(model="gpt-4o-mini", messages=QUESTION, stream=True))
    ended = proxy.end_run(keep=True)
    assert "--max-bytes 300" in (ended.stopped_by or "") and not ended.written and not out.exists()


def test_no_limit_when_zero() -> None:
    budget = RecordBudget(max_calls=0, max_seconds=0, max_bytes=0)
    assert budget.refuses_call(10**6, 1e9) is None and budget.over_bytes(10**12, 1) is None


def test_reset_ends_the_run_written_within_budget_dropped_over_it(tmp_path, provider, proxies):
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(provider.url, out, port=0, budget=RecordBudget(max_calls=1)))

    def reset() -> dict[str, Any]:
        request = urllib.request.Request(proxy.base_url.removesuffix("/v1") + "/wt/reset", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    ask(proxy)
    first = reset()["ended"]
    assert first["written"] and first["calls"] == 1
    written = out.read_bytes()
    ask(proxy)
    with pytest.raises(openai.BadRequestError):
        ask(proxy)
    second = reset()["ended"]
    assert not second["written"] and "--max-llm-calls 1" in second["stopped_by"]
    assert out.read_bytes() == written


def test_a_cassette_changed_under_the_recorder_into_a_bad_one_is_not_overwritten(tmp_path, provider, proxies):
    """The file is re-read at commit: one that another writer broke meanwhile is refused (500 at /wt/reset,
    the run not written) and left exactly as that writer left it."""
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(provider.url, out, port=0))
    ask(proxy)
    out.write_text('{"wt_cassette": 1, "traces": "not a map"}\n')
    broken = out.read_bytes()
    request = urllib.request.Request(proxy.base_url.removesuffix("/v1") + "/wt/reset", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 500
    body = json.loads(refused.value.read())
    assert body["ok"] is False and "the run was not written" in body["error"]
    assert out.read_bytes() == broken


def test_cli_cassette_record_says_which_budget_stopped_it_and_exits_1(tmp_path, provider):
    out = tmp_path / "llm.cassette.json"
    proc = subprocess.Popen([sys.executable, "-m", "wt_otel.cli", "cassette", "record", "--upstream", provider.url,
                             "--out", str(out), "--port", "0", "--max-llm-calls", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = next(word for word in proc.stdout.readline().split() if word.startswith("http://"))
        client = openai.OpenAI(base_url=url, api_key="sk-live")
        client.chat.completions.create(model="gpt-4o-mini", messages=QUESTION)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-4o-mini", messages=QUESTION)
    finally:
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 1, stderr
    assert "400 recording stopped: --max-llm-calls 1 reached" in stdout
    assert "recording stopped: --max-llm-calls 1" in stderr and "nothing written" in stderr
    assert not out.exists()


@pytest.mark.parametrize(("text", "want"), [("8388608", 8388608), ("8M", 8 << 20), ("8MiB", 8 << 20),
                                            ("512k", 512 << 10), ("0", 0)])
def test_byte_sizes(text: str, want: int) -> None:
    assert ByteSize().convert(text, None, None) == want


def test_a_bad_byte_size_is_a_usage_error(tmp_path) -> None:
    done = CliRunner().invoke(main, ["cassette", "record", "--upstream", "http://127.0.0.1:9/v1", "--out",
                                     str(tmp_path / "c.json"), "--max-bytes", "lots"])
    assert done.exit_code == 2 and "not a byte count" in done.output


def test_record_mode_stores_the_model_without_its_provider_prefix(tmp_path, provider, proxies):
    """As import does (contracts.cassette.split_model, the one normaliser); replay matches either spelling."""
    out = tmp_path / "c.json"
    proxy = proxies(RecordingProxy(provider.url, out, port=0))
    ask(proxy, model="openai/gpt-4o-mini")
    ask(proxy, model="meta-llama/Llama-3-8B")  # not a provider prefix: kept
    proxy.end_run(keep=True)
    calls = load_cassette(json.loads(out.read_text())).latest().llm_calls()
    assert [(c.request_context.model, c.request_context.provider) for c in calls] == [
        ("gpt-4o-mini", "openai"), ("meta-llama/Llama-3-8B", "openai")]
    replay = proxies(CassetteServer(out, port=0, match="exact"))  # type: ignore[arg-type]
    client = openai.OpenAI(base_url=replay.base_url, api_key="x", max_retries=0)
    for model in ("openai/gpt-4o-mini", "gpt-4o-mini"):
        client.chat.completions.create(model=model, messages=QUESTION)
    assert [e["match"] for e in replay.call_log()] == ["exact", "exact"]


def test_tool_calls_recorded_on_an_early_frame_move_to_the_terminal_frame() -> None:
    """A tool call that completes before later text (or another call a tick later) is still carried by the
    terminal frame (§2.2), so what record mode writes always passes validation."""
    rec = CallRecording({"model": "m", "messages": QUESTION}, "openai", tick_ms=10, stream=True)
    rec.chunk_seen(5.0)
    rec.tool_call(5.0, "call_a", "lookup", {"q": 1})
    rec.text(40.0, "checking")
    rec.tool_call(80.0, "call_b", "audit", "{}")
    call = rec.result(100.0)
    frames = call["response_timeline"]
    assert [f["tool_calls"] for f in frames[:-1]] == [[]] * (len(frames) - 1) and len(frames) == 3
    assert [c["id"] for c in frames[-1]["tool_calls"]] == ["call_a", "call_b"]
    assert frames[-1]["finish_reason"] == "tool_calls"
    load_cassette(cassette([call]))
