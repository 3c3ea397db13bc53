"""The one NDJSON journal behind the data-dir index, the replay queue and the run ledger."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from wt_otel._util.journal import Journal


def _needs_n(obj: object) -> dict:
    if not isinstance(obj, dict) or not isinstance(obj.get("n"), int):
        raise ValueError("needs an integer `n`")
    return obj


def test_append_and_read_round_trip_in_order(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "sub" / "j.ndjsonl")
    assert journal.read().records == []  # missing file: empty, not an error
    assert journal.append({"n": 1}) == 1
    assert journal.append([{"n": 2}, {"n": 3, "text": "two\nlines é"}]) == 2
    journal.close()
    read = journal.read(_needs_n)
    assert [r["n"] for r in read.records] == [1, 2, 3] and read.problems == [] and not read.torn
    assert read.records[2]["text"] == "two\nlines é"
    assert (tmp_path / "sub" / "j.ndjsonl").read_bytes().count(b"\n") == 3  # one line per record


def test_a_half_written_last_line_is_torn_reported_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "j.ndjsonl"
    journal = Journal(path)
    journal.append([{"n": 1}, {"n": 2}])
    with path.open("ab") as f:
        f.write(b'{"n": 3, "text": "cut sh')  # a kill mid-write
    read = journal.read(_needs_n)
    assert [r["n"] for r in read.records] == [1, 2] and read.torn
    assert len(read.problems) == 1 and read.problems[0].startswith("j.ndjsonl:3: torn last line")
    assert journal.repair() == len(b'{"n": 3, "text": "cut sh')
    assert path.read_bytes().endswith(b'{"n": 2}\n')
    read = journal.read(_needs_n)
    assert not read.torn and read.problems == [] and len(read.records) == 2
    assert journal.repair() == 0  # nothing left to repair


def test_the_next_append_after_a_torn_tail_starts_on_a_fresh_line(tmp_path: Path) -> None:
    path = tmp_path / "j.ndjsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2, "x"')
    journal = Journal(path, label="LABEL")
    journal.append({"n": 3})
    journal.close()
    read = journal.read(_needs_n, what="not a record")
    assert [r["n"] for r in read.records] == [1, 3] and not read.torn
    assert len(read.problems) == 1 and read.problems[0].startswith("LABEL:2: not a record, skipped:")


def test_a_whole_record_without_its_newline_is_kept_or_dropped_as_asked(tmp_path: Path) -> None:
    path = tmp_path / "j.ndjsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2}')
    kept = Journal(path).read(_needs_n)
    assert [r["n"] for r in kept.records] == [1, 2] and kept.torn and "kept, it parses" in kept.problems[0]
    dropped = Journal(path).read(_needs_n, keep_torn=False)
    assert [r["n"] for r in dropped.records] == [1] and dropped.torn and "dropped" in dropped.problems[0]


@pytest.mark.parametrize("garbage", [b"not json", b"[1, 2]", b'{"n": "x"}', b"\xff\xfe{", b'{"n": 1'])
def test_garbage_lines_mid_file_are_problems_never_fatal(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "j.ndjsonl"
    path.write_bytes(b'{"n": 1}\n' + garbage + b'\n\n{"n": 2}\n')
    read = Journal(path).read(_needs_n, what="not a record")
    assert [r["n"] for r in read.records] == [1, 2] and not read.torn  # the blank line is skipped silently
    assert len(read.problems) == 1 and read.problems[0].startswith("j.ndjsonl:2: not a record, skipped:")


def test_a_hostile_huge_problem_is_reported_short(tmp_path: Path) -> None:
    path = tmp_path / "j.ndjsonl"
    path.write_text(json.dumps({"m": "x" * 100_000}) + "\n")
    [problem] = Journal(path).read(_needs_n).problems
    assert len(problem) < 300


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.ndjsonl"
    writers, per = 4, 50

    def write(w: int) -> None:
        journal = Journal(path)  # each its own descriptor, as separate processes would have
        for i in range(per):
            journal.append({"n": w * 1000 + i, "pad": "y" * 2000})
        journal.close()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    read = Journal(path).read(_needs_n)
    assert read.problems == [] and len(read.records) == writers * per
    for w in range(writers):  # each writer's lines in its own order
        assert [r["n"] for r in read.records if r["n"] // 1000 == w] == [w * 1000 + i for i in range(per)]


def test_records_can_be_streamed_into_a_callback_instead_of_kept(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.ndjsonl")
    journal.append([{"n": i} for i in range(5)])
    journal.close()
    seen: list[tuple[int, int]] = []
    read = journal.read(_needs_n, into=lambda r, offset: seen.append((r["n"], offset)))
    assert [n for n, _ in seen] == [0, 1, 2, 3, 4] and read.records == [] and read.problems == []
    data = (tmp_path / "j.ndjsonl").read_bytes()
    assert all(json.loads(data[offset:data.index(b"\n", offset)]) == {"n": n} for n, offset in seen)


def test_a_torn_tail_longer_than_the_repair_window_is_cut_at_the_last_newline(tmp_path: Path) -> None:
    path = tmp_path / "j.ndjsonl"
    journal = Journal(path)
    journal.append({"n": 1})
    tail = b'{"n": 2, "text": "' + b"x" * 200_000  # cut short, three reads back to the newline
    with path.open("ab") as f:
        f.write(tail)
    assert journal.repair() == len(tail) and path.read_bytes() == b'{"n": 1}\n'
    path.write_bytes(b"no newline anywhere")
    assert journal.repair() == len(b"no newline anywhere") and path.read_bytes() == b""
