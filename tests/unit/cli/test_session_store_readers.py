"""The data dir's session store (exporters/store.py) is how every command reads sessions (issue 30 item 8):
sessions kept for later (`datadir.render: flagged`, as records here; by reference in
tests/e2e/test_session_store_serve.py) are listed, read and checked like rendered ones, and nothing is
written while reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.unit.cli.test_check_many_suites import suite, trace
from wt_otel.cli import main
from wt_otel.components import load
from wt_otel.exporters.datadir import DataDirStore
from wt_otel.ingest.dumps import read_dump
from wt_otel.ingest.sessions import SessionGrouper, build_session
from wt_otel.model.session import Session


def refund_session(tmp_path: Path) -> tuple[Session, list[Any]]:
    with SessionGrouper() as grouper:
        for item in read_dump(trace(tmp_path / "refund.jsonl")):
            grouper.add(item)
        [spans] = list(grouper.groups())
    session = build_session(spans)
    assert session is not None and not session.flagged
    return session, spans


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """One unflagged refund session, kept as its records (not rendered)."""
    session, spans = refund_session(tmp_path)
    with DataDirStore(tmp_path / "data", render="flagged") as store:
        written = store.write(session, spans)
    assert written is not None and written.entry["rendered"] is False
    return tmp_path / "data"


def test_the_store_lists_and_reads_a_session_kept_for_later_without_writing(data_dir: Path) -> None:
    before = sorted((p.relative_to(data_dir), p.stat().st_mtime_ns) for p in data_dir.rglob("*"))
    store = load("exporters", "sessions")(data_dir)
    [stored] = store.list()
    assert stored.kept == "records" and not stored.rendered and store.get(stored.slug) == store.get(stored.key)
    env = store.envelope(stored)
    assert [w["tool_name"] for w in env["witnessed_calls"]] == ["lookup_order", "verify_identity", "refund"]
    assert store.session(stored).key == stored.key
    assert sorted((p.relative_to(data_dir), p.stat().st_mtime_ns) for p in data_dir.rglob("*")) == before
    with pytest.raises(ValueError, match="no session 'nope'"):
        store.get("nope")
    with pytest.raises(FileNotFoundError, match="not a wt-otel data dir"):
        load("exporters", "sessions")(data_dir / "sessions")


def test_check_and_list_read_a_kept_session_through_the_store(data_dir: Path, tmp_path: Path) -> None:
    suite_path = suite(tmp_path / "refund.t2t.yaml", "Refund safety", ["lookup_order", "verify_identity", "refund"])
    [line] = [json.loads(x) for x in (data_dir / "sessions.ndjsonl").read_text().splitlines()]
    checked = CliRunner().invoke(main, ["check", "--suite", str(suite_path), "--data-dir", str(data_dir),
                                        "--session", line["slug"]])
    assert checked.exit_code == 0, checked.output
    assert "PASS sequence" in checked.output and "PASS answer" in checked.output
    unknown = CliRunner().invoke(main, ["check", "--suite", str(suite_path), "--data-dir", str(data_dir),
                                        "--session", "nope"])
    assert unknown.exit_code == 2 and "no session 'nope'" in unknown.output
    listed = CliRunner().invoke(main, ["sessions", "list", "--data-dir", str(data_dir)])
    assert listed.exit_code == 0 and f"{line['slug']}  records  r1" in listed.output
    missing = CliRunner().invoke(main, ["sessions", "list", "--data-dir", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "not a wt-otel data dir" in missing.output


def test_check_takes_data_dir_and_session_together_instead_of_a_dump(data_dir: Path, tmp_path: Path) -> None:
    suite_path = suite(tmp_path / "refund.t2t.yaml", "Refund safety", ["lookup_order", "verify_identity", "refund"])
    dump = trace(tmp_path / "refund.jsonl")
    for extra in (["--data-dir", str(data_dir)], ["--session", "x"],
                  [str(dump), "--data-dir", str(data_dir), "--session", "x"]):
        res = CliRunner().invoke(main, ["check", "--suite", str(suite_path), *extra])
        assert res.exit_code == 2 and "--data-dir and --session go together" in res.output, (extra, res.output)


def test_a_session_that_cannot_be_read_back_is_left_out_of_drift_with_a_warning(data_dir: Path,
                                                                                tmp_path: Path) -> None:
    """The store's failure path: damaged records (kept for later) or a damaged envelope (rendered) are a
    ValueError naming the session, and `surface drift` warns and goes on without it."""
    store = load("exporters", "sessions")(data_dir)
    [stored] = store.list()
    assert "STABLE" in CliRunner().invoke(main, ["surface", "drift", "--data-dir", str(data_dir)]).output
    (store.directory(stored) / "records.otlp.pb").write_bytes(b"\xff not protobuf")
    with pytest.raises(ValueError, match=f"session {stored.slug}: cannot read its records"):
        store.envelope(stored)
    res = CliRunner().invoke(main, ["surface", "drift", "--data-dir", str(data_dir)])
    assert res.exit_code == 0 and "no sessions" in res.stdout, res.output
    assert f"warning: session {stored.slug}: cannot read its records" in res.stderr and "left out" in res.stderr

    rendered_dir = tmp_path / "rendered"
    with DataDirStore(rendered_dir) as writer:  # render: all
        writer.write(*refund_session(tmp_path))
    rendered = load("exporters", "sessions")(rendered_dir)
    [kept] = rendered.list()
    envelope_path = rendered.directory(kept) / "incident.wtin.json"
    assert kept.rendered and rendered.envelope(kept)["witnessed_calls"]
    for damage, why in (("{torn", "cannot read"), ("[1, 2]", "is not a JSON object")):
        envelope_path.write_text(damage)
        with pytest.raises(ValueError, match=why):
            rendered.envelope(kept)
    [(_, env, reason)] = list(rendered.envelopes())
    assert env is None and reason is not None and kept.slug in reason
