"""Contract A conformance: Wind Tunnel's own corpus, read from ../shared beside the repo.

valid/ files parse cleanly; each invalid/ file fails with the substring its
manifest names; each lint/ file parses but warns with its manifest's substring.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.paths import SHARED
from wt_otel.cli import main
from wt_otel.contracts import validate_file

CORPUS = SHARED / "conformance" / "contract-a"
pytestmark = pytest.mark.skipif(
    not CORPUS.is_dir(), reason=f"Contract A corpus not found at {CORPUS} (shared/ must sit beside the repo)"
)


def files(group: str) -> list[Path]:
    return sorted((CORPUS / group).glob("*.wtin.json")) if CORPUS.is_dir() else []


def manifest(group: str) -> dict[str, str]:
    return json.loads((CORPUS / group / "manifest.json").read_text()) if CORPUS.is_dir() else {}


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_every_corpus_file_has_an_expectation() -> None:
    for group in ("invalid", "lint"):
        assert set(ids(files(group))) == set(manifest(group)), group
    assert files("valid")


@pytest.mark.parametrize("path", files("valid"), ids=ids(files("valid")))
def test_valid(path: Path) -> None:
    report = validate_file(path)
    assert (report.kind, report.problems, report.warnings) == ("envelope", [], [])


@pytest.mark.parametrize("path", files("invalid"), ids=ids(files("invalid")))
def test_invalid(path: Path) -> None:
    report = validate_file(path)
    expected = manifest("invalid")[path.name]
    lines = [str(p) for p in report.problems]
    assert any(expected in line for line in lines), f"{expected!r} not in {lines}"


@pytest.mark.parametrize("path", files("lint"), ids=ids(files("lint")))
def test_lint(path: Path) -> None:
    report = validate_file(path)
    expected = manifest("lint")[path.name]
    assert report.problems == []
    lines = [str(w) for w in report.warnings]
    assert any(expected in line for line in lines), f"{expected!r} not in {lines}"


def run(*args: str) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(main, ["validate", *args])
    return result.exit_code, result.stdout.splitlines(), result.stderr


def test_cli_valid_folder() -> None:
    code, lines, _ = run(str(CORPUS / "valid"))
    assert code == 0
    assert lines == [f"OK {p}" for p in files("valid")]


def test_cli_invalid_files() -> None:
    code, lines, _ = run(*map(str, files("invalid")))
    assert code == 1
    for path, expected in manifest("invalid").items():
        prefix = f"INVALID {CORPUS / 'invalid' / path}: "
        assert any(line.startswith(prefix) and expected in line for line in lines), (path, lines)
    assert all(line.startswith("INVALID ") for line in lines)


def test_cli_lint_warns_and_strict_fails() -> None:
    code, lines, _ = run(str(CORPUS / "lint"))
    assert code == 0
    for path, expected in manifest("lint").items():
        prefix = f"WARN {CORPUS / 'lint' / path}: "
        assert any(line.startswith(prefix) and expected in line for line in lines), (path, lines)
    assert run("--strict", str(CORPUS / "lint"))[0] == 1
    assert run("--strict", str(CORPUS / "valid"))[0] == 0


def test_cli_whole_corpus_and_unreadable(tmp_path: Path) -> None:
    assert run(str(CORPUS))[0] == 1
    broken = tmp_path / "broken.wtin.json"
    broken.write_text('{"windtunnel_interchange": 1,')
    code, lines, err = run(str(CORPUS / "valid"), str(broken))
    assert code == 2
    assert err.startswith(f"error: cannot read {broken}: ")
    assert len(lines) == len(files("valid"))
