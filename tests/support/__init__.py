"""Helpers shared by tests (a package: `from support.x import y`, tests/ is on sys.path)."""
