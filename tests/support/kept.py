"""Sessions that serve kept for later (`datadir.render: flagged`, its default), rendered as a user would."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from wt_otel.cli import main


def render_kept(data_dir: Path) -> str:
    """`wt-otel sessions render --all` on a data dir serve no longer holds; its output."""
    res = CliRunner().invoke(main, ["sessions", "render", "--all", "--data-dir", str(data_dir)])
    assert res.exit_code == 0, res.output
    return res.output
