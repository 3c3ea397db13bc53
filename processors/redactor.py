"""The redactor: scrub secrets and PII from a Session before anything is written.

Off by default (`RedactorConfig.enabled`): redaction changes what replay sees,
so it is a decision, not a surprise. When on, every string value in the
transcript, system instructions, witnessed call arguments/results/errors,
LLM call messages and omitted parts is searched with the built-in patterns
(email, api_key, bearer, card — card numbers only when the Luhn check passes)
and the user's patterns; values under the configured object keys (e.g.
`password`) are blanked whole. Structural fields (`type`, `role`, `id`,
`name`, ...) are left alone so the files stay valid contracts.

The session then carries `redaction = {"applied": true, "patterns": [...],
"attribute_keys": [...], "replacements": N}`; the envelope and universe
writers copy it, so a reader knows the fixtures were scrubbed (and by what).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wt_otel.components import CompletedSession, StageContext, StageType
from wt_otel.model.session import Session
from wt_otel.serve.config import RedactorConfig

BUILTIN_PATTERNS: dict[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "api_key": r"\b(?:sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}"
               r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abprs]-[A-Za-z0-9-]{10,})",
    "bearer": r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)",
    "card": r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])",
}
STRUCTURAL_KEYS = frozenset({"type", "role", "id", "tool_call_id", "name", "tool_name", "span_id", "trace_id",
                             "finish_reason", "mime_type", "modality"})


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum card numbers carry: keeps order ids and timestamps from being 'cards'."""
    nums = [int(c) for c in digits if c.isdigit()]
    if not 13 <= len(nums) <= 19:
        return False
    total = 0
    for i, n in enumerate(reversed(nums)):
        if i % 2:
            n *= 2
            if n > 9:
                n -= 9
        total += n
    return total % 10 == 0


@dataclass(slots=True)
class _Pattern:
    name: str
    regex: re.Pattern[str]
    check: Callable[[str], bool] | None = None


class Redactor:
    """`process(session, spans)` scrubs the session in place (when enabled) and marks it."""

    def __init__(self, config: RedactorConfig | None = None) -> None:
        self.config = config or RedactorConfig()
        self.patterns = [_Pattern(n, re.compile(BUILTIN_PATTERNS[n]), luhn_ok if n == "card" else None)
                         for n in self.config.builtins]
        self.patterns += [_Pattern(p.name, re.compile(p.regex)) for p in self.config.patterns]
        self.keys = frozenset(k.lower() for k in self.config.attribute_keys)
        self._count = 0

    def redact_text(self, text: str) -> str:
        for pattern in self.patterns:
            text = pattern.regex.sub(functools.partial(self._replace, pattern=pattern), text)
        return text

    def _replace(self, m: re.Match[str], pattern: _Pattern) -> str:
        if pattern.check and not pattern.check(m.group(0)):
            return m.group(0)
        self._count += 1
        mark = self.config.replacement.format(name=pattern.name)
        if "secret" in pattern.regex.groupindex and m.group("secret") is not None:
            start, end = m.span("secret")
            whole = m.group(0)
            return whole[:start - m.start()] + mark + whole[end - m.start():]
        return mark

    def redact(self, value: Any, key: str | None = None) -> Any:
        """A copy of a JSON-like value with strings scrubbed and configured keys blanked."""
        if key is not None and key.lower() in self.keys and value not in (None, ""):
            self._count += 1
            return self.config.replacement.format(name=key)
        if isinstance(value, str):
            return value if key in STRUCTURAL_KEYS else self.redact_text(value)
        if isinstance(value, dict):
            return {k: self.redact(v, k) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact(v) for v in value]
        return value

    def process(self, session: Session, spans: object = None) -> Session:
        if not self.config.enabled:
            return session
        self._count = 0
        session.messages = self.redact(session.messages)
        session.system_instructions = self.redact(session.system_instructions)
        session.omitted_parts = self.redact(session.omitted_parts)
        for call in session.witnessed_calls:
            call.args = self.redact(call.args)
            call.result = self.redact(call.result)
            call.error = self.redact(call.error)
        for llm in session.llm_calls:
            llm.input_messages = self.redact(llm.input_messages)
            llm.output_messages = self.redact(llm.output_messages)
            llm.system_instructions = self.redact(llm.system_instructions)
            llm.error_message = self.redact(llm.error_message)
        session.redaction = {
            "applied": True,
            "patterns": [p.name for p in self.patterns],
            "attribute_keys": sorted(self.keys),
            "replacements": self._count,
        }
        return session

    def on_session(self, done: CompletedSession) -> None:
        self.process(done.session, done.spans)

    def close(self) -> None:
        pass


def _create(config: RedactorConfig, ctx: StageContext, _next: None) -> Redactor:
    return Redactor(config)


STAGE = StageType("redactor", "session", _create, RedactorConfig,
                  description="scrub secrets and PII before anything is written (off by default)")
