"""The world around wt-otel in the demo, the auto-replay tests and the loop benchmark.

- `crm_tools()`: the "production" tools, a small CRM behind a real MCP server. It is served by wt-otel's
  universe server from a hand-written universe: a stand-in for a live tool service, chosen because it
  needs nothing installed (the recorded universe the replay uses is a different one, made from telemetry).
- `ProductionAgent`: the reference agent (examples/agent) as its own process, live: the scripted fake LLM,
  the CRM tools, and its real OTel GenAI instrumentation exporting OTLP/HTTP to `wt-otel serve`. A
  process, because the instrumentations patch `openai` and the Agents SDK process-wide.
- `ResultSink`: a local OTLP/HTTP endpoint (wt-otel's own receivers, in-process) that keeps what it is
  sent with the arrival time: where result spans go when no tracing UI is configured.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wt_otel.contracts.universe import load_universe
from wt_otel.model.spans import Record, SpanRecord
from wt_otel.replay.mcp_server import UniverseMCPServer
from wt_otel.replay.universe import RecordedUniverse
from wt_otel.serve.metrics import Metrics
from wt_otel.serve.pipeline import PipelineAdmission
from wt_otel.serve.receivers import start_receivers
from wt_otel.serve.receivers.config import ReceiversConfig

ROOT = Path(__file__).resolve().parents[2]
CRM = {
    "windtunnel_universe": 1,
    "tools": [{"name": "client_lookup", "description": "Look up a client record by name.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}],
    "recordings": [{"tool_name": "client_lookup", "args": {"query": "Bluewing"},
                    "result": {"name": "Bluewing", "email": "ops@bluewing.example", "phone": "+1-555-0100"}}],
}


def free_port() -> int:
    """A port free now, chosen below the kernel's ephemeral range. The demo hands it to the candidate agent at
    start and binds it only at replay time; a port from the ephemeral range (what binding port 0 gives) can be
    taken meanwhile by any outgoing connection, and the replay's LLM server then fails with EADDRINUSE (seen
    in CI)."""
    low = ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # that whole stretch in use: the kernel's choice, as before
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ephemeral_low() -> int:
    """The lowest port the kernel gives outgoing connections (Linux; elsewhere, the lowest default of any OS)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def crm_tools() -> UniverseMCPServer:
    """The production CRM as an MCP server on a free port (a context manager; `.url` once started)."""
    return UniverseMCPServer(RecordedUniverse(load_universe(CRM)), port=0)


def inject(base_url: str, session_id: str, text: str, incident: str | None = None, timeout_s: float = 30) -> dict:
    """One Contract C turn; `incident` sets `wt_incident`, which the agent puts on the turn's root span."""
    body: dict[str, Any] = {"wt_inject": 1, "session_id": session_id, "text": text, "timeout_s": timeout_s}
    if incident:
        body["wt_incident"] = incident
    request = urllib.request.Request(base_url + "/wt/inject", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s + 10) as response:
        return json.loads(response.read())


class ProductionAgent:
    """`python -m examples.agent` live, its telemetry to `otlp_endpoint` (base URL) and/or `otlp_file`, and
    to each of `extra_otlp_endpoints` (base URLs, e.g. a tracing UI beside the collector)."""

    def __init__(self, llm_url: str, tools_url: str, otlp_endpoint: str | None = None, otlp_file: Path | None = None,
                 service_name: str = "crm-agent", extra_otlp_endpoints: Sequence[str] = ()) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "WT_AGENT_MCP_URL": tools_url,
               "WT_AGENT_OPENAI_BASE_URL": llm_url, "OTEL_SERVICE_NAME": service_name,
               "OTEL_BSP_SCHEDULE_DELAY": "100"}  # the SDK's batch delay is 5 s: export each turn promptly
        if otlp_endpoint:
            env["WT_AGENT_OTLP_ENDPOINT"] = otlp_endpoint
        if otlp_file:
            env["WT_AGENT_OTLP_FILE"] = str(otlp_file)
        if extra_otlp_endpoints:
            env["WT_AGENT_OTLP_EXTRA_ENDPOINTS"] = ",".join(extra_otlp_endpoints)
        self.proc = subprocess.Popen([sys.executable, "-m", "examples.agent", "--port", "0"], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = [self.proc.stdout.readline() for _ in range(2)]
        match = re.search(r"listening on (http://\S+)", lines[-1])
        if not match:
            self.proc.kill()
            raise RuntimeError(f"the production agent did not start: {lines} {self.proc.stderr.read()}")
        self.url = match.group(1)

    def stop(self, timeout: float = 20) -> None:
        """SIGINT: the agent shuts its telemetry down, which flushes the spans still batched."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()

    def __enter__(self) -> ProductionAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ResultSink:
    """A local OTLP/HTTP receiver that keeps every span it gets, with the time it arrived."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, SpanRecord]] = []
        self._cond = threading.Condition()
        self._receivers = start_receivers(ReceiversConfig(grpc_endpoint=None, http_endpoint="127.0.0.1:0"), self,
                                          Metrics())
        self.url = f"http://127.0.0.1:{self._receivers.http_port}"

    def offer(self, records: Sequence[Record]) -> PipelineAdmission:  # the Pipeline interface the receivers call
        now = time.time()
        with self._cond:
            self.spans += [(now, r) for r in records if isinstance(r, SpanRecord)]
            self._cond.notify_all()
        return PipelineAdmission.ACCEPTED

    def wait_for(self, predicate: Any, timeout: float) -> list[tuple[float, SpanRecord]]:
        """The spans so far once `predicate(spans)` holds (or the timeout passed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.spans) and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            return list(self.spans)

    def stop(self) -> None:
        self._receivers.stop(grace=1)


# ---------------------------------------------------------------- recorded telemetry, sent again

_TRACE_ID = re.compile(r'"traceId":\s*"([0-9a-f]{32})"')


def reidentify(lines: Sequence[str], renames: dict[str, str]) -> list[str]:
    """OTLP/JSON lines as another occurrence of the same traffic: fresh trace ids, and each string in
    `renames` (a conversation id, an incident id) replaced where it appears as a whole JSON string value.

    Sessions are keyed by trace id and merged by conversation id, and the replay queue deduplicates by
    incident ref, so all three must change for the copy to count as a new incident.
    """
    ids = {t: os.urandom(16).hex() for line in lines for t in _TRACE_ID.findall(line)}
    out = []
    for line in lines:
        line = _TRACE_ID.sub(lambda m: f'"traceId": "{ids[m.group(1)]}"', line)
        for old, new in renames.items():
            line = line.replace(json.dumps(old), json.dumps(new))
        out.append(line)
    return out


def send_otlp_json(base_url: str, lines: Sequence[str], timeout: float = 10) -> None:
    """POST each OTLP/JSON line (one ExportTraceServiceRequest) to `<base_url>/v1/traces`, as an exporter would."""
    for line in lines:
        request = urllib.request.Request(base_url + "/v1/traces", data=line.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            if response.status != 200:
                raise RuntimeError(f"{base_url}/v1/traces answered {response.status}")
