"""The data-dir store: layout, index, revisions, slugs across restarts, crash leftovers."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.livehelpers import tid, weather_session
from wt_otel.contracts import validate_data
from wt_otel.exporters.datadir import DataDirLocked, DataDirStore, read_index
from wt_otel.ingest.sessions import build_session

FILES = ["IMPORTED.md", "fixture.universe.json", "incident.wtin.json", "llm.cassette.json", "scenario.yaml",
         "scorer.py"]


def session(n: int, **root_attrs):
    spans = weather_session(tid(n))
    spans[-1].attributes.update(root_attrs)
    return build_session(spans)


def test_layout_index_and_valid_files(tmp_path):
    with DataDirStore(tmp_path) as store:
        written = store.write(session(1, **{"wt.incident": "INC-5"}))
    assert written.path == tmp_path / "sessions" / "inc-5" and written.revision == 1
    assert sorted(p.name for p in written.path.iterdir()) == FILES
    [entry] = read_index(tmp_path).entries
    assert entry["key"] == tid(1) and entry["flagged"] and entry["flag_ref"] == "INC-5"
    assert entry["path"] == "sessions/inc-5" and entry["files"] == FILES and entry["complete"]
    assert entry["started"].endswith("Z") and entry["service"] == "live-agent" and entry["trace_ids"] == [tid(1)]
    env = json.loads((written.path / "incident.wtin.json").read_text())
    assert validate_data("envelope", env) == []


def test_revisions_replace_the_directory_and_append_to_the_index(tmp_path):
    store = DataDirStore(tmp_path)
    s = session(1)
    first = store.write(s)
    s.complete = False
    second = store.write(s)
    assert second.revision == 2 and second.slug == first.slug and second.path == first.path
    lines = read_index(tmp_path).entries
    assert [e["revision"] for e in lines] == [1, 2] and not lines[1]["complete"]
    env = json.loads((second.path / "incident.wtin.json").read_text())
    assert env["provenance"]["complete"] is False
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == [first.slug]


def test_slugs_are_unique_and_stable_across_restarts(tmp_path):
    store = DataDirStore(tmp_path)
    a, b = session(1, **{"gen_ai.conversation.id": "same"}), session(2, **{"gen_ai.conversation.id": "same"})
    a.conversation_id = b.conversation_id = "same"
    slug_a, slug_b = store.write(a).slug, store.write(b).slug
    assert slug_a == "same" and slug_b.startswith("same-") and slug_a != slug_b
    store.close()
    store = DataDirStore(tmp_path)  # restart: the map comes back from the index
    assert store.has_key(tid(2))
    again = store.write(b)
    assert again.slug == slug_b and again.revision == 2
    c = session(3)
    c.conversation_id = "same"
    assert store.write(c).slug not in (slug_a, slug_b)


def test_one_process_per_data_dir(tmp_path):
    store = DataDirStore(tmp_path)
    with pytest.raises(DataDirLocked, match="in use"):
        DataDirStore(tmp_path)
    store.close()
    DataDirStore(tmp_path).close()


def test_torn_last_line_is_reported_and_repaired_and_the_directory_reindexed(tmp_path):
    store = DataDirStore(tmp_path)
    store.write(session(1))
    w2 = store.write(session(2))
    store.close()
    index = tmp_path / "sessions.ndjsonl"
    data = index.read_bytes()
    index.write_bytes(data[:-40])  # kill -9 in the middle of the second line
    read = read_index(tmp_path)
    assert read.torn_tail and len(read.entries) == 1 and "torn last line" in read.problems[0]
    store = DataDirStore(tmp_path)
    assert any("torn" in note for note in store.recovery)
    assert any("re-indexed" in note for note in store.recovery)
    read = read_index(tmp_path)
    assert read.problems == [] and [e["slug"] for e in read.entries] == [read.entries[0]["slug"], w2.slug]
    assert read.entries[1]["recovered"] and store.has_key(tid(2))


def test_index_lines_the_fast_parser_refuses_are_read_as_the_stdlib_reads_them(tmp_path):
    """The index is parsed with orjson, and with the stdlib where orjson refuses: a line with a NaN or a lone
    surrogate (a hand-edited index, an older writer) is read as before; one that is not JSON is reported."""
    store = DataDirStore(tmp_path)
    w = store.write(session(1))
    store.close()
    index = tmp_path / "sessions.ndjsonl"
    lines = [b'{"key": "nan-key", "slug": "nan-key", "revision": 1, "score": NaN}\n',
             b'{"key": "lone-\\ud800", "slug": "lone", "revision": 1}\n',
             b'{"key": "broken", "slug"\n',
             b'{"key": "bad-utf8-\xff", "slug": "bad", "revision": 1}\n']
    index.write_bytes(index.read_bytes() + b"".join(lines))
    read = read_index(tmp_path)
    assert [e["key"] for e in read.entries] == [tid(1), "nan-key", "lone-\ud800"]
    assert read.entries[1]["score"] != read.entries[1]["score"]  # NaN, as json.loads reads it
    assert len(read.problems) == 2 and all("not an index entry" in p for p in read.problems), read.problems
    store = DataDirStore(tmp_path)
    try:
        assert store.has_key("nan-key") and store.has_key("lone-\ud800") and store.has_key(tid(1))
        assert not store.has_key("broken") and w.slug == read.entries[0]["slug"]
    finally:
        store.close()


def test_crash_leftovers_are_cleaned_and_a_mid_swap_revision_is_restored(tmp_path):
    store = DataDirStore(tmp_path)
    w = store.write(session(1))
    store.close()
    sessions = tmp_path / "sessions"
    half = sessions / f".{w.slug}.abc123.tmp"  # a revision being built
    half.mkdir()
    (half / "incident.wtin.json").write_text("{")
    old = sessions / f".{w.slug}.def456.old"  # killed between the two renames of a replacement
    old.mkdir()
    os.rename(w.path, old / "d")
    store = DataDirStore(tmp_path)
    assert sorted(p.name for p in sessions.iterdir()) == [w.slug]
    assert sorted(p.name for p in w.path.iterdir()) == FILES
    assert read_index(tmp_path).problems == []


def test_keys_out_of_memory_keep_their_slugs_revisions_and_kind_across_restarts(tmp_path):
    """The key table holds 16 keys in memory here; the other sessions' keys live in SQLite and must work alike."""
    def kept(n: int):  # with its records: kept as records, not rendered
        spans = weather_session(tid(n))
        return build_session(spans), spans

    store = DataDirStore(tmp_path, render="flagged", keys_in_memory=16)
    first = [store.write(*kept(n)) for n in range(1, 41)]
    assert all(store.has_key(tid(n)) for n in range(1, 41)) and not store.has_key(tid(41))
    assert store.unrendered() == [tid(n) for n in range(1, 41)]  # kept as records, in index order
    assert store.resolve(first[0].slug) == (tid(1), first[0].slug)
    again = store.write(*kept(1))  # long out of memory: its next revision, in its own directory
    assert (again.slug, again.revision) == (first[0].slug, 2)
    rendered = store.render(first[1].slug)
    assert rendered is not None and rendered.revision == 2 and store.render(first[1].slug) is None
    store.close()
    store = DataDirStore(tmp_path, render="flagged", keys_in_memory=16)  # rebuilt from the index, streamed
    assert store.unrendered() == [tid(1), *(tid(n) for n in range(3, 41))]
    late = store.write(*kept(3))
    assert (late.slug, late.revision) == (first[2].slug, 2)
    flagged = store.flag(first[3].slug, ref="INC-9")
    assert flagged.slug == first[3].slug and flagged.revision == 2 and flagged.entry["flagged"]
    with pytest.raises(ValueError, match="no session 'nope'"):
        store.resolve("nope")
    c, spans = kept(41)
    c.conversation_id = first[5].slug  # a slug only SQLite knows is taken
    assert store.write(c, spans).slug not in {w.slug for w in first}
    store.close()
