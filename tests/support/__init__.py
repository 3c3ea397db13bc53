"""Helpers shared by tests, imported as a package (tests.support....)."""
