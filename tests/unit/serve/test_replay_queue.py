"""The replay queue's file after a crash: a torn tail is dropped and truncated, a garbage line is reported."""

from __future__ import annotations

from pathlib import Path

from wt_otel.serve.replay_queue import QUEUE_FILE, ReplayQueue, read_events


def test_a_torn_tail_is_dropped_truncated_and_the_queue_resumes(tmp_path: Path) -> None:
    queue = ReplayQueue(tmp_path)
    first = queue.enqueue("INC-1", "sessions/inc-1")
    queue.enqueue("INC-2", "sessions/inc-2")
    queue.close()
    path = tmp_path / QUEUE_FILE
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"v": 1, "event": "started", "job": "' + first.id.encode())  # kill -9 mid-write
    events, problems, torn = read_events(path)
    assert torn and len(events) == 2 and "torn last line" in problems[0]

    queue = ReplayQueue(tmp_path)
    assert any("torn last line" in note for note in queue.recovery)
    assert path.read_bytes() == whole  # truncated back to the last whole line
    assert [j.state for j in queue.jobs.values()] == ["pending", "pending"]  # the torn `started` never happened
    job = queue.take(timeout=0)
    assert job is not None and job.ref == "INC-1"
    queue.close()
    events, problems, torn = read_events(path)
    assert not torn and problems == [] and [e["event"] for e in events] == ["enqueued", "enqueued", "started"]


def test_garbage_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    queue = ReplayQueue(tmp_path)
    queue.enqueue("INC-1", "sessions/inc-1")
    queue.close()
    path = tmp_path / QUEUE_FILE
    with path.open("ab") as f:
        f.write(b'not json\n["a list"]\n{"no_event": 1}\n')
    queue = ReplayQueue(tmp_path)
    assert len(queue.recovery) == 3 and all("not a queue event" in note for note in queue.recovery)
    assert [j.ref for j in queue.jobs.values()] == ["INC-1"]
    queue.enqueue("INC-2", "sessions/inc-2")  # appends after the garbage, on its own line
    queue.close()
    events, problems, _ = read_events(path)
    assert [e.get("ref") for e in events] == ["INC-1", "INC-2"] and len(problems) == 3


def test_a_closed_queue_refuses_to_write(tmp_path: Path) -> None:
    queue = ReplayQueue(tmp_path)
    job = queue.enqueue("INC-1", "sessions/inc-1")
    queue.close()
    assert queue.finish(job, "PASS") is False  # nothing written after close
    events, _, _ = read_events(tmp_path / QUEUE_FILE)
    assert [e["event"] for e in events] == ["enqueued"]
