"""The store's key table: recent keys in memory, the rest in SQLite, nothing lost either way."""

from __future__ import annotations

import logging
import tracemalloc

from wt_otel.exporters.session_keys import _UNION_MAX, INDEXED, RAW, RENDERED, SessionKeys, _Bloom


def fill(keys: SessionKeys, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        state = keys.add(f"key-{i}", f"slug-{i}")
        state.revision, state.kept = i % 3 + 1, (RENDERED, RAW, INDEXED)[i % 3]
        state.content, state.pos = f"digest-{i}", i * 10


def test_keys_leave_memory_and_come_back_whole() -> None:
    keys = SessionKeys(hot=16, rows_per_table=40)
    fill(keys, 200)
    assert len(keys._mem) <= 16 and len(keys._tables) > 3  # the rest went to SQLite, several generations
    for i in range(200):
        assert f"key-{i}" in keys
        state = keys.get(f"key-{i}")
        assert state is not None and (state.slug, state.revision, state.content, state.pos) == \
            (f"slug-{i}", i % 3 + 1, f"digest-{i}", i * 10)
        assert keys.key_of(f"slug-{i}") == f"key-{i}"
    assert "key-200" not in keys and keys.get("key-200") is None and keys.key_of("slug-200") is None
    # first-seen order survives the trips, and a change made in memory wins over the copy in SQLite
    keys.get("key-0").kept = RAW  # type: ignore[union-attr]
    assert list(keys.keys((RAW,))) == ["key-0", *(f"key-{i}" for i in range(1, 200) if i % 3 == 1)]
    assert list(keys.keys()) == [f"key-{i}" for i in range(200)]
    assert keys.slugs(3) == ["slug-0", "slug-1", "slug-10"]
    keys.close()


def test_a_slug_is_taken_by_a_key_in_memory_in_sqlite_or_a_name_on_disk() -> None:
    keys = SessionKeys(hot=16)
    fill(keys, 100)
    keys.reserve("on-disk")
    taken = keys.taken
    assert "slug-0" in taken and "slug-99" in taken and "on-disk" in taken
    assert "slug-100" not in taken and 7 not in taken
    keys.close()


def test_memory_stays_flat_however_many_keys() -> None:
    keys = SessionKeys(hot=256)
    fill(keys, 2_000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fill(keys, 8_000, start=2_000)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 8_000 * 40, grown  # in dicts the 8,000 keys would hold ~4 MB (~500 B each)
    assert keys.get("key-5") is not None and keys.get("key-9999") is not None
    keys.close()


def test_when_sqlite_cannot_take_them_the_keys_stay_in_memory(caplog) -> None:
    keys = SessionKeys(hot=16)
    fill(keys, 20)
    pages = keys._db.execute("PRAGMA page_count").fetchone()[0]
    keys._db.execute(f"PRAGMA max_page_count = {pages}")  # a full temporary directory: every write fails
    with caplog.at_level(logging.WARNING, logger="wt_otel.datadir"):
        fill(keys, 2_000, start=20)
    assert len(keys._mem) > 1_000 and sum("cannot move session keys out of memory" in r.message
                                          for r in caplog.records) == 1  # said once, not per key
    assert all(keys.get(f"key-{i}") is not None for i in range(2_020))
    keys._db.execute("PRAGMA max_page_count = 1073741823")  # space again: the next keys go out
    fill(keys, 3_000, start=2_020)
    assert len(keys._mem) <= 16 and keys.get("key-1500").slug == "slug-1500"  # type: ignore[union-attr]
    keys.close()


def test_a_key_that_leaves_memory_twice_is_read_back_as_its_latest_state() -> None:
    keys = SessionKeys(hot=16, rows_per_table=20)
    fill(keys, 100)
    old = keys.get("key-3")  # from an old generation, changed, then pushed out into a newer one
    assert old is not None and old.kept == RENDERED
    old.revision, old.kept, old.content = 9, INDEXED, "changed"
    fill(keys, 100, start=100)
    assert "key-3" not in keys._mem
    again = keys.get("key-3")
    assert again is not None and (again.revision, again.kept, again.content, again.slug) == (9, INDEXED, "changed",
                                                                                              "slug-3")
    assert keys.keys((INDEXED,)).count("key-3") == 1 and "key-3" in keys.keys((INDEXED,))
    assert "key-3" not in keys.keys((RENDERED,))
    keys.close()


def test_lookups_span_more_generations_than_one_statement_asks() -> None:
    """Past `_UNION_MAX` generation tables a lookup takes several statements; the newest row still wins, and
    keys and slugs in the oldest generations are found."""
    keys = SessionKeys(hot=16, rows_per_table=2)  # each spill (4 keys) begins a new generation table
    fill(keys, 2_000)
    assert len(keys._tables) > _UNION_MAX
    old = keys.get("key-0")  # from the oldest generation, changed, then pushed out into a new one
    assert old is not None and old.slug == "slug-0"
    old.revision, old.content = 42, "newest"
    fill(keys, 100, start=2_000)
    for i in (0, 1, 7, 1_000, 1_999, 2_099):
        assert f"key-{i}" in keys and keys.key_of(f"slug-{i}") == f"key-{i}"
    state = keys.get("key-0")
    assert state is not None and (state.revision, state.content) == (42, "newest")
    assert "key-2100" not in keys and keys.key_of("slug-2100") is None
    assert len(keys._sql) <= 2 * -(-len(keys._tables) // _UNION_MAX)  # only the statements of today's tables
    keys.close()


def test_the_bloom_filters_false_maybes_stay_rare_as_strings_outgrow_the_first_filter() -> None:
    """Every string added is found; unseen ones answer "maybe" rarely at 20x the first filter's capacity (one
    fixed filter then says "maybe" to most of them, and each "maybe" is a lookup in every generation)."""
    bloom = _Bloom(bits=1 << 12)  # the first filter takes 256 strings
    added = [f"key-{i}" for i in range(5_000)]
    for text in added:
        bloom.add(text)
    assert all(text in bloom for text in added)
    maybes = sum(f"other-{i}" in bloom for i in range(20_000))
    assert maybes < 20_000 * 0.03, maybes


def test_the_spill_over_lives_in_the_data_dir_replaces_a_crashs_leftover_and_goes_at_close(tmp_path) -> None:
    """On the data dir's own disk (never a memory-backed /tmp), derived state only: a file left by a crash is
    replaced, not read, and the file goes when the store closes."""
    from wt_otel.exporters.datadir import KEYS_DB, DataDirStore

    db = tmp_path / KEYS_DB
    db.write_bytes(b"not a database: left by a kill -9")
    store = DataDirStore(tmp_path, keys_in_memory=16)
    try:
        for i in range(100):
            store._keys.add(f"key-{i}", f"slug-{i}")
        assert db.stat().st_size > 0 and len(store._keys._tables) >= 1  # keys went out, into that file
        assert store._keys.get("key-0") is not None and store._keys.key_of("slug-3") == "key-3"
    finally:
        store.close()
    assert not db.exists()
