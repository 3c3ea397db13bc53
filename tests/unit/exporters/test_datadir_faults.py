"""Fault injection on the data-dir store (issue 13, items 1, 4, 7, 8): hostile values, a disk that
refuses writes, damaged entries at start-up, and the order of fsyncs against a power loss."""

from __future__ import annotations

import errno
import json
import os

import pytest

from tests.support.hostile import HUGE_INT_ARGS, SURROGATE_TEXT, genai_session, tid
from wt_otel._util import journal as journal_mod
from wt_otel.components import IndexedSession
from wt_otel.contracts import validate_data
from wt_otel.exporters import datadir as datadir_mod
from wt_otel.exporters.datadir import DataDirStore, read_index
from wt_otel.ingest.sessions import build_session
from wt_otel.model.spans import SpanRefs
from wt_otel.serve.metrics import Metrics


def _is_index(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith("sessions.ndjsonl")


def _session(n: int, **kw):
    return build_session(genai_session(tid(n), **kw), key=tid(n))


@pytest.mark.parametrize("args", [HUGE_INT_ARGS, '{"a": ' + "[" * 260 + "]" * 260 + "}",
                                  '{"x": "\\udc80"}'])
def test_values_no_encoder_accepts_are_kept_as_text_with_a_warning_naming_the_span(tmp_path, args):
    spans = genai_session(tid(1), args=args)
    tool_span = spans[1].span_id
    with DataDirStore(tmp_path) as store:
        written = store.write(build_session(spans, key=tid(1)), spans)
    assert written is not None
    env = json.loads((written.path / "incident.wtin.json").read_text())
    assert validate_data("envelope", env) == []
    assert any(tool_span in w and "kept as text" in w for w in env["warnings"]), env["warnings"]
    [call] = env["witnessed_calls"]
    if args == HUGE_INT_ARGS:  # lossless: the digits are all there
        assert call["args"] == {"account": "12345678901234567890123"}


def test_surrogates_in_the_reply_do_not_cost_the_session(tmp_path):
    with DataDirStore(tmp_path) as store:
        written = store.write(_session(1, reply=SURROGATE_TEXT))
    assert written is not None
    env = json.loads((written.path / "incident.wtin.json").read_text())
    assert any("lone surrogates" in w for w in env["warnings"])
    assert [e["key"] for e in read_index(tmp_path).entries] == [tid(1)]


def test_a_session_that_cannot_be_rendered_is_quarantined_with_its_records(tmp_path, monkeypatch, caplog):
    metrics = Metrics()
    bad, good = genai_session(tid(1)), genai_session(tid(2))

    def broken_render(session, slug, *a, **kw):
        if session.key == tid(1):
            raise TypeError("Integer exceeds 64-bit range")
        return real(session, slug, *a, **kw)

    real = datadir_mod.render
    monkeypatch.setattr(datadir_mod, "render", broken_render)
    with DataDirStore(tmp_path, metrics) as store:
        assert store.write(build_session(bad, key=tid(1)), bad) is None
        assert store.write(build_session(good, key=tid(2)), good) is not None  # nothing else affected
    [q] = (tmp_path / "quarantine").iterdir()
    assert "Integer exceeds 64-bit range" in (q / "reason.txt").read_text()
    records = [json.loads(line) for line in (q / "records.ndjson").read_text().splitlines()]
    assert {r["span_id"] for r in records} == {s.span_id for s in bad}
    assert "wt_otel_sessions_quarantined_total 1" in metrics.render()
    assert any("quarantined" in r.getMessage() for r in caplog.records)
    assert [e["key"] for e in read_index(tmp_path).entries] == [tid(2)]


def test_full_disk_defers_keeps_and_writes_when_space_returns(tmp_path):
    health: list[str | None] = []
    full = {"on": True}
    store = DataDirStore(tmp_path)
    store.on_health = health.append
    real = store.write_dir

    def disk(dest, files, **kw):
        if full["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
        return real(dest, files, **kw)

    store.write_dir = disk
    assert store.write(_session(1)) is None and store.write(_session(2)) is None
    assert store.deferred == 2 and health and "No space left" in health[0]
    assert not (tmp_path / "sessions" / tid(1)).exists() and read_index(tmp_path).entries == []
    assert store.retry_deferred() == 2  # still full: kept, in order
    full["on"] = False
    assert store.retry_deferred() == 0 and health[-1] is None
    assert [e["key"] for e in read_index(tmp_path).entries] == [tid(1), tid(2)]
    store.close()


def test_a_failed_index_append_is_cut_back_and_retried(tmp_path, monkeypatch):
    store = DataDirStore(tmp_path)
    store.write(_session(1))
    calls = {"n": 0}
    real_fsync = os.fsync

    def fsync(fd):
        if _is_index(fd) and calls["n"] == 0:
            calls["n"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(datadir_mod.os, "fsync", fsync)
    assert store.write(_session(2)) is None and store.deferred == 1
    assert store.retry_deferred() == 0
    index = read_index(tmp_path)
    assert index.problems == [] and [e["key"] for e in index.entries] == [tid(1), tid(2)]
    store.close()


def test_start_up_sets_aside_foreign_and_damaged_entries(tmp_path):
    stray = tmp_path / "sessions" / "stray"
    stray.mkdir(parents=True)
    (stray / "incident.wtin.json").write_text("[1,2]")
    (tmp_path / "sessions.ndjsonl").write_text(
        json.dumps({"v": 1, "key": "k1", "slug": "s1", "revision": "x"}) + "\n"
        + json.dumps({"v": 1, "key": "k2", "slug": "../etc", "revision": 1}) + "\n")
    with DataDirStore(tmp_path) as store:
        assert store.write(_session(1)) is not None
    notes = "\n".join(store.recovery)
    assert "sessions.ndjsonl:1: " in notes and "revision 'x' is not a positive integer" in notes
    assert "sessions.ndjsonl:2: " in notes and "slug '../etc' is not a safe directory name" in notes
    assert "sessions/stray: not a wt-otel session directory" in notes


def test_files_and_directory_are_fsynced_before_the_index_line(tmp_path, monkeypatch):
    store = DataDirStore(tmp_path)
    order: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename
    def fsync(fd):
        order.append("index" if _is_index(fd) else "fsync:" + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def rename(a, b):
        order.append(f"rename:{os.path.basename(b)}")
        return real_rename(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    written = store.write(_session(1))
    store.close()
    slug = written.slug
    rename_at = order.index(f"rename:{slug}")
    files_synced = {o.split(":", 1)[1] for o in order[:rename_at] if o.startswith("fsync:")}
    assert set(written.entry["files"]) <= files_synced  # every file, before the rename
    assert any(o.startswith("fsync:.") and o.endswith(".tmp") for o in order[:rename_at])  # the temp dir
    assert order[rename_at + 1] == "fsync:sessions"  # the parent, after the rename
    assert order[-1] == "index" and order.index("index") > rename_at + 1



def test_a_torn_batch_of_kept_sessions_lines_is_cut_back_and_their_offsets_stay_exact(tmp_path, monkeypatch, caplog):
    """A full disk in the middle of the tick's batch of index lines for sessions kept by reference: the torn
    line is cut off, the lines are appended whole on the next tick, and each is read back at the offset the
    key table noted (not found by reading the whole index through)."""
    store = DataDirStore(tmp_path, render="flagged")
    store.write(_session(1))
    before = (tmp_path / "sessions.ndjsonl").stat().st_size
    keys = [tid(n) for n in range(2, 5)]
    for n, key in enumerate(keys):
        assert store.keep_indexed(IndexedSession(key, [SpanRefs(key, None, 1000 + n, [0, 1, 2])], True))
    writes = {"n": 0}
    real_write = os.write

    def write(fd, data):
        if _is_index(fd):
            writes["n"] += 1
            if writes["n"] == 1:  # the batch (one write): half of it lands, mid-line, then the disk is full
                real_write(fd, bytes(data[: len(data) // 2]))
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(journal_mod.os, "write", write)
    with caplog.at_level("WARNING"):
        store.retry_deferred()
    assert "cannot append 3 index line(s)" in caplog.text
    assert (tmp_path / "sessions.ndjsonl").stat().st_size == before  # the torn batch is cut off
    monkeypatch.setattr(journal_mod.os, "write", real_write)
    store.retry_deferred()
    index = read_index(tmp_path)
    assert index.problems == [] and [e["key"] for e in index.entries] == [tid(1), *keys]
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert [store._indexed_line(key)["segments"] for key in keys] == [[[1000 + n, [0, 1, 2]]] for n in range(3)]
    assert "is not where it was" not in caplog.text
    store.close()
