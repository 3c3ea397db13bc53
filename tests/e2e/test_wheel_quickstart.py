"""From the package, not the checkout (issue 30 item 9): the wheel, installed into a fresh venv outside the
repository, runs the README quickstart (record, flag, import, run) from an empty directory.

Before, the recording helpers lived in `examples/agent/telemetry.py`: a team that installed wt-otel into its
own project had no way to record. The quickstart's files and commands are read from README.md (its
`<!-- doc-test -->` blocks), so the README cannot drift from what the wheel does.

The wheel is built from a copy of the sources (`pip wheel`: its build backend comes from the pip cache or
PyPI) and installed with `--no-deps`; the fresh venv borrows this venv's site-packages for the third-party
dependencies (a `.pth` line, after its own site-packages, so the installed wt_otel wins; the editable
install's finder there is not run: a path in a `.pth` file is not a site dir). Nothing of the checkout is on
its path: no PYTHONPATH, no `examples/`, and the commands run in an empty directory. Marker `package`
(`make test-package`, run by .ci/run): ~30 s, mostly the build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.e2e.test_doc_recipes import _script, blocks
from tests.support.paths import ROOT
from tests.support.producers import FIRST_ANSWER  # noqa: F401  (puts the fake provider on sys.path)

pytest.importorskip("agents", reason="the quickstart records an OpenAI Agents SDK agent (the demo extra)")

from fake_openai import start_server  # noqa: E402

pytestmark = pytest.mark.package

SOURCES = ("pyproject.toml", "setup.py", "README.md", "wt_otel", "processors", "exporters")


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(path, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
                           "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [wheel] = (tmp / "dist").glob("wt_otel-*.whl")
    return wheel


def fresh_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                           "--disable-pip-version-check", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "zz_borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_the_wheel_runs_the_readme_quickstart_from_an_empty_directory(tmp_path: Path) -> None:
    venv = fresh_venv(tmp_path, build_wheel(tmp_path))
    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("WT_", "OPENAI_", "ANTHROPIC_", "OTEL_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    where = subprocess.run(["python", "-c", "import wt_otel.recording as r, wt_otel.cli as c; "
                            "print(r.__file__); print(c.__file__)"], cwd=work, env=env, capture_output=True,
                           text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert all(Path(p).is_relative_to(venv) for p in where.stdout.split()), where.stdout  # the wheel's, not ours

    doc = blocks(ROOT / "README.md")
    assert [b.kind for b in doc] == ["file", "file", "file", "run"]  # the quickstart, and only it
    for block in doc:
        if block.kind == "file":
            (work / block.name).write_text(block.body + "\n", encoding="utf-8")
    server, port = start_server()
    try:
        env.update(OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY="sk-test",
                   OPENAI_AGENTS_DISABLE_TRACING="1")
        done = subprocess.run(["bash", "-c", _script(doc, {})], cwd=work, env=env, capture_output=True, text=True,
                              timeout=240, start_new_session=True)
    finally:
        server.shutdown()
        server.server_close()
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "@@done@@" in out, out[-6000:]
    assert "1 session(s), 1 written" in out  # the flagged conversation, imported with --flagged-only
    [scenario] = (work / "scenarios").iterdir()
    assert "INC-1" in (scenario / "incident.wtin.json").read_text()
    for text in doc[-1].expect:
        assert text in out, out[-6000:]
