"""What the command line shows of the log: the user's lines, not the libraries' chatter.

Without a handler, Python prints every WARNING of any library to stderr (its "last resort"), which is
how MCP's shutdown notes and uvicorn's tracebacks reached the terminal. The CLI installs one handler
instead: by default wt-otel's own warnings (one line each, no traceback) and other libraries' errors;
`-v` adds info lines and the libraries' warnings, `-vv` everything with tracebacks. `wt-otel serve`
replaces it with its own timestamped log (`--log-level`).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from wt_otel.serve.logs import _MARK


def _ours(record: logging.LogRecord) -> bool:
    """A record of wt-otel's own loggers (`wt_otel`, `wt_otel.*`), not a library's."""
    return record.name == "wt_otel" or record.name.startswith("wt_otel.")


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is at the time (a test runner swaps it), never a closed stream."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


class CliFilter(logging.Filter):
    """Which records reach the terminal at a verbosity (0 default, 1 `-v`, 2 `-vv`)."""

    def __init__(self, verbosity: int) -> None:
        super().__init__()
        self.verbosity = verbosity

    def filter(self, record: logging.LogRecord) -> bool:
        ours = _ours(record)
        if self.verbosity >= 2:
            return True
        if self.verbosity == 1:
            return ours or record.levelno >= logging.WARNING
        return record.levelno >= (logging.WARNING if ours else logging.ERROR)


class CliFormatter(logging.Formatter):
    """`warning: message` for wt-otel's own lines, `error: mcp.client: message` for a library's; a traceback
    only at `-vv` (by default the exception's type and message close the line)."""

    def __init__(self, verbosity: int) -> None:
        super().__init__()
        self.verbosity = verbosity

    def format(self, record: logging.LogRecord) -> str:
        where = "" if _ours(record) else f"{record.name}: "
        line = f"{record.levelname.lower()}: {where}{record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            if self.verbosity >= 2:
                line += "\n" + self.formatException(record.exc_info)
            else:
                exc = record.exc_info[1]
                line += f" ({type(exc).__name__}: {exc})" if str(exc) else f" ({type(exc).__name__})"
        return line


def configure_cli_logging(verbosity: int = 0) -> None:
    """Install the CLI's one stderr handler on the root logger (replacing an earlier one)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
    handler = _StderrHandler()
    handler.addFilter(CliFilter(verbosity))
    handler.setFormatter(CliFormatter(verbosity))
    setattr(handler, _MARK, True)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity == 1 else logging.WARNING)
