"""`pip install -e .` on a machine without a C compiler still installs, and the span index falls back to its
pure-Python walk (issue 15 item 3). The compiler is taken away with `CC=false`: setuptools then fails to
build the optional extension, warns, and goes on.

A copy of the source tree is installed into a fresh venv (without pip: this venv's pip installs into it
with `--python`), so neither this checkout nor its venv is touched; the fresh venv borrows the test venv's
site-packages for the dependencies (appended after its own, so its own editable finder wins).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

from tests.support.paths import ROOT

_SKIP = shutil.ignore_patterns(".git", ".venv*", "venv", "__pycache__", "*.so", "*.egg-info", "build", "out",
                               "wt-data", "runs", ".hypothesis", ".pytest_cache", ".ruff_cache", ".mypy_cache",
                               "node_modules")

CHECK = """
import sys
sys.path.append(sys.argv[1])
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from wt_otel.ingest import spanindex
print(spanindex.__file__)
print(spanindex.native_available(), spanindex.implementation())
print(spanindex.scan(ExportTraceServiceRequest().SerializeToString()))
from wt_otel.ingest.wirecheck import WireCheck
check = WireCheck(ExportTraceServiceRequest)
print(check.native, check.problem(b""), check.problem(b"\\x0a\\x05ab") is not None)
"""


def test_pip_install_e_without_a_c_compiler_installs_and_falls_back(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=_SKIP)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True)
    python = tmp_path / "v" / "bin" / "python"
    env = {**os.environ, "CC": "false", "CXX": "false", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-v", "--no-deps",
                              "-e", str(src)], capture_output=True, text=True, env=env, timeout=300)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    assert "_spanindex" in install.stdout + install.stderr  # setuptools tried, and said it could not
    assert not list((src / "wt_otel" / "ingest").glob("_spanindex*.so"))
    assert not list((src / "wt_otel" / "ingest").glob("_wirecheck*.so"))
    clean = {k: v for k, v in os.environ.items() if k not in ("WT_OTEL_SPANINDEX", "PYTHONPATH")}
    check = subprocess.run([str(python), "-c", CHECK, sysconfig.get_paths()["purelib"]], capture_output=True,
                           text=True, timeout=120, env=clean, cwd=tmp_path)  # not here: '' on sys.path
    assert check.returncode == 0, check.stderr
    where, chosen, scanned, checked = check.stdout.splitlines()
    assert where == str(src / "wt_otel" / "ingest" / "spanindex.py")
    assert chosen == "False python"
    assert scanned == "[]"
    assert checked == "False None True"  # the wire check is upb's
