"""Issue 31 item 7, import: a killed `wt-otel import` left `.wt-import-*` staging folders in OUT that later imports
never removed (202 MB after six kills); a UTF-8 BOM on the first line defeated format detection."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
import time

from click.testing import CliRunner

from tests.support.hostile import genai_session, tid, to_otlp_json
from wt_otel.cli import main
from wt_otel.ingest import importer
from wt_otel.ingest.dumps import detect_format, read_dump


def _dump(tmp_path, name: str = "dump.otlp.jsonl", bom: bool = False):
    path = tmp_path / name
    lines = [json.dumps(to_otlp_json(genai_session(tid(n)))) for n in (1, 2)]
    path.write_bytes((codecs.BOM_UTF8 if bom else b"") + ("\n".join(lines) + "\n").encode())
    return path


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_import_removes_staging_folders_of_killed_imports_and_only_those(tmp_path):
    out = tmp_path / "out"
    host = importer._HOST
    dead = out / f".wt-import-{host}-{_dead_pid()}-k1ll3d"  # as a kill -9 of an import leaves it
    alive = out / f".wt-import-{host}-{os.getpid()}-running"  # an import running now (this process)
    other_host = out / f".wt-import-otherbox-{_dead_pid()}-shared"  # a shared volume: its pids mean nothing here
    legacy_old, legacy_new = out / ".wt-import-abc123", out / ".wt-import-def456"  # older versions: no pid
    for d in (dead, alive, other_host, legacy_old, legacy_new):
        (d / "batch").mkdir(parents=True)
        (d / "batch" / "incident.wtin.json").write_text("{}")
    two_days_ago = time.time() - 2 * 86400
    os.utime(legacy_old, (two_days_ago, two_days_ago))
    result = CliRunner().invoke(main, ["import", str(_dump(tmp_path)), "--out", str(out), "--jobs", "2"])
    assert result.exit_code == 0, result.output
    assert not dead.exists() and not legacy_old.exists()
    assert alive.exists() and other_host.exists() and legacy_new.exists()
    assert "removed 2 staging folder(s) an interrupted import left" in result.output
    assert {tid(1), tid(2)} <= {json.loads((d / "incident.wtin.json").read_text())["provenance"]["session_key"]
                                for d in out.iterdir() if not d.name.startswith(".")}


def test_a_utf8_bom_on_the_first_line_is_read_past(tmp_path):
    dump = _dump(tmp_path, "exported.jsonl", bom=True)  # no format in the name: detection reads the content
    assert detect_format(dump) == "otlp-json"
    assert {r.trace_id for r in read_dump(dump)} == {tid(1), tid(2)}
    result = CliRunner().invoke(main, ["import", str(dump), "--out", str(tmp_path / "out"), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert "2 written" in result.output
