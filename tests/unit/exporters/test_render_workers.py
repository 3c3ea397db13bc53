"""Rendering off the pipeline thread (exporters/render_pool.py) and sessions kept as records (render: flagged).

Real worker processes (forkserver), real producer fixtures, byte-for-byte comparisons with the in-process path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.livehelpers import assistant, chat, tid, user, weather_session
from tests.support.paths import PRODUCERS
from wt_otel.cli import main
from wt_otel.components import CompletedSession, IndexedSession
from wt_otel.exporters.datadir import DataDirStore, read_index
from wt_otel.exporters.rawfile import RAW_FILE, decode_records, encode_records
from wt_otel.ingest.dumps import LineError, read_dump
from wt_otel.ingest.sessions import attach_logs, build_session
from wt_otel.model.spans import SpanRefs
from wt_otel.serve.config import ServeConfig
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.server import build_pipeline

DUMPS = sorted(p for p in PRODUCERS.glob("*/*.jsonl") if p.parent.name != "_common")
FAULTS = "tests.support.render_faults:write_job"


@pytest.fixture
def fast_dir() -> Iterator[Path]:
    """Durable writes fsync every file: on tmpfs that is free, so the many data dirs below stay fast."""
    root = Path(tempfile.mkdtemp(prefix="wt-render-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def records(dump: Path) -> list:
    return [r for r in read_dump(dump) if not isinstance(r, LineError)]


def serve_dump(recs: list, out: Path, **datadir) -> Path:
    """The serve pipeline's stages (assembler, flagger, data dir) on one dump's records, then a clean stop."""
    datadir.setdefault("render", "all")
    pipe = build_pipeline(ServeConfig(data_dir=out, datadir=datadir), Metrics(), quiet=True, warn=lambda _m: None)
    pipe.head.consume(recs, time.time())
    pipe.flush()
    pipe.stop()
    return out


def session_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "sessions").rglob("*")) if p.is_file()}


def test_workers_write_the_same_bytes_as_the_pipeline_thread_for_every_producer(fast_dir):
    for dump in DUMPS:
        recs, name = records(dump), f"{dump.parent.name}-{dump.stem}"
        inline = session_files(serve_dump(recs, fast_dir / name / "inline", workers=0))
        pooled = session_files(serve_dump(recs, fast_dir / name / "pool", workers=2))
        assert inline and pooled == inline, name
        lines = read_index(fast_dir / name / "pool").entries
        assert lines and all(e["rendered"] for e in lines)


def test_records_round_trip_through_the_raw_file_for_every_producer():
    for dump in DUMPS:
        spans = attach_logs(records(dump))
        assert decode_records(encode_records(spans)) == spans, dump


def test_raw_file_is_what_wt_otel_import_reads(tmp_path):
    spans = attach_logs(weather_session(tid(1)))
    (tmp_path / RAW_FILE).write_bytes(encode_records(spans))
    res = CliRunner().invoke(main, ["import", str(tmp_path / RAW_FILE), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    env = json.loads(next((tmp_path / "out").glob("*/incident.wtin.json")).read_text())
    assert env["provenance"]["trace_ids"] == [tid(1)]


def test_render_on_demand_equals_the_inline_render_for_every_producer(fast_dir):
    for dump in DUMPS:
        recs, name = records(dump), f"{dump.parent.name}-{dump.stem}"
        inline = serve_dump(recs, fast_dir / name / "inline", workers=0)
        kept = serve_dump(recs, fast_dir / name / "kept", workers=2, render="flagged")
        index = read_index(kept).latest()
        unflagged = [e for e in index.values() if not e["flagged"]]
        assert all(e["rendered"] is False and e["files"] == [RAW_FILE, "session.json"] for e in unflagged), name
        assert all(e["rendered"] for e in index.values() if e["flagged"]), name
        res = CliRunner().invoke(main, ["sessions", "render", "--all", "--data-dir", str(kept)])
        assert res.exit_code == 0, res.output
        assert res.output.count("rendered ") == len(unflagged), res.output
        assert session_files(kept) == session_files(inline), name
        assert all(e["rendered"] for e in read_index(kept).latest().values())


def submit(store: DataDirStore, key: str, n: int) -> CompletedSession:
    spans = weather_session(tid(n))
    session = build_session(spans, key=key)
    session.conversation_id = key
    done = CompletedSession(session, spans)
    assert store.submit(done)
    return done


def test_a_worker_that_dies_costs_its_session_only(tmp_path):
    metrics = Metrics()
    store = DataDirStore(tmp_path, metrics, workers=1, worker_target=FAULTS)
    committed: list[str] = []
    store.on_committed = lambda done, written: committed.append(done.session.key)
    for n, key in enumerate(["first", "poison-pill", "broken-one", "after"], 1):
        submit(store, key, n)
    store.drain()
    store.close()
    assert committed == ["first", "after"]  # in order; the others never reach the stages after the store
    assert [e["key"] for e in read_index(tmp_path).entries] == ["first", "after"]
    reasons = {d.name.rsplit("-", 1)[0]: (d / "reason.txt").read_text() for d in (tmp_path / "quarantine").iterdir()}
    assert "render worker" in reasons["poison-pill"] and "exit code 3" in reasons["poison-pill"]
    assert "RuntimeError: cannot render broken-one" in reasons["broken-one"]
    for d in (tmp_path / "quarantine").iterdir():
        assert (d / "records.ndjson").read_text().count("\n") == 4  # the session's records are kept
    assert metrics.get("wt_otel_sessions_quarantined_total") == 2
    assert metrics.get("wt_otel_render_worker_restarts_total") == 1
    assert metrics.get("wt_otel_sessions_written_total") == 2


def test_a_worker_that_hangs_is_stopped_and_its_session_quarantined(tmp_path):
    store = DataDirStore(tmp_path, workers=1, worker_target=FAULTS, job_timeout=0.5)
    submit(store, "hang-forever", 1)
    submit(store, "fine", 2)
    store.drain(timeout=30)
    store.close()
    assert [e["key"] for e in read_index(tmp_path).entries] == ["fine"]
    [q] = (tmp_path / "quarantine").iterdir()
    assert "did not finish within 0.5 s" in (q / "reason.txt").read_text()


def test_a_worker_stopped_from_outside_hands_its_session_to_its_replacement(tmp_path):
    """SIGTERM to the whole process group (systemd at shutdown) is not the session's fault: no quarantine."""
    store = DataDirStore(tmp_path, workers=1, worker_target=FAULTS)
    submit(store, "slow-one", 1)
    [slot] = store._pool._slots
    deadline = time.monotonic() + 30
    while slot.busy is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(slot.process.pid, signal.SIGTERM)
    store.drain()
    store.close()
    assert [e["key"] for e in read_index(tmp_path).entries] == ["slow-one"]
    assert not (tmp_path / "quarantine").exists()


def test_index_lines_of_one_tick_are_one_commit_in_submission_order(tmp_path):
    metrics = Metrics()
    store = DataDirStore(tmp_path, metrics, workers=2)
    keys = [f"s{n}" for n in range(6)]
    for n, key in enumerate(keys):
        submit(store, key, n + 1)
    deadline = time.monotonic() + 60
    while any(j.state != "ok" for j in store._jobs.values()) and time.monotonic() < deadline:
        with store._lock:  # collect what the workers finished, commit nothing yet: as within one busy tick
            store._collect_locked(0.05)
    assert store.pump() == 0  # the tick: every finished job's line, one commit
    store.close()
    assert [e["key"] for e in read_index(tmp_path).entries] == keys
    assert metrics.get("wt_otel_index_commits_total") == 1


def test_revisions_of_one_session_are_written_in_order(tmp_path):
    store = DataDirStore(tmp_path, workers=2)
    spans = weather_session(tid(1))
    for complete in (False, True, False):
        session = build_session(spans, key="k")
        session.complete = complete
        assert store.submit(CompletedSession(session, spans))
    store.drain()
    store.close()
    entries = read_index(tmp_path).entries
    assert [e["revision"] for e in entries] == [1, 2, 3] and [e["complete"] for e in entries] == [False, True, False]
    env = json.loads((tmp_path / "sessions" / entries[0]["slug"] / "incident.wtin.json").read_text())
    assert env["provenance"]["complete"] is False  # the last revision's directory, not an earlier one


def test_a_late_flag_seen_by_serve_renders_the_kept_session(fast_dir):
    spans = weather_session(tid(7))
    pipe = build_pipeline(ServeConfig(data_dir=fast_dir, datadir={"render": "flagged"}), Metrics(), quiet=True)
    pipe.head.consume(spans, time.time())
    pipe.flush()
    pipe.store.drain()
    [entry] = read_index(fast_dir).entries
    assert entry["rendered"] is False and not entry["flagged"]
    late = weather_session(tid(7))[-1]
    late.span_id, late.parent_span_id = "00000000000000ff", spans[-1].span_id
    late.attributes["wt.incident"] = "INC-LATE"
    pipe.head.consume([late], time.time())
    pipe.flush()
    pipe.stop()
    latest = read_index(fast_dir).latest()[tid(7)]
    assert latest["rendered"] is True and latest["flagged"] and latest["revision"] == 2
    assert sorted(p.name for p in (fast_dir / latest["path"]).iterdir())[0] == "IMPORTED.md"
    assert not (fast_dir / latest["path"] / RAW_FILE).exists()


def kept_data_dir(root: Path) -> str:
    store = DataDirStore(root, render="flagged")
    written = store.write(build_session(weather_session(tid(3)), key=tid(3)), weather_session(tid(3)))
    store.close()
    assert written is not None and written.entry["rendered"] is False
    return written.slug


def test_flag_renders_a_kept_session(tmp_path):
    slug = kept_data_dir(tmp_path)
    res = CliRunner().invoke(main, ["flag", slug, "--ref", "INC-9", "--data-dir", str(tmp_path), "--no-queue"])
    assert res.exit_code == 0, res.output
    latest = read_index(tmp_path).latest()[tid(3)]
    assert latest["rendered"] and latest["flagged"] and latest["flag_ref"] == "INC-9" and latest["revision"] == 2
    env = json.loads((tmp_path / "sessions" / slug / "incident.wtin.json").read_text())
    assert env["source"]["ref"] == "INC-9" and "wt-otel flag" in env["source"]["flag"]


def test_a_flag_given_by_hand_holds_for_the_later_revisions(tmp_path):
    """`wt-otel flag`, then a restart and late spans of the same session: the next revision is the same
    incident (flagged, rendered), even with its key moved out of memory; serve no longer keeps it by reference."""
    slug = kept_data_dir(tmp_path)
    res = CliRunner().invoke(main, ["flag", slug, "--ref", "INC-9", "--data-dir", str(tmp_path), "--no-queue"])
    assert res.exit_code == 0, res.output
    late = [*weather_session(tid(3)), chat(tid(3), [user("and tomorrow?")], [assistant("Rain.")], start=6_000)]
    store = DataDirStore(tmp_path, render="flagged", keys_in_memory=16)  # a restart: the key table from the index
    try:
        for n in range(40, 80):  # other sessions push tid(3)'s key out of memory, into the key table's SQLite
            other = weather_session(tid(n))
            store.write(build_session(other, key=tid(n)), other)
        assert store.keep_indexed(IndexedSession(tid(3), [SpanRefs(tid(3), None, 0, [0, 1])], True)) is False
        assert store.keep_indexed(IndexedSession(tid(99), [SpanRefs(tid(99), None, 0, [0, 1])], True)) is True
        written = store.write(build_session(late, key=tid(3)), late)
    finally:
        store.close()
    assert written is not None and written.slug == slug
    latest = read_index(tmp_path).latest()[tid(3)]
    assert latest["revision"] == 3 and latest["flagged"] and latest["flag_ref"] == "INC-9" and latest["rendered"]
    assert "wt-otel flag" in latest["flag_reason"]
    env = json.loads((tmp_path / "sessions" / slug / "incident.wtin.json").read_text())
    assert env["source"]["ref"] == "INC-9" and "Rain." in json.dumps(env)
    assert read_index(tmp_path).latest()[tid(40)]["flagged"] is False  # the others are untouched


def test_a_flag_holds_for_the_next_revision_in_the_same_process(tmp_path):
    """Flagged and then revised by the same store (no restart in between: the key table, not the index read
    at start, remembers the flag)."""
    slug = kept_data_dir(tmp_path)
    late = [*weather_session(tid(3)), chat(tid(3), [user("and tomorrow?")], [assistant("Rain.")], start=6_000)]
    store = DataDirStore(tmp_path, render="flagged")
    try:
        store.flag(slug, ref="INC-7")
        written = store.write(build_session(late, key=tid(3)), late)
    finally:
        store.close()
    assert written is not None and written.entry["flagged"] and written.entry["flag_ref"] == "INC-7"
    latest = read_index(tmp_path).latest()[tid(3)]
    assert latest["revision"] == 3 and latest["rendered"] and latest["flag_ref"] == "INC-7"


@pytest.mark.parametrize("workers", [0, 1])
def test_a_session_rendered_on_demand_stays_rendered_for_its_later_revisions(tmp_path, workers):
    """`wt-otel sessions render KEY`, then late spans: the directory must not go on showing the older revision
    (kept by reference) nor fall back to records (kept as records); the next revision is rendered, with the
    new turn, even with the key moved out of memory by a restart; on the pipeline thread and in a worker."""
    slug = kept_data_dir(tmp_path)
    res = CliRunner().invoke(main, ["sessions", "render", slug, "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    late = [*weather_session(tid(3)), chat(tid(3), [user("and tomorrow?")], [assistant("Rain.")], start=6_000)]
    store = DataDirStore(tmp_path, render="flagged", keys_in_memory=16, workers=workers)
    try:
        for n in range(40, 80):  # other sessions push tid(3)'s key out of memory, into the key table's SQLite
            other = weather_session(tid(n))
            store.write(build_session(other, key=tid(n)), other)
        assert store.keep_indexed(IndexedSession(tid(3), [SpanRefs(tid(3), None, 0, [0, 1])], True)) is False
        if workers:
            assert store.submit(CompletedSession(build_session(late, key=tid(3)), late))
            store.drain()
        else:
            assert store.write(build_session(late, key=tid(3)), late) is not None
    finally:
        store.close()
    latest = read_index(tmp_path).latest()[tid(3)]
    assert latest["revision"] == 3 and latest["rendered"] and not latest["flagged"]
    env = json.loads((tmp_path / "sessions" / slug / "incident.wtin.json").read_text())
    assert "Rain." in json.dumps(env)
    assert not (tmp_path / "sessions" / slug / RAW_FILE).exists()
    assert read_index(tmp_path).latest()[tid(40)]["rendered"] is False  # the others are kept as before


def test_sessions_render_failure_paths(tmp_path):
    slug = kept_data_dir(tmp_path)
    run = CliRunner().invoke
    unknown = run(main, ["sessions", "render", "nope", "--data-dir", str(tmp_path)])
    assert unknown.exit_code == 2 and "no session 'nope'" in unknown.output
    neither = run(main, ["sessions", "render", "--data-dir", str(tmp_path)])
    assert neither.exit_code == 2 and "--all" in neither.output
    not_a_dir = run(main, ["sessions", "render", "--all", "--data-dir", str(tmp_path / "elsewhere")])
    assert not_a_dir.exit_code == 2 and "not a wt-otel data dir" in not_a_dir.output
    with DataDirStore(tmp_path):  # serve holds the data dir
        busy = run(main, ["sessions", "render", slug, "--data-dir", str(tmp_path)])
    assert busy.exit_code == 1 and "in use by another wt-otel process" in busy.output
    raw = tmp_path / "sessions" / slug / RAW_FILE
    raw.write_bytes(raw.read_bytes()[:-7])  # damaged records: said, exit 1, nothing else changes
    damaged = run(main, ["sessions", "render", "--all", "--data-dir", str(tmp_path)])
    assert damaged.exit_code == 1 and "cannot read its records" in damaged.output and "[1/1]" in damaged.output
    assert read_index(tmp_path).latest()[tid(3)]["rendered"] is False


def test_sessions_render_twice_is_harmless(tmp_path):
    slug = kept_data_dir(tmp_path)
    first = CliRunner().invoke(main, ["sessions", "render", slug, "--data-dir", str(tmp_path)])
    assert first.exit_code == 0 and "rendered" in first.output
    again = CliRunner().invoke(main, ["sessions", "render", tid(3), "--data-dir", str(tmp_path)])
    assert again.exit_code == 0 and "already rendered" in again.output
    nothing = CliRunner().invoke(main, ["sessions", "render", "--all", "--data-dir", str(tmp_path)])
    assert nothing.exit_code == 0 and "nothing to render" in nothing.output


def test_a_flagged_continuation_renders_the_part_it_continues(tmp_path):
    from wt_otel.components import StageContext
    from wt_otel.exporters.datadir import DataDirStage

    store = DataDirStore(tmp_path, render="flagged")
    stage = DataDirStage(store, StageContext(serve_config=None, metrics=Metrics(), quiet=True))
    first = weather_session(tid(4))
    stage.on_session(CompletedSession(build_session(first, key=tid(4)), first))
    assert read_index(tmp_path).latest()[tid(4)]["rendered"] is False
    late = weather_session(tid(4))
    late[-1].attributes["wt.incident"] = "INC-CONT"
    stage.on_session(CompletedSession(build_session(late, key=f"{tid(4)}~2"), late))
    store.close()
    latest = read_index(tmp_path).latest()
    assert latest[f"{tid(4)}~2"]["flagged"] and latest[f"{tid(4)}~2"]["rendered"]
    assert latest[tid(4)]["rendered"] is True and latest[tid(4)]["revision"] == 2
