"""Where things are, computed once (test files sit at different depths)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent  # the repository (examples/, collector-config/)
SHARED = ROOT.parent / "shared"  # the project's shared/ beside the checkout (conformance corpora)
PRODUCERS = TESTS / "fixtures" / "producers"
COMMON = PRODUCERS / "_common"
