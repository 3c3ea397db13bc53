"""Text from telemetry made safe to show on an operator's terminal or in a log file.

A span name, an incident id or a conversation id is whatever the producer sent:
an OSC sequence in it retitles the window, a CSI sequence clears the screen or
hides the lines before it, a newline forges a log line of its own, a bidi
override reverses what follows, a lone surrogate makes the log handler fail.
`shown()` writes every such character as its escape (`\\x1b`, `\\n`,
`\\u202e`, `\\udc80`), so the text reads the same and does nothing.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["shown", "shown_lines"]

# C0 and C1 controls, DEL, the line/paragraph separators, bidi embeddings, overrides and isolates, surrogates
_ALL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    c = ord(char)
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def shown(value: Any) -> str:
    """`str(value)` with every control character (newlines included), bidi control and lone surrogate escaped:
    for a value from telemetry inside one log line."""
    text = value if isinstance(value, str) else str(value)
    return text if text.isprintable() and text.isascii() else _ALL.sub(_escape, text)


def shown_lines(text: str) -> str:
    """`shown` for a whole message of our own: its newlines and tabs are kept (a multi-line message stays
    readable), every other control character is escaped, wherever it came from."""
    if text.isascii() and text.isprintable():
        return text
    return _BUT_LINES.sub(_escape, text)
