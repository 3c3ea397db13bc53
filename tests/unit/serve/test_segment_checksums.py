"""Issue 31 item 7: a corrupt frame length in the newest segment was taken for a torn tail, and every later
acknowledged frame was cut with a log line saying "never acknowledged". Segments (format 2) now carry a CRC-32
per frame: a bad frame in the middle is skipped and reported, the frames after it are kept; a torn tail is still
cut and called what it is; format-1 segments (no header) are read as before. Real files, real `SegmentLog`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wt_otel.serve.segments import HEADER_FRAME, SEGMENTS, TRAILER, SegmentLog, read_entry, split

REQUESTS = [bytes([n]) * (200 + n) for n in range(1, 5)]  # four acknowledged "requests"


def _written(tmp_path: Path) -> tuple[Path, list[int]]:
    log = SegmentLog(tmp_path)
    positions = []
    for data in REQUESTS:
        ticket = log.append("traces", data)
        log.wait(ticket)
        positions.append(ticket.pos)
    log.close()
    [path] = [p for p in (tmp_path / SEGMENTS).glob("*.traces.pb") if p.stat().st_size]
    return path, positions


def _replayed(tmp_path: Path) -> tuple[list[bytes], list[str], SegmentLog]:
    log = SegmentLog(tmp_path)
    return [data for _, _, data in log.replay()], log.recovery, log


def test_frames_are_checksummed_behind_a_format_header(tmp_path):
    path, positions = _written(tmp_path)
    raw = path.read_bytes()
    assert raw.startswith(HEADER_FRAME)
    assert len(raw) == len(HEADER_FRAME) + sum(4 + len(d) + TRAILER for d in REQUESTS)
    assert [read_entry(tmp_path / SEGMENTS, p) for p in positions] == REQUESTS  # the message, without its trailer


@pytest.mark.parametrize("damage", ["length", "payload"])
def test_a_corrupt_frame_in_the_newest_segment_is_skipped_and_the_later_ones_kept(tmp_path, damage):
    path, positions = _written(tmp_path)
    second = split(positions[1])[2]
    raw = bytearray(path.read_bytes())
    if damage == "length":
        raw[second:second + 4] = (2**31).to_bytes(4, "big")  # past MAX_FRAME: read as a torn tail before
    else:
        raw[second + 10] ^= 0xFF  # the checksum no longer matches
    path.write_bytes(bytes(raw))
    replayed, recovery, log = _replayed(tmp_path)
    try:
        assert replayed == [REQUESTS[0], REQUESTS[2], REQUESTS[3]]
        assert path.stat().st_size == len(raw)  # nothing cut
        [said] = [note for note in recovery if path.name in note]
        assert f"bytes {second}-{split(positions[2])[2]}" in said and "2 frame(s) after it are kept" in said
        assert "never acknowledged" not in said
        assert log.metrics.get("wt_otel_segment_corrupt_frames_total") == 1
        assert log.metrics.get("wt_otel_segment_torn_tails_total") == 0
        with pytest.raises(ValueError, match="checksum|no whole entry"):
            read_entry(tmp_path / SEGMENTS, positions[1])
    finally:
        log.close()


def test_a_torn_tail_is_still_cut_and_called_unacknowledged(tmp_path):
    path, _ = _written(tmp_path)
    whole = path.stat().st_size
    with open(path, "ab") as f:  # killed mid-append: a length and part of a frame
        f.write((500 + TRAILER).to_bytes(4, "big") + b"x" * 100)
    replayed, recovery, log = _replayed(tmp_path)
    try:
        assert replayed == REQUESTS and path.stat().st_size == whole
        assert any("cut 104 bytes of a torn last frame" in n and "never acknowledged" in n for n in recovery)
    finally:
        log.close()


def test_a_format_1_segment_is_read_as_before(tmp_path):
    directory = tmp_path / SEGMENTS
    directory.mkdir()
    path = directory / "000000000001.traces.pb"
    path.write_bytes(b"".join(len(d).to_bytes(4, "big") + d for d in REQUESTS) + b"\x00\x00\x01")
    replayed, recovery, log = _replayed(tmp_path)
    try:
        assert replayed == REQUESTS
        assert any("cut 3 bytes of a torn last frame" in n for n in recovery)
        assert read_entry(directory, (1 << 41) | 0) == REQUESTS[0]
    finally:
        log.close()


def test_a_whole_last_frame_that_fails_its_checksum_is_cut_and_called_damage(tmp_path):
    path, positions = _written(tmp_path)
    last = split(positions[3])[2]
    raw = bytearray(path.read_bytes())
    raw[last + 10] ^= 0xFF  # written whole (its length covers the rest of the file), then damaged on disk
    path.write_bytes(bytes(raw))
    replayed, recovery, log = _replayed(tmp_path)
    try:
        assert replayed == REQUESTS[:3] and path.stat().st_size == last
        [said] = [note for note in recovery if path.name in note]
        assert f"cut {len(raw) - last} bytes of a last frame that does not match its checksum" in said, said
        assert "never acknowledged" not in said
        assert log.metrics.get("wt_otel_segment_corrupt_frames_total") == 0
    finally:
        log.close()


def test_space_is_reserved_ahead_of_appends_and_given_back_when_the_file_closes(tmp_path):
    """Appends go into space allocated ahead (the size says only what was written); rotation and a start after
    a kill give back what was reserved and not written, and the frames read back as they were."""
    from wt_otel._util import fsutil

    log = SegmentLog(tmp_path, segment_bytes=1 << 30)
    body = b"\x0a\x00" * 1000
    log.wait(log.append("traces", body))
    path = next((tmp_path / SEGMENTS).glob("*.traces.pb"))
    size, allocated = path.stat().st_size, path.stat().st_blocks * 512
    assert size == len(HEADER_FRAME) + 4 + len(body) + TRAILER  # only what was written
    probe = os.open(tmp_path / "probe", os.O_WRONLY | os.O_CREAT)
    try:
        if not fsutil.reserve(probe, 0, 4096):
            pytest.skip("this system cannot reserve space (fallocate with FALLOC_FL_KEEP_SIZE)")
    finally:
        os.close(probe)
    assert allocated >= size + 1024 * 1024  # reserved ahead
    ticket = log.append("traces", body)
    log.wait(ticket)
    assert read_entry(tmp_path / SEGMENTS, ticket.pos) == body
    pos = ticket.pos
    del log  # killed: nothing closed, the reservation left behind
    again = SegmentLog(tmp_path)  # the start gives it back and keeps every frame
    assert path.stat().st_blocks * 512 < size * 2 + 64 * 1024
    assert read_entry(tmp_path / SEGMENTS, pos) == body
    again.wait(again.append("traces", body))
    again.close()  # closing the generation gives back its reservation too
    newest = max((tmp_path / SEGMENTS).glob("*.traces.pb"))
    assert newest.stat().st_blocks * 512 < newest.stat().st_size + 64 * 1024
