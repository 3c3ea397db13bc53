"""Sessions kept by reference (issue 15, item 2): with `datadir.render: flagged` and its segment log, serve
indexes an unflagged session's spans where they lie in the log instead of decoding and building it; a
flagged one is decoded and rendered as before; `wt-otel sessions render` renders a kept one later, with the
very bytes the inline render writes. Real `wt-otel serve` wiring (`Server`) over real OTLP/HTTP protobuf."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.livehelpers import tid, weather_session
from tests.support.paths import PRODUCERS
from wt_otel.cli import main
from wt_otel.components import IndexedSession
from wt_otel.exporters.datadir import DataDirStore, read_index
from wt_otel.ingest import spanindex
from wt_otel.ingest.dumps import LineError, read_dump
from wt_otel.ingest.otlp_encode import logs_request, traces_request
from wt_otel.model.spans import LogRecord, SpanRecord
from wt_otel.serve.config import AssemblerConfig, ReceiversConfig, ServeConfig
from wt_otel.serve.server import MAX_NAMED_SERVICES, OTHER_SERVICES, Server

DUMPS = sorted(p for p in PRODUCERS.glob("*/*.jsonl") if p.parent.name != "_common")


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="wt-byref-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def post(url: str, path: str, body: bytes) -> int:
    req = urllib.request.Request(url + path, data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def serve(data_dir: Path, spans: list[SpanRecord], logs: list[LogRecord] = (), render: str = "flagged",  # type: ignore[assignment]
          late_window: float = 300, **durability) -> Server:
    """A real serve on `data_dir`: the spans (then the logs) as OTLP/HTTP protobuf, then a clean stop."""
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=data_dir, datadir={"render": render, "workers": 0},
                         assembler=AssemblerConfig(idle_timeout=600, late_window=late_window), durability=durability)
    server = Server(config, quiet=True, warn=lambda _m: None).start()
    try:
        assert server.http_url
        if spans:
            assert post(server.http_url, "/v1/traces", traces_request(spans).SerializeToString()) == 200
        if logs:
            assert post(server.http_url, "/v1/logs", logs_request(logs).SerializeToString()) == 200
    finally:
        server.stop()  # writes every open session
    return server


def session_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "sessions").rglob("*")) if p.is_file()}


def render_all(data_dir: Path) -> str:
    res = CliRunner().invoke(main, ["sessions", "render", "--all", "--data-dir", str(data_dir)])
    assert res.exit_code == 0, res.output
    return res.output


def test_unflagged_sessions_are_indexed_by_reference_and_flagged_ones_rendered(fast_dir: Path) -> None:
    plain, incident = weather_session(tid(1)), weather_session(tid(2))
    incident[0].attributes["wt.incident"] = "INC-7"
    server = serve(fast_dir, plain + incident)
    latest = read_index(fast_dir).latest()
    kept, flagged = latest[tid(1)], latest[tid(2)]
    assert kept["rendered"] is False and kept["path"] is None and kept["files"] == []
    assert kept["trace_ids"] == [tid(1)] and kept["spans"] == len(plain)
    assert [len(ordinals) for _, ordinals in kept["segments"]] == [len(plain)]
    assert not (fast_dir / "sessions" / kept["slug"]).exists()  # nothing rendered, nothing decoded
    assert flagged["rendered"] is True and flagged["flagged"] and flagged["flag_ref"] == "INC-7"
    assert (fast_dir / flagged["path"] / "incident.wtin.json").is_file()
    assert server.metrics.get("wt_otel_sessions_kept_unrendered_total") == 1


def test_render_on_demand_equals_the_inline_render_for_every_producer(fast_dir: Path) -> None:
    """Every producer fixture, through serve twice: `render: all` and by reference then `sessions render --all`.
    Sessions with log records (events-mode producers) are decoded as before; the files must be the same bytes."""
    kept_any = 0
    for dump in DUMPS:
        recs = [r for r in read_dump(dump) if not isinstance(r, LineError)]
        spans = [r for r in recs if isinstance(r, SpanRecord)]
        logs = [r for r in recs if isinstance(r, LogRecord)]
        name = f"{dump.parent.name}-{dump.stem}"
        inline, kept = fast_dir / name / "inline", fast_dir / name / "kept"
        serve(inline, spans, logs, render="all")
        serve(kept, spans, logs)
        kept_any += sum(e.get("segments") is not None for e in read_index(kept).entries)
        render_all(kept)
        assert session_files(kept) == session_files(inline), name
        assert all(e["rendered"] for e in read_index(kept).latest().values()), name
    assert kept_any >= len(DUMPS) // 2  # most fixtures have no log records: kept by reference, not decoded


def test_a_restart_keeps_the_segments_of_kept_sessions_and_renders_them(fast_dir: Path) -> None:
    serve(fast_dir, weather_session(tid(3)))
    serve(fast_dir, weather_session(tid(4)))  # a second run: the first run's generation is below the checkpoint
    assert len(list((fast_dir / "segments").glob("*.traces.pb"))) == 2
    out = render_all(fast_dir)
    assert out.count("rendered ") == 2, out
    latest = read_index(fast_dir).latest()
    assert all(latest[t]["rendered"] and latest[t]["revision"] == 2 for t in (tid(3), tid(4)))


def test_a_kept_session_is_read_back_from_its_own_index_line_or_found_when_that_moved(fast_dir: Path,
                                                                                     caplog) -> None:
    serve(fast_dir, weather_session(tid(12)) + weather_session(tid(13)))
    with caplog.at_level(logging.WARNING, logger="wt_otel.datadir"), DataDirStore(fast_dir, render="flagged") as store:
        assert store.render(tid(12)) is not None  # at the offset the key table noted when reading the index
    assert "not where it was" not in caplog.text
    index = fast_dir / "sessions.ndjsonl"
    index.write_bytes(b'{"v": 1, "key": "other", "slug": "other", "revision": 1, "rendered": true}\n'
                      + index.read_bytes())  # every line moves after the store has read where they are
    with caplog.at_level(logging.WARNING, logger="wt_otel.datadir"), DataDirStore(fast_dir, render="flagged") as store:
        index.write_bytes(index.read_bytes().split(b"\n", 1)[1])  # the first line goes again: offsets are off
        written = store.render(tid(13))
    assert written is not None and written.entry["rendered"] and (written.path / "incident.wtin.json").is_file()
    assert "not where it was; reading the index through" in caplog.text


def test_a_session_whose_segment_is_gone_says_so(fast_dir: Path) -> None:
    serve(fast_dir, weather_session(tid(5)))
    for p in (fast_dir / "segments").glob("*.traces.pb"):
        p.unlink()
    res = CliRunner().invoke(main, ["sessions", "render", "--all", "--data-dir", str(fast_dir)])
    assert res.exit_code == 1
    assert "is gone" in res.output and "retain_age" in res.output, res.output
    assert read_index(fast_dir).latest()[tid(5)]["rendered"] is False  # nothing else changed


def test_a_session_whose_segment_entry_is_cut_short_says_so(fast_dir: Path) -> None:
    """A damaged segment (cut inside the entry a kept session points into): said, exit 1, nothing changed."""
    serve(fast_dir, weather_session(tid(11)))
    [segment] = (fast_dir / "segments").glob("*.traces.pb")
    segment.write_bytes(segment.read_bytes()[:-9])
    res = CliRunner().invoke(main, ["sessions", "render", "--all", "--data-dir", str(fast_dir)])
    assert res.exit_code == 1
    assert "ends inside the entry" in res.output, res.output
    assert read_index(fast_dir).latest()[tid(11)]["rendered"] is False


def test_without_retention_segments_go_once_written(fast_dir: Path) -> None:
    """retain_age 0: a generation goes once nothing needs it (no open session, no late-span window)."""
    serve(fast_dir, weather_session(tid(6)), late_window=0, retain_age=0)
    serve(fast_dir, weather_session(tid(7)), late_window=0, retain_age=0)
    assert list((fast_dir / "segments").glob("*.traces.pb")) == []
    kept = serve(fast_dir, weather_session(tid(9)), late_window=0)  # the default keeps them for on-demand renders
    assert len(list((fast_dir / "segments").glob("*.traces.pb"))) == 1
    assert kept.metrics.get("wt_otel_sessions_kept_unrendered_total") == 1


def test_a_late_flag_renders_the_session_kept_by_reference(fast_dir: Path) -> None:
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=fast_dir, datadir={"render": "flagged", "workers": 0},
                         assembler=AssemblerConfig(idle_timeout=0.2, grace=0.1))
    server = Server(config, quiet=True, warn=lambda _m: None).start()
    try:
        assert server.http_url
        spans = weather_session(tid(8))
        assert post(server.http_url, "/v1/traces", traces_request(spans).SerializeToString()) == 200
        deadline = time.monotonic() + 20
        while tid(8) not in read_index(fast_dir).latest() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert read_index(fast_dir).latest()[tid(8)]["rendered"] is False
        late = weather_session(tid(8))[-1]
        late.span_id, late.parent_span_id = "00000000000000ff", spans[-1].span_id
        late.attributes["wt.incident"] = "INC-LATE"
        assert post(server.http_url, "/v1/traces", traces_request([late]).SerializeToString()) == 200
        while not read_index(fast_dir).latest()[tid(8)]["rendered"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.store is not None  # the live store knows it is rendered now: nothing left to render
        assert server.store.render(tid(8)) is None and tid(8) not in server.store.unrendered()
    finally:
        server.stop()
    latest = read_index(fast_dir).latest()[tid(8)]
    assert latest["rendered"] and latest["flagged"] and latest["flag_ref"] == "INC-LATE" and latest["revision"] == 2


def test_a_custom_flag_rule_keeps_every_session_decoded(fast_dir: Path) -> None:
    """A rule on a key the span index does not report: serve cannot tell unflagged sessions without decoding
    them, so it does not keep any by reference (and says why in its log)."""
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=fast_dir, datadir={"render": "flagged", "workers": 0},
                         flagger={"rules": [{"name": "vip", "keys": ["app.customer.tier"], "match": "equals",
                                             "value": "vip"}]})
    server = Server(config, quiet=True, warn=lambda _m: None).start()
    try:
        assert server.pipeline is not None and server.pipeline.by_reference is False
        assert server.stages is not None
        assert "'vip'" in (server.stages.by_reference_blocker() or "")
    finally:
        server.stop()


def test_a_request_the_index_accepts_but_protobuf_refuses_is_refused_not_kept(fast_dir: Path) -> None:
    """Invalid UTF-8 in a string the span index skips (a span name): the request must not be acknowledged and
    then be impossible to render; it is refused as malformed, as without the index."""
    spans = weather_session(tid(10))
    spans[1].name = "chat MARKER"
    body = traces_request(spans).SerializeToString().replace(b"chat MARKER", b"chat \xff\xfeRKER")
    assert len(spanindex.scan(body)) == len(spans)  # the index reads it: only the full parse says no
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=fast_dir, datadir={"workers": 0})
    server = Server(config, quiet=True, warn=lambda _m: None).start()
    try:
        assert server.http_url and server.pipeline is not None and server.pipeline.by_reference
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(server.http_url, "/v1/traces", body)
        assert refused.value.code == 400
    finally:
        server.stop()
    assert read_index(fast_dir).entries == []


def no_content_traces(service: str, n: int) -> bytes:
    """`n` agent runs as the official openai-v2 instrumentation emits them by default (no message content),
    encoded by the OTLP exporter's own encoder."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.openai_v2")
    agent = {"gen_ai.operation.name": "invoke_agent"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 12}
    for _ in range(n):
        with tracer.start_as_current_span("invoke_agent order-bot", attributes=agent), \
                tracer.start_as_current_span("chat gpt-4o-mini", attributes=chat):
            pass
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def test_content_capture_off_is_still_said_when_sessions_are_kept_by_reference(fast_dir: Path) -> None:
    """Kept sessions are never built, but the first one is probed: a service recording no content is told once."""
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=fast_dir, datadir={"workers": 0})
    warnings: list[str] = []
    server = Server(config, quiet=True, warn=warnings.append).start()
    try:
        assert server.http_url and server.pipeline is not None and server.pipeline.by_reference
        assert post(server.http_url, "/v1/traces", no_content_traces("order-bot", 3)) == 200
    finally:
        server.stop()
    assert all(e["rendered"] is False for e in read_index(fast_dir).entries)  # kept, not rendered
    assert len(read_index(fast_dir).entries) == 3
    said = [w for w in warnings if "records no message content" in w]
    assert len(said) == 1 and "order-bot" in said[0], warnings
    assert server.metrics.get("wt_otel_sessions_without_content_total", service="order-bot") == 1  # probed: one


def serve_services_without_content(data_dir: Path, services: list[str]) -> tuple[Server, list[str]]:
    """One session without message content per service, every session built (`render: all`): the stopped
    server and the warnings it said."""
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=data_dir, datadir={"workers": 0, "render": "all"})
    warnings: list[str] = []
    server = Server(config, quiet=True, warn=warnings.append).start()
    try:
        assert server.http_url
        for name in services:
            assert post(server.http_url, "/v1/traces", no_content_traces(name, 1)) == 200
    finally:
        server.stop()
    return server, warnings


def test_service_names_without_content_are_bounded_in_metrics_and_log(fast_dir: Path) -> None:
    """`service.name` is trace content: a producer that puts an id in it (150 services here) gets 100 named
    in /metrics and the log, the rest counted together and said once."""
    server, warnings = serve_services_without_content(fast_dir, [f"order-bot-{n}" for n in range(150)])
    assert len(read_index(fast_dir).entries) == 150
    named = [w for w in warnings if "records no message content" in w]
    assert len(named) == MAX_NAMED_SERVICES and sum("more than 100 services" in w for w in warnings) == 1
    series = [line for line in server.metrics.render().splitlines()
              if line.startswith("wt_otel_sessions_without_content_total{")]
    assert len(series) == MAX_NAMED_SERVICES + 1
    assert server.metrics.get("wt_otel_sessions_without_content_total", service=OTHER_SERVICES) == 50


def test_a_service_named_like_the_overflow_label_does_not_silence_the_overflow(fast_dir: Path) -> None:
    """A hostile `service.name` of "(other services)" among the first hundred: the overflow is still said."""
    names = [OTHER_SERVICES, *(f"order-bot-{n}" for n in range(MAX_NAMED_SERVICES))]
    _, warnings = serve_services_without_content(fast_dir, names)
    assert sum(f"more than {MAX_NAMED_SERVICES} services" in w for w in warnings) == 1


@pytest.mark.parametrize(("interval", "probes"), [(60.0, 1), (0.0, 3)])
def test_probes_are_one_in_probe_every_and_at_most_one_per_interval(fast_dir: Path, interval: float,
                                                                     probes: int) -> None:
    """Three sessions kept by reference with `probe_every` 1: each probed without an interval, only the first
    within one (a probe reads its whole request back: at 10k sessions a second they cost ~2% of the GIL)."""
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=fast_dir, datadir={"workers": 0})
    server = Server(config, quiet=True).start()
    built: list[str] = []
    try:
        stages = server.stages
        assert stages is not None and server.http_url
        stages.probe_every, stages.probe_interval = 1, interval
        probe = stages._probe  # noqa: SLF001 - counted, then run as it is

        def counted(indexed: IndexedSession) -> None:
            built.append(indexed.key)
            probe(indexed)

        stages._probe = counted  # type: ignore[method-assign]
        assert post(server.http_url, "/v1/traces", no_content_traces("order-bot", 3)) == 200
    finally:
        server.stop()
    assert len(read_index(fast_dir).entries) == 3 and len(built) == probes


def test_the_record_bound_splits_a_run_of_refs_exactly(fast_dir: Path) -> None:
    """One request holds a session of 7 spans, kept by reference as one run; `max_records_per_session` 3
    cuts it into 3 + 3 + 1 spans (the first the session, the others its continuations), every span once."""
    spans = weather_session(tid(12)) + weather_session(tid(12))[:3]
    for n, span in enumerate(spans[4:], 1):  # three more spans of the same trace, new ids
        span.span_id = f"{n:016x}"
    config = ServeConfig(receivers=ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"),
                         data_dir=fast_dir, datadir={"render": "flagged", "workers": 0},
                         assembler=AssemblerConfig(idle_timeout=600, max_records_per_session=3))
    server = Server(config, quiet=True, warn=lambda _m: None).start()
    try:
        assert server.http_url
        assert post(server.http_url, "/v1/traces", traces_request(spans).SerializeToString()) == 200
    finally:
        server.stop()
    entries = [e for e in read_index(fast_dir).entries if e.get("segments") is not None]
    assert [e["spans"] for e in entries] == [3, 3, 1]
    assert [e["key"] for e in entries] == [tid(12), f"{tid(12)}~2", f"{tid(12)}~3"]
    ordinals = [n for e in entries for _, ns in e["segments"] for n in ns]
    assert ordinals == list(range(7))  # wire order, each span in exactly one session
    assert server.metrics.get("wt_otel_sessions_flushed_incomplete_total", reason="max_records_per_session") == 2


def test_a_one_run_session_is_indexed_as_the_general_path_indexes_it(tmp_path: Path) -> None:
    """`keep_indexed` takes a shortcut for the common session of one run; its line (the segments, their digest,
    the ids) is the one the general path writes for the same spans, split into runs of the same request and
    given in either order, so a restart's dedupe and `sessions render` see no difference."""
    from wt_otel.components import IndexedSession
    from wt_otel.model.spans import SpanRefs

    key, pos = "ab" * 16, 2199024420988
    whole = SpanRefs(key, "conv-7", pos, [3, 4, 7, 9], ((3, "invoke_agent"),))
    head, tail = whole.split(2)
    lines = []
    for n, refs in enumerate(([whole], [head, tail], [tail, head])):
        store = DataDirStore(tmp_path / str(n), render="flagged")
        try:
            assert store.keep_indexed(IndexedSession(key, refs, True))
            store.retry_deferred()  # the tick: the pending line is appended
        finally:
            store.close()
        [line] = read_index(tmp_path / str(n)).entries
        lines.append({k: v for k, v in line.items() if k != "written_at"})
    assert lines[0] == lines[1] == lines[2]
    assert lines[0]["segments"] == [[pos, [3, 4, 7, 9]]] and lines[0]["trace_ids"] == [key]
    assert lines[0]["conversation_id"] == "conv-7" and lines[0]["spans"] == 4


def test_index_lines_waiting_for_the_tick_hold_their_own_size(tmp_path: Path) -> None:
    """Lines of sessions kept by reference wait for the tick's one write; at volume that is thousands. orjson's
    output lives in a buffer of >= 4 KiB (8 KiB for a ~550-byte line), so each line is kept as a copy of its
    size: ~2 KB a pending session in all (its line, the line's fields), not ~10 KB."""
    import tracemalloc

    from wt_otel.components import IndexedSession
    from wt_otel.model.spans import SpanRefs

    store = DataDirStore(tmp_path, render="flagged")
    sessions = [IndexedSession(f"{n:032x}", [SpanRefs(f"{n:032x}", f"conv-{n}", 1000 + n, list(range(10)))], True)
                for n in range(500)]
    try:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for indexed in sessions:
            assert store.keep_indexed(indexed)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        store.close()
    assert held < 500 * 4096, f"{held / 500:.0f} bytes per pending session"


def _drop_oldest_generation(data_dir: Path) -> None:
    """What `durability.retain_age` / `retain_bytes` do to the oldest generation."""
    files = sorted((data_dir / "segments").glob("*.pb"))
    oldest = files[0].name.split(".")[0]
    for p in files:
        if p.name.startswith(oldest):
            p.unlink()


def test_a_start_moves_the_lines_of_sessions_whose_segments_are_gone_to_the_archive(fast_dir: Path, monkeypatch,
                                                                                   caplog) -> None:
    """The index follows the segments' retention: a kept session whose spans are gone can never be rendered,
    so a serve start moves its lines to sessions.archive.ndjsonl (when they are at least half the index), and
    what each start reads stops growing forever. Nothing else moves; the kept sessions left render."""
    monkeypatch.setattr("wt_otel.exporters.datadir.ARCHIVE_MIN_LINES", 1)
    serve(fast_dir, weather_session(tid(20)) + weather_session(tid(21)))
    flagged = CliRunner().invoke(main, ["flag", tid(21), "--data-dir", str(fast_dir), "--no-queue"])
    assert flagged.exit_code == 0, flagged.output  # rendered as revision 2: its directory is the data now
    serve(fast_dir, weather_session(tid(22)))
    _drop_oldest_generation(fast_dir)  # tid 20 and 21's spans
    index = fast_dir / "sessions.ndjsonl"
    index.write_bytes(index.read_bytes() + b"not an index line\n")
    before = {k: e for k, e in read_index(fast_dir).latest().items()}
    (fast_dir / "sessions.archive.ndjsonl").write_bytes(b'{"torn by a full disk')  # ours start on a new line
    incident = weather_session(tid(23))
    incident[0].attributes["wt.incident"] = "INC-9"
    server = serve(fast_dir, incident)
    assert any("moved 2 line(s) of sessions kept by reference" in r for r in server.recovery), server.recovery
    left = read_index(fast_dir)
    assert set(left.latest()) == {tid(21), tid(22), tid(23)}
    assert left.latest()[tid(22)] == before[tid(22)]
    assert left.latest()[tid(21)] == before[tid(21)] and before[tid(21)]["rendered"]  # only its revision 1 moved
    assert any("not an index entry" in p for p in left.problems)  # a line it cannot read stays where it was
    torn, *lines = (fast_dir / "sessions.archive.ndjsonl").read_text().splitlines()
    archived = [json.loads(line) for line in lines]
    assert torn == '{"torn by a full disk'
    assert [(e["key"], e["revision"]) for e in archived] == [(tid(20), 1), (tid(21), 1)]
    assert archived[0] == before[tid(20)]  # the very line, moved
    assert not list(fast_dir.glob(".sessions.ndjsonl.*"))

    with caplog.at_level(logging.WARNING, logger="wt_otel.datadir"):
        out = render_all(fast_dir)  # the kept session left is read back at its new offset
    assert "rendered " in out and read_index(fast_dir).latest()[tid(22)]["rendered"] is True
    assert "not where it was" not in caplog.text
    res = CliRunner().invoke(main, ["sessions", "render", tid(20), "--data-dir", str(fast_dir)])
    assert res.exit_code == 2
    assert "sessions.archive.ndjsonl" in res.output and "retain_age" in res.output, res.output


def test_a_start_moves_nothing_while_the_gone_lines_are_few(fast_dir: Path) -> None:
    """Below the threshold (10,000 lines, and half the index) the index is not rewritten at every start."""
    serve(fast_dir, weather_session(tid(24)))
    serve(fast_dir, weather_session(tid(25)))
    _drop_oldest_generation(fast_dir)
    (fast_dir / ".sessions.ndjsonl.compact").write_bytes(b"left by a start killed while archiving\n")
    before = (fast_dir / "sessions.ndjsonl").read_bytes()
    serve(fast_dir, [])
    assert (fast_dir / "sessions.ndjsonl").read_bytes() == before
    assert not (fast_dir / "sessions.archive.ndjsonl").exists()
    assert not (fast_dir / ".sessions.ndjsonl.compact").exists()
    res = CliRunner().invoke(main, ["sessions", "render", tid(24), "--data-dir", str(fast_dir)])
    assert res.exit_code == 1 and "is gone" in res.output, res.output


def test_an_archiving_start_that_cannot_replace_the_index_leaves_it_whole(fast_dir: Path, monkeypatch) -> None:
    """The archive is written first, the index replaced last: a failure in between (a full disk, a kill)
    leaves every line in the index (at worst twice, once in the archive), and the next start moves them."""
    monkeypatch.setattr("wt_otel.exporters.datadir.ARCHIVE_MIN_LINES", 1)
    serve(fast_dir, weather_session(tid(26)))
    serve(fast_dir, weather_session(tid(27)))
    _drop_oldest_generation(fast_dir)
    before = (fast_dir / "sessions.ndjsonl").read_bytes()

    def full(*_args) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr("os.replace", full)
        with DataDirStore(fast_dir, render="flagged", archive_gone=True) as store:
            assert any("cannot move" in r and "stays whole" in r for r in store.recovery), store.recovery
    assert (fast_dir / "sessions.ndjsonl").read_bytes() == before
    assert not list(fast_dir.glob(".sessions.ndjsonl.*"))
    with DataDirStore(fast_dir, render="flagged", archive_gone=True) as store:
        assert store.unrendered() == [tid(27)], store.recovery
    assert set(read_index(fast_dir).latest()) == {tid(27)}
    archived = (fast_dir / "sessions.archive.ndjsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in archived] == [tid(26), tid(26)]


@pytest.mark.parametrize("command", [["flag", "{key}", "--no-queue"], ["sessions", "render", "{key}"]])
def test_a_kept_session_rendered_by_hand_is_not_written_again_by_the_next_start(fast_dir: Path,
                                                                               command: list[str]) -> None:
    """A restart replays the records of sessions still in their late-span window. A kept session rendered (or
    flagged) by hand meanwhile is the same records: its new revision says so (content, segment_pos), so the
    replay recognises it instead of writing its spans again as a continuation `KEY~2`."""
    serve(fast_dir, weather_session(tid(30)))
    res = CliRunner().invoke(main, [a.format(key=tid(30)) for a in command] + ["--data-dir", str(fast_dir)])
    assert res.exit_code == 0, res.output
    rendered = read_index(fast_dir).latest()[tid(30)]
    assert rendered["rendered"] is True and rendered["revision"] == 2
    server = serve(fast_dir, [])
    assert any("replayed" in r for r in server.recovery), server.recovery  # its records were replayed
    latest = read_index(fast_dir).latest()
    assert set(latest) == {tid(30)}, sorted(latest)
    assert latest[tid(30)] == rendered


def test_a_data_dir_without_its_segments_directory_archives_nothing(fast_dir: Path, monkeypatch) -> None:
    """A data dir copied or restored without `segments/` is not retention at work: every kept session's line
    stays in the index (rendering one says its segment is gone), none is moved to the archive."""
    monkeypatch.setattr("wt_otel.exporters.datadir.ARCHIVE_MIN_LINES", 1)
    serve(fast_dir, weather_session(tid(40)) + weather_session(tid(41)))
    before = (fast_dir / "sessions.ndjsonl").read_bytes()
    shutil.rmtree(fast_dir / "segments")
    with DataDirStore(fast_dir, render="flagged", archive_gone=True) as store:
        assert not any("moved" in r for r in store.recovery), store.recovery
        assert sorted(store.unrendered()) == [tid(40), tid(41)]
    assert (fast_dir / "sessions.ndjsonl").read_bytes() == before
    assert not (fast_dir / "sessions.archive.ndjsonl").exists()


@pytest.mark.parametrize("digest", ["current", "legacy"])
def test_a_restart_finds_a_kept_session_unchanged_whichever_digest_its_line_holds(fast_dir: Path, digest: str) -> None:
    """The replay after a restart recognises a kept session by the digest of its segments in its index line;
    lines written before the digest changed (sha256 of the repr) must still match, or an upgrade would write
    one more revision of every session still in its late-span window."""
    import hashlib

    serve(fast_dir, weather_session(tid(31)))
    index = fast_dir / "sessions.ndjsonl"
    [line] = [json.loads(raw) for raw in index.read_bytes().splitlines()]
    if digest == "legacy":
        line["content"] = hashlib.sha256(repr(sorted(line["segments"])).encode()).hexdigest()[:32]
        index.write_bytes(json.dumps(line).encode() + b"\n")
    server = serve(fast_dir, [])
    assert any("replayed" in r for r in server.recovery), server.recovery
    assert server.metrics.get("wt_otel_sessions_unchanged_total") == 1
    assert [e["revision"] for e in read_index(fast_dir).entries] == [1]
    other = line["content"].replace(line["content"][0], "0" if line["content"][0] != "0" else "1")
    line["content"] = other  # neither digest: the replay writes the spans again, as a new revision
    index.write_bytes(json.dumps(line).encode() + b"\n")
    serve(fast_dir, [])
    assert [e["revision"] for e in read_index(fast_dir).entries] == [1, 2]
