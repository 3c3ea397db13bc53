"""A per-kind budget for repeated log lines.

One misconfigured producer (content capture off, an unknown dialect) makes every session it sends
carry the same finding: serve at a few thousand sessions a second would write as many warnings, and
bury everything else in its log. The counts stay exact in the metrics; the log keeps a sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class LogThrottle:
    """Let the first `burst` lines of each kind through per `period` seconds and hold back the rest.

    `admit(kind)` says whether to log this line, and how many lines of that kind were held back in the
    period that just ended (0 if none), for the caller to say so once instead of silently dropping them.
    """

    def __init__(self, burst: int = 5, period: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst, self.period, self.clock = burst, period, clock
        self._window: dict[str, tuple[float, int, int]] = {}  # kind -> (window start, logged, held back)

    def admit(self, kind: str) -> tuple[bool, int]:
        now = self.clock()
        start, logged, held = self._window.get(kind, (now, 0, 0))
        reported = 0
        if now - start >= self.period:
            start, logged, reported, held = now, 0, held, 0
        if logged < self.burst:
            self._window[kind] = (start, logged + 1, held)
            return True, reported
        self._window[kind] = (start, logged, held + 1)
        return False, reported

    def held_back(self) -> dict[str, int]:
        """Lines held back in each kind's current period (for a last word at shutdown)."""
        return {kind: held for kind, (_, _, held) in self._window.items() if held}
