"""`wt-otel flag SESSION [--ref INC-…]` (issue 12): a session in the data dir promoted to an incident."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.exporters.datadir import DataDirStore, read_index
from wt_otel.ingest.dumps import read_dump
from wt_otel.ingest.sessions import SessionGrouper, build_session
from wt_otel.serve.replay_queue import QUEUE_FILE, read_events

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dumps" / "support-agent.otlp.jsonl"


def unflagged_data_dir(root: Path) -> str:
    """A data dir holding one session of the sample, written unflagged (as serve writes an unflagged run)."""
    with SessionGrouper() as grouper:
        for item in read_dump(SAMPLE):
            grouper.add(item)
        groups = list(grouper.groups())
    with DataDirStore(root) as store:
        for spans in groups:
            session = build_session(spans)
            if session is not None and not session.flagged:
                return store.write(session).slug
    raise AssertionError("the sample has no unflagged session")


def test_flag_promotes_a_written_session_and_queues_it(tmp_path: Path) -> None:
    slug = unflagged_data_dir(tmp_path)
    res = CliRunner().invoke(main, ["flag", slug, "--ref", "INC-LATE-1", "--data-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    latest = read_index(tmp_path).latest()
    [entry] = [e for e in latest.values() if e["slug"] == slug]
    assert entry["flagged"] is True and entry["flag_ref"] == "INC-LATE-1" and entry["revision"] == 2
    env = json.loads((tmp_path / "sessions" / slug / "incident.wtin.json").read_text())
    assert env["source"]["ref"] == "INC-LATE-1" and "wt-otel flag" in env["source"]["flag"]
    [enqueued] = [e for e in read_events(tmp_path / QUEUE_FILE)[0] if e["event"] == "enqueued"]
    assert enqueued["ref"] == "INC-LATE-1"
    scenario = tmp_path / enqueued["scenario"]
    tags = yaml.safe_load((scenario / "scenario.yaml").read_text())["tags"]
    assert "origin:INC-LATE-1" in tags and "unreviewed" in tags
    again = CliRunner().invoke(main, ["flag", slug, "--ref", "INC-LATE-1", "--data-dir", str(tmp_path)])
    assert again.exit_code == 0 and "not queued" in again.output


def test_flag_of_an_unknown_session_or_a_busy_data_dir(tmp_path: Path) -> None:
    slug = unflagged_data_dir(tmp_path)
    res = CliRunner().invoke(main, ["flag", "nope", "--data-dir", str(tmp_path)])
    assert res.exit_code == 2 and "no session 'nope'" in res.output
    with DataDirStore(tmp_path):  # a writer that holds the data dir and never takes flag requests
        unknown = CliRunner().invoke(main, ["flag", "nope", "--data-dir", str(tmp_path)])
        busy = CliRunner().invoke(main, ["flag", slug, "--data-dir", str(tmp_path), "--wait", "0.3"])
    assert unknown.exit_code == 2 and "no session 'nope'" in unknown.output  # said at once, not left to serve
    assert busy.exit_code == 1 and "did not flag" in busy.output
    [request] = [json.loads(line) for line in (tmp_path / "flag-requests.ndjsonl").read_text().splitlines()]
    [key] = [e["key"] for e in read_index(tmp_path).latest().values() if e["slug"] == slug]
    assert request["session"] == key  # left for serve's next tick (test_flag_while_serve_runs)
