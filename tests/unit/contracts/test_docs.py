"""docs/ stands alone (issue 12): the README links to docs/ (not ../shared), every relative link resolves,
the committed JSON Schemas are what `wt-otel schema` prints, and metrics.md lists every series serve exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from wt_otel.cli import main
from wt_otel.contracts.formats import FORMATS
from wt_otel.serve.metrics import HELP

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
KINDS = (*FORMATS, "serve-config")


def test_the_readme_points_at_docs_not_at_files_a_clone_lacks() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "../shared" not in readme
    linked = set(LINK.findall(readme))
    for page in ("docs/contracts.md", "docs/inject-protocol.md", "docs/scorers.md", "docs/assertions.md",
                 "docs/flag-rules.md", "docs/serve-config.md", "docs/metrics.md"):
        assert page in linked, page


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name}: {target}"


@pytest.mark.parametrize("kind", KINDS)
def test_committed_schemas_are_what_wt_otel_schema_prints(kind: str) -> None:
    res = CliRunner().invoke(main, ["schema", kind])
    assert res.exit_code == 0, res.output
    committed = json.loads((DOCS / "schemas" / f"{kind}.schema.json").read_text(encoding="utf-8"))
    assert committed == json.loads(res.output), f"regenerate: wt-otel schema {kind} > docs/schemas/{kind}.schema.json"


def test_metrics_doc_lists_every_series_and_the_code_uses_no_undocumented_one() -> None:
    doc = (DOCS / "metrics.md").read_text(encoding="utf-8")
    assert [name for name in HELP if f"`{name}`" not in doc] == []
    used = set()
    for path in [*ROOT.glob("wt_otel/**/*.py"), *ROOT.glob("processors/*.py"), *ROOT.glob("exporters/*.py")]:
        used |= set(re.findall(r"metrics\.(?:inc|set)\(\s*\"(wt_otel_[a-z_]+)\"", path.read_text(encoding="utf-8")))
    assert used and sorted(used - set(HELP)) == []
