"""What one `--llm record` run may spend before it is stopped and thrown away.

Apart from the recorder so that the command line can show the defaults without importing it.
The defaults come from an incident: an agent stuck in a loop made 443 model calls (74 MB) in
12 minutes before it was stopped by hand, and its recording replaced the good baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_CALLS = 50
DEFAULT_MAX_SECONDS = 120.0
DEFAULT_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class RecordBudget:
    """What one recorded run may spend before it is stopped and thrown away (0: no limit).

    The defaults stop an agent stuck in a loop within seconds against a fast provider, and within
    two minutes against any; a session that honestly needs more raises them (`--max-llm-calls`,
    `--max-seconds`, `--max-bytes`)."""

    max_calls: int = DEFAULT_MAX_CALLS
    max_seconds: float = DEFAULT_MAX_SECONDS
    max_bytes: int = DEFAULT_MAX_BYTES

    def refuses_call(self, calls: int, seconds: float) -> str | None:
        """Why one more call (after `calls`, `seconds` into the run) is over budget, or None."""
        if self.max_calls and calls >= self.max_calls:
            return (f"--max-llm-calls {self.max_calls} reached: the agent asked for model call "
                    f"#{calls + 1} (an agent in a loop? raise --max-llm-calls if it really needs more)")
        return self.over_time(seconds)

    def over_time(self, seconds: float) -> str | None:
        if self.max_seconds and seconds > self.max_seconds:
            return (f"--max-seconds {self.max_seconds:g} passed: {seconds:.1f} s since the run's first model call "
                    "(raise --max-seconds if the session really takes longer)")
        return None

    def over_bytes(self, size: int, calls: int) -> str | None:
        if self.max_bytes and size > self.max_bytes:
            return (f"--max-bytes {self.max_bytes} exceeded: {size} bytes recorded in {calls} call(s) "
                    "(raise --max-bytes if the session really is this large)")
        return None


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_CALLS", "DEFAULT_MAX_SECONDS", "RecordBudget"]
