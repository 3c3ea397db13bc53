"""The two-pass, multi-process import writes byte for byte what the single-process import writes.

The reference is the single-process path (`_import_serial`, SessionGrouper's spill: the import as it
was), reached through a sink that only has `write()`. Every file of every scenario, the report
(errors, warnings, counts, the order of the written directories) and --force, --strict, --trace-id
and --flagged-only are compared, with --jobs 1 and with worker processes.
"""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.importdump import as_proto, write_dump
from tests.support.paths import PRODUCERS, ROOT
from wt_otel.cli import main
from wt_otel.exporters.scenario_dir import ScenarioDirWriter
from wt_otel.ingest.dumps import read_dump
from wt_otel.ingest.importer import ImportAborted, ImportReport, import_dumps
from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord


class WriteOnlySink:
    """A sink with only `write()`: the importer takes the single-process path, the reference."""

    def __init__(self, out: Path, force: bool = False) -> None:
        self._writer = ScenarioDirWriter(out, force=force)

    def write(self, session: Session, slug: str) -> Path:
        return self._writer.write(session, slug)


def tree(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def view(report: ImportReport, out: Path) -> dict[str, Any]:
    return {"records": report.records, "sessions": report.sessions, "skipped": report.skipped,
            "empty": report.empty, "errors": [e.replace(str(out), "OUT") for e in report.errors],
            "warnings": report.warnings, "why_none": report.why_none,
            "written": [str(p.relative_to(out)) for p in report.written]}


def reference(paths: list[Path], out: Path, **kw: Any) -> tuple[dict[str, Any], dict[str, bytes]]:
    report = import_dumps(paths, WriteOnlySink(out, force=kw.pop("force", False)), **kw)
    return view(report, out), tree(out)


def parallel(paths: list[Path], out: Path, **kw: Any) -> tuple[dict[str, Any], dict[str, bytes]]:
    report = import_dumps(paths, ScenarioDirWriter(out, force=kw.pop("force", False)), **kw)
    assert not out.exists() or not [p for p in out.iterdir() if p.name.startswith(".")], "staging directory left"
    return view(report, out), tree(out)


def same(a: tuple[dict[str, Any], dict[str, bytes]], b: tuple[dict[str, Any], dict[str, bytes]]) -> None:
    assert a[0] == b[0]
    assert sorted(a[1]) == sorted(b[1])
    differ = [name for name in a[1] if a[1][name] != b[1][name]]
    assert not differ, differ[:5]


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], tuple[dict[str, Any], dict[str, bytes]]]:
    """1,000 generated sessions over three files, and what the single-process import makes of them."""
    folder = tmp_path_factory.mktemp("dump")
    paths = write_dump(folder, sessions=1000)
    return paths, reference(paths, tmp_path_factory.mktemp("reference"))


def test_the_generated_dump_has_what_makes_import_hard(big):
    report, files = big[1]
    assert report["sessions"] >= 1000 and report["errors"] and report["empty"] == 0
    assert any(w.startswith("INC-") for w in report["warnings"])
    written = report["written"]
    assert any(w.startswith("inc-") for w in written), "flagged sessions are named by their incident"
    assert any(len(w.rsplit("-", 1)[-1]) == 8 for w in written), "colliding slugs get a hash"
    assert any(not w.startswith(("inc-", "conv-")) for w in written), "sessions without a conversation id"
    assert len(files) == 6 * len(written)


@pytest.mark.parametrize("jobs", [1, 2])
def test_parallel_import_writes_what_the_single_process_import_writes(big, tmp_path, jobs):
    paths, expected = big
    same(expected, parallel(paths, tmp_path / "out", jobs=jobs, batch_sessions=97))


def test_bench_dump_imports_identically_over_many_batches(tmp_path):
    """The benchmark's own dump (`bench/import_throughput.py`: the collector's length-prefixed protobuf
    stream, 500 spans a message, so each message holds parts of several batches' sessions at batch
    sizes that do not divide 50): one worker, two workers and the single-process reference write the
    same files and report."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from import_throughput import write_dump as write_bench_dump
    finally:
        sys.path.remove(str(ROOT / "bench"))
    dump = tmp_path / "bench.pb"
    write_bench_dump(dump, 3000)
    expected = reference([dump], tmp_path / "ref")
    assert expected[0]["sessions"] == 300 and len(expected[1]) == 6 * 300
    for jobs in (1, 2):
        same(expected, parallel([dump], tmp_path / f"new{jobs}", jobs=jobs, batch_sessions=37))


def test_sessions_are_placed_while_the_workers_build_the_rest(tmp_path):
    """Without --strict the main process moves each session into place as soon as it and every session
    before it are built: the progress counts directories already in place, from the first batch on,
    and the output is still the single-process import's."""
    paths = write_dump(tmp_path / "dump", sessions=120, seed=17)
    out = tmp_path / "out"
    seen: list[tuple[int, int]] = []

    def progress(what: str, n: int) -> None:
        if what == "sessions":
            seen.append((n, sum(1 for p in out.iterdir() if not p.name.startswith("."))))

    report = import_dumps(paths, ScenarioDirWriter(out), jobs=2, batch_sessions=4, progress=progress)
    assert len(report.written) > 100 and seen[0][0] < len(report.written)
    assert all(n == placed for n, placed in seen), seen[:5]
    same(reference(paths, tmp_path / "ref"), (view(report, out), tree(out)))


def fixture_dumps() -> list[Path]:
    found = [p for p in PRODUCERS.glob("*/*") if p.name.startswith(("dump", "trace")) and p.parent.name[0] != "_"]
    return sorted(found) + [ROOT / "examples" / "dumps" / "support-agent.otlp.jsonl"]


@pytest.mark.parametrize("encoding", ["as-recorded", "protobuf"])
def test_every_producer_fixture_imports_identically(tmp_path, encoding):
    paths = fixture_dumps()
    if encoding == "protobuf":  # the same records as the collector's protobuf stream: pass 1 only scans these
        converted = []
        for i, path in enumerate(paths):
            records = [r for r in read_dump(path) if not hasattr(r, "line")]
            target = tmp_path / f"{i:02d}-{path.parent.name}.pb"
            target.write_bytes(as_proto(records, per_request=7))
            converted.append(target)
        paths = converted
    for path in paths:
        expected = reference([path], tmp_path / "ref" / path.name)
        for jobs in (1, 2):
            same(expected, parallel([path], tmp_path / f"new{jobs}" / path.name, jobs=jobs, batch_sessions=1))


def test_force_reimport_and_selection_match(tmp_path):
    paths = write_dump(tmp_path / "dump", sessions=80, seed=3)
    for name, kw in (("all", {}), ("flagged", {"flagged_only": True})):
        ref_out, new_out = tmp_path / f"ref-{name}", tmp_path / f"new-{name}"
        same(reference(paths, ref_out, **kw), parallel(paths, new_out, jobs=2, batch_sessions=9, **kw))
        # again without --force: each existing directory is an error of its own
        same(reference(paths, ref_out, **kw), parallel(paths, new_out, jobs=2, batch_sessions=9, **kw))
        # and with --force: directories replaced, each cassette gets this run appended
        same(reference(paths, ref_out, force=True, **kw),
             parallel(paths, new_out, force=True, jobs=2, batch_sessions=9, **kw))
    wanted = tuple(sorted(_trace_ids(paths[0]))[:25])
    same(reference(paths, tmp_path / "ref-ids", trace_ids=wanted),
         parallel(paths, tmp_path / "new-ids", trace_ids=wanted, jobs=2, batch_sessions=5))


def _trace_ids(path: Path) -> set[str]:
    return {r.trace_id for r in read_dump(path) if getattr(r, "trace_id", None)}


def test_strict_stops_before_writing_anything(tmp_path):
    paths = write_dump(tmp_path / "dump", sessions=40, seed=5)
    with pytest.raises(ImportAborted) as ref:
        import_dumps(paths, WriteOnlySink(tmp_path / "ref"), strict=True)
    with pytest.raises(ImportAborted) as new:
        import_dumps(paths, ScenarioDirWriter(tmp_path / "new"), strict=True, jobs=2, batch_sessions=4)
    assert str(new.value) == str(ref.value) and "c.otlp.jsonl:" in str(new.value) and "zz" in str(new.value)
    assert not (tmp_path / "new").exists() and not (tmp_path / "ref").exists(), "nothing written, no folder"
    # without the corrupt file, strict fails on the first session warning, still before any write
    with pytest.raises(ImportAborted) as ref:
        import_dumps(paths[:2], WriteOnlySink(tmp_path / "ref"), strict=True)
    with pytest.raises(ImportAborted) as new:
        import_dumps(paths[:2], ScenarioDirWriter(tmp_path / "new"), strict=True, jobs=2, batch_sessions=4)
    assert str(new.value) == str(ref.value) and "warning(s), e.g. session" in str(new.value)
    assert not (tmp_path / "new").exists() and not (tmp_path / "ref").exists()


def test_strict_joins_continuations_once(tmp_path):
    """--strict judges the joined continuations before writing, then writes those same sessions: joining
    changes the sessions it joins, so it happens once (two conversations without an id, each continued
    by a second trace; no warnings, so strict writes them)."""
    from tests.support.conversations import FIRST_A, FIRST_Q, turn

    def said(role: str, text: str) -> dict[str, Any]:
        return {"role": role, "parts": [{"type": "text", "content": text}]}

    traces = []
    for c in range(2):
        question, more = f"{FIRST_Q} ({c})", f"and then, for {c}?"
        traces += [turn(2 * c, c, [said("user", question)], FIRST_A, 1000 + c * 10_000, None),
                   turn(2 * c + 1, c, [said("user", question), said("assistant", FIRST_A), said("user", more)],
                        f"then {c}", 5000 + c * 10_000, None)]
    dump = tmp_path / "dump.pb"
    dump.write_bytes(as_proto([r for t in traces for r in t.records], per_request=3))
    expected = reference([dump], tmp_path / "ref", strict=True)
    assert expected[0]["sessions"] == 2 and not expected[0]["warnings"]
    for jobs in (1, 2):
        got = parallel([dump], tmp_path / f"new{jobs}", strict=True, jobs=jobs, batch_sessions=1)
        same(expected, got)
    envelope = json.loads(expected[1][f"{expected[0]['written'][0]}/incident.wtin.json"])
    assert len(envelope["messages"]) == 4 and len(envelope["provenance"]["trace_ids"]) == 2


def test_cli_jobs_output_and_exit_code(tmp_path):
    paths = [str(p) for p in write_dump(tmp_path / "dump", sessions=30, seed=9)]
    config = tmp_path / "serve.yaml"  # the workers apply these rules, not the defaults
    config.write_text('flagger:\n  rules:\n    - {name: slow-order, keys: ["gen_ai.tool.call.result"], match: regex, '
                      'regex: "lost"}\n')
    runs = {}
    for jobs in ("1", "2"):
        for extra in ([], ["--config", str(config), "--flagged-only"]):
            out = tmp_path / f"out{jobs}{len(extra)}"
            r = CliRunner().invoke(main, ["import", *paths, "--out", str(out), "--jobs", jobs, *extra])
            runs[jobs, len(extra)] = (r.exit_code, r.output.replace(str(out), "OUT"))
    assert runs["1", 0] == runs["2", 0] and runs["1", 3] == runs["2", 3]
    assert runs["1", 0][0] == 1 and "c.otlp.jsonl:" in runs["1", 0][1] and "written" in runs["1", 0][1]
    assert "not selected" in runs["2", 3][1] and runs["2", 3][1].count("wrote ") < runs["2", 0][1].count("wrote ")
    bad = CliRunner().invoke(main, ["import", *paths, "--out", str(tmp_path / "x"), "--jobs", "0"])
    assert bad.exit_code == 2 and "--jobs" in bad.output


def _peak(paths: list[Path], out: Path, **kw: Any) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        report = import_dumps(paths, ScenarioDirWriter(out), jobs=1, **kw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.written
    return peak


def test_memory_follows_the_batch_not_the_dump(tmp_path):
    """Pass 1 keeps ids and offsets, pass 2 one batch at a time: four times the dump is not four times
    the memory (as with the spill it replaces: the largest session and message count, not the dump)."""
    small = write_dump(tmp_path / "small", sessions=40, seed=11, filler=20_000)
    large = write_dump(tmp_path / "large", sessions=160, seed=11, filler=20_000)
    sizes = [sum(p.stat().st_size for p in paths) for paths in (small, large)]
    assert sizes[1] > 3.5 * sizes[0]
    peaks = [_peak(paths, tmp_path / f"out{i}", batch_bytes=256 * 1024) for i, paths in enumerate((small, large))]
    assert peaks[1] < 1.5 * peaks[0], (peaks, sizes)
    assert peaks[1] < 0.75 * sizes[1], (peaks, sizes)


def test_output_folder_problems_and_empty_inputs_match(tmp_path):
    paths = write_dump(tmp_path / "dump", sessions=6, seed=2)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    ref = import_dumps(paths, WriteOnlySink(blocker / "out"))
    new = import_dumps(paths, ScenarioDirWriter(blocker / "out"), jobs=2, batch_sessions=2)
    assert view(new, blocker) == view(ref, blocker) and "not written: NotADirectoryError" in new.errors[-1]
    # no GenAI session: the same reason, and no output folder left behind
    http = SpanRecord(trace_id="ab" * 16, span_id="cd" * 8, name="GET /health", start_ns=1, end_ns=2,
                      attributes={"http.request.method": "GET"})
    dump = tmp_path / "http.pb"
    dump.write_bytes(as_proto([http]))
    ref = import_dumps([dump], WriteOnlySink(tmp_path / "ref"))
    new = import_dumps([dump], ScenarioDirWriter(tmp_path / "new"), jobs=2)
    assert new.why_none == ref.why_none and new.why_none and new.records == ref.records == 1
    assert not (tmp_path / "new").exists() and not (tmp_path / "ref").exists()


def test_workers_started_before_pass_one_write_the_same(tmp_path, monkeypatch):
    """A large input starts the workers' forkserver before pass 1 (its imports overlap the scan) when the
    workers cannot be forks of the importer: the files and the report are the single-process import's,
    and again with --force over them."""
    import wt_otel.ingest.importer as importer

    monkeypatch.setattr(importer, "EARLY_WORKERS_BYTES", 1)
    monkeypatch.setattr(importer, "_can_fork", lambda: False)
    from multiprocessing import forkserver

    started = []
    real = forkserver.ensure_running
    monkeypatch.setattr(forkserver, "ensure_running", lambda: (started.append(True), real())[1])
    paths = write_dump(tmp_path / "dump", sessions=40, seed=13)
    same(reference(paths, tmp_path / "ref"), parallel(paths, tmp_path / "new", jobs=2, batch_sessions=7))
    same(reference(paths, tmp_path / "ref", force=True),
         parallel(paths, tmp_path / "new", force=True, jobs=2, batch_sessions=7))
    assert started, "the forkserver was not started before pass 1"


@pytest.mark.parametrize("fork", [True, False], ids=["fork", "forkserver"])
def test_forked_and_forkserver_workers_write_the_same(tmp_path, monkeypatch, fork):
    """Pass 2's workers are forks of the importer when it runs no other thread (Linux), else they come
    from a forkserver: either way the files and the report are the single-process import's."""
    import sys
    import threading

    import wt_otel.ingest.importer as importer

    if fork and sys.platform != "linux":
        pytest.skip("workers are forked on Linux only")
    monkeypatch.setattr(importer, "_can_fork", lambda: fork)
    paths = write_dump(tmp_path / "dump", sessions=40, seed=29)
    context = importer._pool_context("wt_otel.exporters.scenario_dir")
    assert context.get_start_method() == ("fork" if fork else "forkserver")
    same(reference(paths, tmp_path / "ref"), parallel(paths, tmp_path / "new", jobs=2, batch_sessions=7))
    monkeypatch.undo()
    if sys.platform == "linux" and threading.active_count() == 1:
        assert importer._can_fork()
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not importer._can_fork(), "a second thread must rule out fork"
    finally:
        stop.set()
        other.join()


def test_out_is_checked_only_when_a_staged_directory_cannot_move(tmp_path, monkeypatch):
    """Placing a session is one rename; OUT is looked at only when it fails: an OUT removed during the import
    goes to `place_directory` (which makes it again), any other failure is the rename's own error."""
    from types import SimpleNamespace

    from wt_otel.ingest import importer

    out = tmp_path / "out"
    (out / "staged").mkdir(parents=True)
    placer = importer._Placer.__new__(importer._Placer)
    placer.out, placer.sink = str(out), SimpleNamespace(out=out, force=False)
    isdir_calls = []
    real_isdir = importer.os.path.isdir
    monkeypatch.setattr(importer.os.path, "isdir", lambda p: isdir_calls.append(p) or real_isdir(p))
    placer._rename(str(out / "staged"), str(out / "s1"), out / "s1")
    assert (out / "s1").is_dir() and isdir_calls == []
    with pytest.raises(FileNotFoundError):  # OUT is there: the rename's own error
        placer._rename(str(out / "gone"), str(out / "s2"), out / "s2")
    placed = []
    monkeypatch.setattr(importer, "place_directory", lambda src, dest, force: placed.append((src, dest, force)))
    placer.out = str(tmp_path / "removed")
    placer._rename(str(tmp_path / "removed" / "staged"), str(tmp_path / "removed" / "s3"), tmp_path / "removed" / "s3")
    assert placed == [(tmp_path / "removed" / "staged", tmp_path / "removed" / "s3", False)]
