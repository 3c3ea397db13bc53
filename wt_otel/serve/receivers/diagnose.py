"""One clear line for the two ways a receiver fails to start: a bad TLS key/cert, and a port it cannot bind.

gRPC core writes its own lines straight to file descriptor 2
(`E1130 … add_port.cc:83] Failed to add port to server: …`) and tells Python
only "Failed to bind … set GRPC_VERBOSITY=debug"; and it reports a bad TLS
key as a failure to add the port. So: TLS files are checked with the `ssl`
module before either transport starts, and while grpc binds, fd 2 is
captured; its lines go to the `grpc.core` logger (DEBUG) and the real cause
(`Address already in use`) goes into the one error message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["bind_cause", "captured_fd2", "check_tls_files"]

core_log = logging.getLogger("grpc.core")
_CORE_LINE = re.compile(r"^[EWID]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")
_BIND_ERROR = re.compile(r"Error in bind for address '[^']*': ([^)]+)\)")


def check_tls_files(cert: Path, key: Path) -> None:
    """Raise ValueError naming the file and the problem (not a PEM certificate / key, or they do not match)."""
    for path, marker, what in ((cert, "-----BEGIN CERTIFICATE-----", "a PEM certificate"),
                               (key, "PRIVATE KEY-----", "a PEM private key")):
        try:
            text = Path(path).read_bytes()
        except OSError as e:
            raise ValueError(f"cannot read TLS file {path}: {e.strerror or e}") from None
        if marker.encode() not in text:
            raise ValueError(f"TLS {'certificate' if path == cert else 'key'} {path} is not {what} "
                             f"(no {marker.strip('-')!r} block)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert), str(key))
    except ssl.SSLError as e:
        reason = e.reason or str(e)
        if "MISMATCH" in str(reason).upper():
            raise ValueError(f"TLS key {key} does not belong to the certificate {cert}") from None
        raise ValueError(f"TLS key {key} / certificate {cert} cannot be loaded: {reason}") from None


@contextlib.contextmanager
def captured_fd2() -> Iterator[list[str]]:
    """Capture what is written to file descriptor 2 in the block (gRPC core's own log lines); afterwards gRPC
    core's lines go to the `grpc.core` logger and anything else back to stderr. The list fills on exit."""
    lines: list[str] = []
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2 at all: nothing to capture
        yield lines
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode("utf-8", "replace").splitlines())
    for line in lines:
        if _CORE_LINE.match(line):
            core_log.debug("%s", line)
        else:
            with contextlib.suppress(Exception):
                print(line, file=sys.stderr)


def bind_cause(lines: list[str]) -> str | None:
    """The OS's reason from gRPC core's bind failure (e.g. `Address already in use`), lower-cased."""
    for line in lines:
        if m := _BIND_ERROR.search(line):
            return m.group(1).strip().lower()
    for line in lines:
        if "Failed to add port" in line or "Unable to create secure server" in line:
            return line.split("] ", 1)[-1].strip()
    return None
