"""`safe_slug`'s fast path for ids that are slugs already but for case gives what the regex gives."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from wt_otel._util.fsutil import MAX_SLUG, safe_slug

_UNSAFE = re.compile(r"[^a-z0-9]+")


def by_regex(text: object, fallback: str = "session") -> str:
    """The definition: each run of characters outside [a-z0-9] (after lowercasing) becomes one "-"."""
    return _UNSAFE.sub("-", str(text).lower()).strip("-")[:MAX_SLUG].strip("-") or fallback


@given(st.text(alphabet="aZ09-_ .\u00e9\u0130\u212a\u0131\u017f\u00df", max_size=70))
def test_safe_slug_is_the_regex_definition(text):
    assert safe_slug(text) == by_regex(text)


def test_safe_slug_on_ids_and_edges():
    cases = ["0af7651916cd43dd8448eb211c80319c", "conv-Wq7Zk2Xp-00000001-1", "a--b", "-a-", "--", "-", "",
             "\u212a", "\u0130x", "A" * 60, "x" * 47 + "-y", "x" * 48 + "-", 12345]
    for text in cases:
        assert safe_slug(text) == by_regex(text), text
    assert safe_slug("conv-Wq7Zk2Xp-1") == "conv-wq7zk2xp-1"
    assert safe_slug("a--b") == "a-b"  # a run of dashes is one, as before
    assert safe_slug("\u212a") == "k"  # the Kelvin sign lowercases to ASCII
