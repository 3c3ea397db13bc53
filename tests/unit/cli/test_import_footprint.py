"""`wt-otel import` loads only what import needs: no gRPC receivers, no serve, no replay servers, not every
contract's models.

Why: import's peak RSS is part of its benchmark (it should follow the largest session, not the
modules it happens to drag in); an eager import of serve's config once pulled grpc into every import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

PROBE = """
import json, sys
from wt_otel.cli import main
sys.argv = ["wt-otel", "import", sys.argv[1], "--out", sys.argv[2]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def test_import_loads_no_server_modules(tmp_path: Path) -> None:
    dump = ROOT / "examples" / "dumps" / "support-agent.otlp.jsonl"
    done = subprocess.run([sys.executable, "-c", PROBE, str(dump), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, check=False)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] in (0, None), done.stderr
    loaded = set(report["modules"])
    heavy = {"grpc", "uvicorn", "mcp", "wt_otel.serve.receivers", "wt_otel.replay.mcp_server",
             "wt_otel.replay.cassette_server",
             # every contract's models (schema/validate's), the scorer library, the other command families
             "wt_otel.contracts.formats", "wt_otel.scoring.scorers", "wt_otel.cli.replay", "wt_otel.cli.serve"}
    assert not heavy & loaded, sorted(heavy & loaded)
    assert (tmp_path / "out").is_dir()
