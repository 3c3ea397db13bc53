"""Every Python package of the source trees is in pyproject's `[tool.setuptools] packages`, so the wheel holds it
(issue 30 item 9: `wt_otel.scoring.assertions` was missing, and an installed `wt-otel run` failed on import;
the editable install of a checkout never showed it). The slow proof is tests/e2e/test_wheel_quickstart.py."""

from __future__ import annotations

import tomllib

from tests.support.paths import ROOT


def test_every_package_directory_is_listed_for_the_wheel() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {str(ROOT / path): name for name, path in tool["package-dir"].items()}
    found = set()
    for base, name in roots.items():
        for init in (ROOT / base).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / base).parts
            found.add(".".join((name, *rel)))
    assert sorted(found - set(tool["packages"])) == [], "add these to [tool.setuptools] packages in pyproject.toml"
