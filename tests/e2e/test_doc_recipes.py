"""Every shell recipe in the replay docs runs as written, so the docs cannot rot.

In docs/replay-your-agent.md, docs/fix-loop.md and examples/agent/README.md, every ```sh block is marked by
the HTML comment on the line before it:

    <!-- doc-test: run [exit=N] [expect="TEXT"]... -->   run it; its last command exits N (default 0) and
                                                          the block prints each TEXT
    <!-- doc-test: skip REASON -->                        not run (a server that runs until stopped...)
    <!-- doc-test: file NAME -->                          (before a ```python block) written as NAME first

A document's blocks run in order in one bash, in a temporary directory holding a link to the repository's
examples/ (the recipes run "from the repository root"), so `$AGENT` and background jobs carry from block to
block; whatever is left running is stopped with the shell's process group. No network: the provider at
$OPENAI_BASE_URL is a scripted fake, and the default ports 8647/8648/8649 are swapped for free ones (in
the text and through $WT_AGENT_PORT, $WT_AGENT_MCP_URL, $WT_INJECT_URL, $WT_UNIVERSE_PORT, $WT_LLM_PORT),
since other tests
run beside this one.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from examples.demo.fake_llm import FakeLLM
from examples.demo.stage import free_port
from tests.support.paths import ROOT
from tests.support.producers import FIRST_ANSWER  # noqa: F401  (puts the fake provider on sys.path)

pytest.importorskip("langgraph", reason="langgraph is a test dependency")
pytest.importorskip("pydantic_ai", reason="pydantic-ai is a test dependency")

from fake_openai import start_server  # noqa: E402

DOCS = ["docs/replay-your-agent.md", "docs/fix-loop.md", "examples/agent/README.md"]
MARK = re.compile(r"<!--\s*doc-test:\s*(run|skip|file)\b(.*?)-->\s*\n```(\w*)\n(.*?)\n```", re.S)
FENCE = re.compile(r"^```sh\s*$", re.M)
TIMEOUT_S = 300


@dataclass
class Block:
    kind: str  # run | skip | file
    lang: str
    body: str
    line: int
    exit: int = 0
    expect: list[str] = field(default_factory=list)
    name: str = ""


def blocks(doc: Path) -> list[Block]:
    text = doc.read_text(encoding="utf-8")
    out = []
    for m in MARK.finditer(text):
        kind, args, lang, body = m.group(1), m.group(2).strip(), m.group(3), m.group(4)
        block = Block(kind, lang, body, text.count("\n", 0, m.start(3)) + 1)
        if kind == "run":
            words = shlex.split(args)
            block.exit = int(next((w[5:] for w in words if w.startswith("exit=")), "0"))
            block.expect = [w[7:] for w in words if w.startswith("expect=")]
        elif kind == "file":
            block.name = args
        out.append(block)
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_shell_block_is_marked(doc: str):
    """A new recipe is either run by this test or skipped with a reason: never silently untested."""
    path = ROOT / doc
    marked = {b.line for b in blocks(path) if b.lang == "sh"}
    text = path.read_text(encoding="utf-8")
    fences = [text.count("\n", 0, m.start()) + 1 for m in FENCE.finditer(text)]
    unmarked = [n for n in fences if n not in marked]
    assert not unmarked, f"{doc}: ```sh blocks at lines {unmarked} have no <!-- doc-test: run|skip --> marker"
    assert all(b.name for b in blocks(path) if b.kind == "file")
    assert all(b.body.split(maxsplit=1)[0] for b in blocks(path) if b.kind == "skip" or b.lang != "sh")


def _script(doc_blocks: list[Block], ports: dict[str, str]) -> str:
    lines = ["set -e", "exec 2>&1", "trap 'rc=$?; kill $(jobs -p) 2>/dev/null || true; exit $rc' EXIT"]
    for i, block in enumerate(doc_blocks):
        if block.kind != "run":
            continue
        body = block.body
        for default, port in ports.items():
            body = body.replace(default, port)
        lines.append(f"echo '@@block {i}@@'")
        body_lines = body.rstrip().splitlines()
        if block.exit == 0:
            lines += body_lines
        else:  # the last command is expected to fail: check its status instead of stopping
            lines += [*body_lines[:-1], "set +e", body_lines[-1], "rc=$?", "set -e",
                      f"if [ $rc -ne {block.exit} ]; then echo \"@@exit $rc, expected {block.exit}@@\"; exit 97; fi"]
    lines.append("echo '@@done@@'")
    return "\n".join(lines) + "\n"


@pytest.fixture
def providers() -> Iterator[dict[str, str]]:
    """The fake providers, by doc: the reference agent's scripted model, and the Bluewing one."""
    demo = FakeLLM()
    server, port = start_server()
    try:
        yield {"examples/agent/README.md": demo.base_url, "docs/fix-loop.md": demo.base_url,
               "docs/replay-your-agent.md": f"http://127.0.0.1:{port}/v1"}
    finally:
        demo.stop()
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("doc", DOCS)
def test_the_recipes_run_as_written(doc: str, tmp_path: Path, providers: dict[str, str]):
    doc_blocks = blocks(ROOT / doc)
    for block in doc_blocks:
        if block.kind == "file":
            (tmp_path / block.name).write_text(block.body + "\n", encoding="utf-8")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    agent, universe, llm = free_port(), free_port(), free_port()
    ports = {"8647": str(agent), "8648": str(universe), "8649": str(llm)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WT_", "OPENAI_", "ANTHROPIC_", "OTEL_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}", OPENAI_BASE_URL=providers[doc], OPENAI_API_KEY="sk-test",
               WT_AGENT_PORT=str(agent), WT_INJECT_URL=f"http://127.0.0.1:{agent}", WT_UNIVERSE_PORT=str(universe),
               WT_LLM_PORT=str(llm), WT_AGENT_MCP_URL=f"http://127.0.0.1:{universe}/mcp",
               OPENAI_AGENTS_DISABLE_TRACING="1")
    log = tmp_path / "recipes.log"
    with log.open("w") as sink:  # a file, not a pipe: a background job holding the pipe cannot hang the test
        proc = subprocess.Popen(["bash", "-c", _script(doc_blocks, ports)], cwd=tmp_path, env=env, text=True,
                                stdout=sink, start_new_session=True)
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)  # whatever the recipes left running in the background
    out = log.read_text()
    assert "@@done@@" in out and proc.returncode == 0, \
        f"{doc}: a recipe failed (exit {proc.returncode}):\n{out[-6000:]}"
    sections = re.split(r"@@block (\d+)@@\n", out)
    printed = {int(sections[i]): sections[i + 1] for i in range(1, len(sections) - 1, 2)}
    for i, block in enumerate(doc_blocks):
        for text in block.expect:
            assert text in printed.get(i, ""), f"{doc}:{block.line}: the recipe did not print {text!r}:\n" \
                                               f"{printed.get(i, '')[-4000:]}"
