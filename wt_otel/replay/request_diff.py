"""A divergent model request, said as a reviewer reads a diff: which part changed, old and new.

`--llm replay` answers only requests it recorded; after a prompt or code fix the
first request that differs stops the replay. The 422's one-line evidence says
where; this says what, in the words of the fix: the system prompt, the tool
list (added, removed, changed), message N (its role and text or tool calls),
messages added or missing, the model. Input is two canonical requests
(`cassette.request_key`), so it is the same whatever API the agent spoke.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

MAX_LINE = 160
MAX_LINES = 40  # a diff longer than this is cut, and says so


def _clip(text: str, other: str | None = None) -> str:
    """`text` cut to MAX_LINE; against `other` (its counterpart in the diff), a window that starts just
    before the first character that differs, so a change at the end of a long prompt stays visible."""
    if len(text) <= MAX_LINE:
        return text
    start = 0
    if other is not None:
        first = next((i for i, (a, b) in enumerate(zip(text, other, strict=False)) if a != b),
                     min(len(text), len(other)))
        start = max(0, first - 40) if first > MAX_LINE - 40 else 0
    head = "..." if start else ""
    piece = text[start:]
    return head + (piece if len(head) + len(piece) <= MAX_LINE else piece[: MAX_LINE - 3 - len(head)] + "...")


def _render(message: dict[str, Any]) -> list[str]:
    """A canonical message as text lines: its content, then one line per tool call."""
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True) if content else ""
    lines = text.splitlines() or ([""] if not message.get("tool_calls") else [])
    lines += [f"tool call {c.get('name')}({c.get('arguments')})" for c in message.get("tool_calls") or []]
    if message.get("tool_call_id"):
        lines = [f"[result of {message['tool_call_id']}] {line}" for line in lines]
    return lines


def _text_diff(old: list[str], new: list[str]) -> list[str]:
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        removed, added = old[i1:i2], new[j1:j2]
        out += [f"    - {_clip(line, added[k] if k < len(added) else None)}" for k, line in enumerate(removed)]
        out += [f"    + {_clip(line, removed[k] if k < len(removed) else None)}" for k, line in enumerate(added)]
    return out


def _tool_names(key: dict[str, Any]) -> dict[str, str]:
    out = {}
    for raw in key.get("tools") or []:
        tool = json.loads(raw)
        name = (tool.get("function") or {}).get("name") or tool.get("name") or raw
        out[str(name)] = raw
    return out


def request_diff(expected: dict[str, Any], received: dict[str, Any]) -> list[str]:
    """What differs between the recorded request and the one received, one finding per block."""
    lines: list[str] = []
    if expected.get("model") != received.get("model"):
        lines.append(f"model changed: {expected.get('model')!r} -> {received.get('model')!r}")
    exp, got = expected.get("messages") or [], received.get("messages") or []
    for i in range(min(len(exp), len(got))):
        e, g = exp[i], got[i]
        if e == g:
            continue
        if e.get("role") == g.get("role") == "system":
            what = "system prompt" if i == 0 else f"message {i} (system)"
            lines.append(f"{what} changed:")
        elif e.get("role") != g.get("role"):
            lines.append(f"message {i}: role {e.get('role')} -> {g.get('role')}:")
        else:
            lines.append(f"message {i} ({e.get('role')}) changed:")
        lines += _text_diff(_render(e), _render(g))
    if len(got) > len(exp):
        lines.append(f"{len(got) - len(exp)} message(s) more than recorded, from message {len(exp)}:")
        lines += [f"    + {g.get('role')}: {_clip(' | '.join(_render(g)))}" for g in got[len(exp):]]
    elif len(exp) > len(got):
        lines.append(f"{len(exp) - len(got)} recorded message(s) missing, from message {len(got)}:")
        lines += [f"    - {e.get('role')}: {_clip(' | '.join(_render(e)))}" for e in exp[len(got):]]
    if "tools" in expected and expected.get("tools") != received.get("tools"):
        old, new = _tool_names(expected), _tool_names(received)
        added = sorted(set(new) - set(old))
        removed = sorted(set(old) - set(new))
        changed = sorted(n for n in set(old) & set(new) if old[n] != new[n])
        parts = ([f"+ {', '.join(added)}"] if added else []) + ([f"- {', '.join(removed)}"] if removed else []) + (
            [f"~ {', '.join(changed)} (description or parameters)"] if changed else [])
        lines.append("tool list changed: " + "; ".join(parts))
    if not lines:
        lines.append("no difference in model, messages or tools (a repeat beyond the recorded ones?)")
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"... {len(lines) - MAX_LINES} more line(s)"]
    return lines


__all__ = ["request_diff"]
