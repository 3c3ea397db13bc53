"""serve's log (issue 12): levels, text or JSON with timestamps, and one clear line for a busy port or bad TLS."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) +\S")


def serve(tmp_path: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wt_otel.cli", "serve", "--data-dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_busy_port_is_one_line_naming_the_port_and_the_cause(tmp_path: Path, busy_port: int,
                                                               transport: str) -> None:
    other = "http" if transport == "grpc" else "grpc"
    done = serve(tmp_path, f"--{transport}-endpoint", f"127.0.0.1:{busy_port}", f"--{other}-endpoint", "127.0.0.1:0")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # not gRPC core's `E1201 … add_port.cc:83]` lines as well
    assert TEXT_LINE.match(lines[0]) and " ERROR " in lines[0]
    assert f"127.0.0.1:{busy_port}: address already in use" in lines[0]
    assert "[Errno" not in lines[0] and "GRPC_VERBOSITY" not in lines[0]


def test_a_bad_tls_key_is_reported_as_a_key_problem_not_a_port_problem(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    key = tmp_path / "key.pem"
    key.write_text("not a key\n")
    done = serve(tmp_path, "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                 "--tls-cert", str(cert), "--tls-key", str(key))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"TLS key {key} is not a PEM private key" in lines[0] and "listen" not in lines[0]


def openssl_pair(directory: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl CLI to make a self-signed certificate")
    directory.mkdir()
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_a_key_that_is_not_the_certificates_is_named(tmp_path: Path) -> None:
    cert_a, _ = openssl_pair(tmp_path / "a")
    _, key_b = openssl_pair(tmp_path / "b")
    done = serve(tmp_path, "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                 "--tls-cert", str(cert_a), "--tls-key", str(key_b))
    assert done.returncode == 1 and f"TLS key {key_b} does not belong to the certificate {cert_a}" in done.stderr


def run_until_listening(tmp_path: Path, *args: str) -> tuple[str, str]:
    """Start serve, wait until it has started (its /healthz answers), SIGTERM it; (stdout, stderr)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "wt_otel.cli", "serve", "--data-dir", str(tmp_path / "data"),
                             "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", f"127.0.0.1:{port}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                break
        except OSError:
            time.sleep(0.1)
    time.sleep(0.3)  # the lines after the receivers started
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return out, err


def test_every_text_line_has_a_timestamp_and_a_level(tmp_path: Path) -> None:
    out, err = run_until_listening(tmp_path)
    lines = [line for line in (out + err).splitlines() if line]
    assert any("OTLP/HTTP listening on" in line for line in lines) and any("stopped:" in line for line in lines)
    assert all(TEXT_LINE.match(line) for line in lines), lines


def test_json_lines_and_log_level_warning_hides_info(tmp_path: Path) -> None:
    out, err = run_until_listening(tmp_path, "--log-format", "json", "--log-level", "debug")
    entries = [json.loads(line) for line in out.splitlines() if line]
    assert {"time", "level", "logger", "message"} <= set(entries[0])
    assert any(e["message"].startswith("OTLP/gRPC listening on") for e in entries)
    quiet_out, _ = run_until_listening(tmp_path, "--log-level", "warning")
    assert "listening" not in quiet_out


def test_log_configuration_routes_by_level() -> None:
    import io
    import logging

    from wt_otel.serve.logs import configure

    out, err = io.StringIO(), io.StringIO()
    log = configure("info", "text", stdout=out, stderr=err)
    log.debug("hidden")
    log.info("shown")
    log.warning("careful")
    logging.getLogger("grpc.core").debug("E1201 core line")
    assert "shown" in out.getvalue() and "hidden" not in out.getvalue() and "careful" not in out.getvalue()
    assert TEXT_LINE.match(err.getvalue()) and "careful" in err.getvalue()
    configure("warning")  # leave the root logger as the other tests expect
