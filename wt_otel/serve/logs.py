"""serve's log: one line per event, each with a UTC timestamp and a level, as text or JSON.

`--log-level` filters (debug shows gRPC core's own lines, routed to the
`grpc.core` logger); `--log-format json` writes one JSON object per line
(`time`, `level`, `logger`, `message`) for a log shipper. Records below
WARNING go to stdout, WARNING and above to stderr, as before the log had
levels, so `wt-otel serve | grep wrote` and `2>errors.log` keep working.

Lines carry text from telemetry (incident ids, session names, span names):
both formats escape every control character of a message but its newlines
(`wt_otel._util.terminal.shown_lines`), so an escape sequence in a trace
never reaches the terminal; call sites escape the telemetry they embed with
`shown()`, newlines included, so it cannot forge a line either.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal, TextIO

from wt_otel._util.terminal import shown_lines

__all__ = ["LEVELS", "configure", "serve_log"]

LEVELS = ("debug", "info", "warning", "error")
serve_log = logging.getLogger("wt_otel.serve")
_MARK = "_wt_otel_serve_handler"


def _timestamp(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


class TextFormatter(logging.Formatter):
    """`2026-12-01T01:21:06.123Z INFO    message`; other loggers than serve's own add their name."""

    def format(self, record: logging.LogRecord) -> str:
        name = "" if record.name == serve_log.name else f"{record.name}: "
        line = f"{_timestamp(record.created)} {record.levelname:<7} {name}{shown_lines(record.getMessage())}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": _timestamp(record.created), "level": record.levelname, "logger": record.name,
                 "message": shown_lines(record.getMessage())}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _Below(logging.Filter):
    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < self.level


def configure(level: str = "info", fmt: Literal["text", "json"] = "text", *, stdout: TextIO | None = None,
              stderr: TextIO | None = None) -> logging.Logger:
    """Route every logger through one timestamped format at `level`; returns serve's own logger."""
    formatter: logging.Formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
    out = logging.StreamHandler(stdout or sys.stdout)
    out.addFilter(_Below(logging.WARNING))
    err = logging.StreamHandler(stderr or sys.stderr)
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(formatter)
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    numeric = getattr(logging, level.upper())
    root.setLevel(numeric)
    # third-party libraries chatter at INFO (httpx, mcp); keep them at WARNING unless debugging
    for noisy in ("httpx", "httpcore", "mcp", "uvicorn", "uvicorn.access", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING)
    return serve_log
