"""A real Arize Phoenix on loopback for the opt-in UI tests (`make test-ui`), and headless Chromium to look at it.

Phoenix runs from its own venv (`make ui-env` -> .venv-ui, or $WT_OTEL_UI_VENV), never from the project's:
it is heavy and pins many packages. Everything here is stdlib, so importing this module costs nothing when
the UI venv is absent; only `start_phoenix` needs it, and it raises `PhoenixUnavailable` (a test failure,
not a skip) when it is missing or Phoenix does not come up.

What the pinned Phoenix (20.26.1) offers, as used here:
- OTLP/HTTP protobuf at `{base}/v1/traces` (415 to OTLP/JSON) and OTLP gRPC on PHOENIX_GRPC_PORT;
  spans go to the project named by the `x-project-name` HTTP header, else the `openinference.project.name`
  resource attribute, else `default`.
- `GET /healthz` -> 200 "OK" once the app is up (after its ~2 s of database migrations).
- `GET /v1/projects` (ids are GraphQL global ids, "Project:1" base64) and
  `GET /v1/projects/{name_or_id}/spans?trace_id=..&name=..&span_kind=..&attribute=key:value`: spans with
  `span_kind` (AGENT/LLM/TOOL/...), flat `attributes`, `parent_id`, `status_code`, paginated by `next_cursor`.
  `/spans/otlpv1` is the same search in OTLP JSON shape, with a `links` field that this version always
  leaves null: Phoenix does not store OTLP span links (its decoder never reads them).
- gen_ai -> OpenInference span kinds, at ingestion (phoenix/trace/gen_ai/conversion.py): gen_ai.operation.name
  chat/text_completion/generate_content -> LLM, embeddings -> EMBEDDING, execute_tool -> TOOL,
  retrieval -> RETRIEVER, invoke_agent/create_agent -> AGENT, any other operation -> UNKNOWN.
- The trace page: `/projects/{project global id}/traces/{trace id}` (a span tree + the selected span's
  attributes over the project's trace table); `/redirects/traces/{trace id}` resolves the project itself.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Phoenix binds its ports seconds after they are chosen, while every `/healthz` poll is an outgoing connection:
# the demo's helper chooses them below the kernel's ephemeral range, where no such connection can take them
from examples.demo.stage import free_port

REPO = Path(__file__).resolve().parents[2]
PHOENIX_VERSION = "20.26.1"  # keep in step with PHOENIX_VERSION in the Makefile
# What the UI tests leave for CI to keep (screenshots, page text, logs); gitignored.
ARTIFACTS = Path(os.environ.get("WT_OTEL_UI_ARTIFACTS") or REPO / "runs" / "ui-artifacts")
# The screenshot in docs/viewing-results.md: made by tests/ui/test_full_loop.py from a real replay, refreshed
# only with WT_OTEL_UPDATE_DOCS_SCREENSHOT=1 (or when missing), so a plain `make test-ui` leaves the tree clean.
DOCS_SCREENSHOT = REPO / "docs" / "img" / "phoenix-replay.png"
START_TIMEOUT_S = 60.0

# Phoenix makes no outbound call with these (no telemetry pixels, web fonts, WASM sandbox download,
# assistant web access) and keeps its log short; PHOENIX_HOST keeps both servers on loopback.
OFFLINE_ENV = {
    "PHOENIX_HOST": "127.0.0.1",
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    "PHOENIX_AGENTS_DISABLE_WEB_ACCESS": "true",
    "PHOENIX_AGENTS_DISABLE_BASH": "true",
    "PHOENIX_AGENTS_DISABLE_GITHUB": "true",
    "PHOENIX_ENABLE_MCP_SERVER": "false",
    "PHOENIX_ENABLE_PROMETHEUS": "false",
    "PHOENIX_LOG_MIGRATIONS": "false",
}
# Variables of the parent environment that would point Phoenix elsewhere (a real database, auth, a collector).
_SCRUBBED_PREFIXES = ("PHOENIX_", "OTEL_")

# Chromium as the machine notes start it (no background traffic to a closed network, a fresh profile per run).
# Those flags alone still leave DNS lookups of update/accounts/optimizationguide/autofill hosts (seen with
# strace); the resolver rule answers every name but loopback with NOTFOUND locally, so nothing leaves the host.
# Reduced motion: without it the trace page's slide-over was often captured mid-animation (translucent, shifted;
# 2 of 4 renders of one page differed), with it 4 of 4 were identical and complete.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--force-prefers-reduced-motion",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-extensions", "--disable-default-apps", "--disable-domain-reliability",
                  "--disable-client-side-phishing-detection", "--no-pings", "--disable-breakpad",
                  "--disable-features=OptimizationHints,OptimizationGuideModelDownloading,AutofillServerCommunication,"
                  "MediaRouter,Translate,CertificateTransparencyComponentUpdater",
                  "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
                  "--mute-audio", "--hide-scrollbars")


class PhoenixUnavailable(RuntimeError):
    """Phoenix (or Chromium) cannot be used: not installed, or did not come up. Fails `make test-ui` loudly."""


def ui_venv() -> Path:
    return Path(os.environ.get("WT_OTEL_UI_VENV") or REPO / ".venv-ui")


def phoenix_executable() -> Path:
    exe = ui_venv() / "bin" / "phoenix"
    if not exe.exists():
        raise PhoenixUnavailable(f"Phoenix is not installed: {exe} does not exist (run `make ui-env`, which "
                                 f"creates {ui_venv()} with arize-phoenix=={PHOENIX_VERSION})")
    return exe


@dataclass
class Phoenix:
    """A running Phoenix: its URLs, its log, and read helpers over its REST API."""

    process: subprocess.Popen
    http_port: int
    grpc_port: int
    working_dir: Path
    log_path: Path
    startup_s: float = 0.0
    _project_ids: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def otlp_http_endpoint(self) -> str:
        """For `opentelemetry.exporter.otlp.proto.http.trace_exporter.OTLPSpanExporter(endpoint=...)`."""
        return f"{self.base_url}/v1/traces"

    @property
    def otlp_grpc_endpoint(self) -> str:
        """For the gRPC `OTLPSpanExporter(endpoint=..., insecure=True)`."""
        return f"127.0.0.1:{self.grpc_port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- REST API -----------------------------------------------------------------------------------------

    def get(self, path: str, params: Mapping[str, object] | Sequence[tuple[str, object]] | None = None,
            timeout: float = 10.0):
        """GET a JSON document; `params` may repeat keys (a list of pairs) as Phoenix's filters do."""
        query = urllib.parse.urlencode(list(params.items()) if isinstance(params, Mapping) else params or [])
        url = f"{self.base_url}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"GET {url} -> {exc.code}: {exc.read()[:500]!r}") from exc

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def project_id(self, project: str = "default") -> str:
        """The project's global id (what the UI's URLs carry), e.g. 'UHJvamVjdDox' for Project:1."""
        if project not in self._project_ids:
            for item in self._paged("/v1/projects", []):
                self._project_ids[item["name"]] = item["id"]
        if project not in self._project_ids:
            raise AssertionError(f"Phoenix has no project {project!r}; it has {sorted(self._project_ids)}")
        return self._project_ids[project]

    def spans(self, project: str = "default", *, trace_id: str | None = None, name: str | None = None,
              span_kind: str | None = None, attributes: Mapping[str, object] | None = None,
              otlp: bool = False) -> list[dict]:
        """Spans of a project through `GET /v1/projects/{project}/spans` (all pages), newest first.

        `attributes` filter by exact value (`attribute=key:value`, AND-ed); `otlp=True` asks the `/otlpv1`
        variant (OTLP JSON shape: `links`, base64 ids) instead, which takes no `span_kind` filter."""
        params: list[tuple[str, object]] = []
        if trace_id:
            params.append(("trace_id", trace_id))
        if name:
            params.append(("name", name))
        if span_kind and not otlp:
            params.append(("span_kind", span_kind))
        for key, value in (attributes or {}).items():
            params.append(("attribute", f"{key}:{json.dumps(value) if not isinstance(value, str) else value}"))
        path = f"/v1/projects/{urllib.parse.quote(project, safe='')}/spans" + ("/otlpv1" if otlp else "")
        return list(self._paged(path, params))

    def wait_for_spans(self, trace_id: str, count: int, project: str = "default", timeout: float = 30.0) -> list[dict]:
        """Poll until the trace has at least `count` spans: Phoenix ingests through a queue, asynchronously."""
        deadline = time.monotonic() + timeout
        spans: list[dict] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(AssertionError):  # 404 until the project exists
                spans = self.spans(project, trace_id=trace_id)
                if len(spans) >= count:
                    return spans
            time.sleep(0.25)
        raise AssertionError(f"trace {trace_id}: {len(spans)} of {count} spans in Phoenix after {timeout:.0f} s "
                             f"({[s['name'] for s in spans]}); Phoenix log:\n{self.log_tail()}")

    def span_links(self, trace_id: str, span_id: str, project: str = "default") -> list[dict] | None:
        """The span's links as Phoenix's API shows them, or None when it does not expose links at all
        (20.26.1: the `links` field of `/spans/otlpv1` is always null; links are dropped at ingestion)."""
        for span in self.spans(project, trace_id=trace_id, otlp=True):
            if _otlp_id_hex(span.get("span_id")) == span_id:
                return span.get("links")
        raise AssertionError(f"span {span_id} of trace {trace_id} not in Phoenix")

    def trace_url(self, trace_id: str, project: str = "default", *, selected_span: str | None = None) -> str:
        """The trace page: span tree + selected span details (what the docs screenshot shows). The root span
        is selected unless `selected_span` names another by its Phoenix node id (a span's `id` in `spans()`)."""
        url = f"{self.base_url}/projects/{self.project_id(project)}/traces/{trace_id}"
        return url + (f"?{urllib.parse.urlencode({'selectedSpanNodeId': selected_span})}" if selected_span else "")

    def trace_redirect_url(self, trace_id: str) -> str:
        """A link that needs no project id: the SPA resolves it to `trace_url` (e.g. for an incident's trace)."""
        return f"{self.base_url}/redirects/traces/{trace_id}"

    def _paged(self, path: str, params: list[tuple[str, object]]) -> Iterator[dict]:
        cursor = None
        while True:
            body = self.get(path, [*params, ("limit", 1000)] + ([("cursor", cursor)] if cursor else []))
            yield from body.get("data") or []
            cursor = body.get("next_cursor")
            if not cursor:
                return

    # -- lifecycle ----------------------------------------------------------------------------------------

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to Phoenix's process group (uvicorn shuts down in ~2 s), SIGKILL if it lingers."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)


def start_phoenix(working_dir: Path, *, timeout: float = START_TIMEOUT_S, log_path: Path | None = None) -> Phoenix:
    """Start Phoenix on free loopback ports with a fresh SQLite database in `working_dir`; return once
    `/healthz` answers. Raises PhoenixUnavailable (with the log's tail) if it exits or is not up in time."""
    exe = phoenix_executable()
    working_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_path or working_dir / "phoenix.log"
    http_port, grpc_port = free_port(), free_port()
    while grpc_port == http_port:
        grpc_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}
    env.update(OFFLINE_ENV, PHOENIX_PORT=str(http_port), PHOENIX_GRPC_PORT=str(grpc_port),
               PHOENIX_WORKING_DIR=str(working_dir), PYTHONUNBUFFERED="1")
    env.pop("VIRTUAL_ENV", None)
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen([str(exe), "serve"], env=env, cwd=working_dir, stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    phoenix = Phoenix(process, http_port, grpc_port, working_dir, log_path)
    deadline = started + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PhoenixUnavailable(f"Phoenix exited with {process.returncode} while starting "
                                     f"(log {log_path}):\n{phoenix.log_tail()}")
        if phoenix.healthy():
            phoenix.startup_s = time.monotonic() - started
            return phoenix
        time.sleep(0.25)
    phoenix.stop()
    raise PhoenixUnavailable(f"Phoenix did not answer {phoenix.base_url}/healthz within {timeout:.0f} s "
                             f"(log {log_path}):\n{phoenix.log_tail()}")


@contextlib.contextmanager
def running_phoenix(working_dir: Path | None = None, **kwargs) -> Iterator[Phoenix]:
    with contextlib.ExitStack() as stack:
        if working_dir is None:
            working_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="phoenix-")))
        phoenix = start_phoenix(working_dir, **kwargs)
        stack.callback(phoenix.stop)
        yield phoenix


# -- headless Chromium ----------------------------------------------------------------------------------------

def chromium_executable() -> str:
    exe = os.environ.get("WT_OTEL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe or not os.access(exe, os.X_OK):
        raise PhoenixUnavailable("Chromium is not installed (Debian: `apt-get install -y chromium`; "
                                 ".ci/run does it) - or set WT_OTEL_CHROMIUM to its path")
    return exe


@dataclass
class RenderedPage:
    url: str
    dom: str  # the DOM after the SPA rendered, as HTML
    screenshot: Path | None

    @property
    def text(self) -> str:
        """The DOM's visible text, whitespace collapsed. Phoenix breaks attribute keys at dots for wrapping
        ('wt. verdict'), so those joins are undone: assert on 'wt.verdict' as it was sent."""
        body = re.sub(r"<(script|style|noscript)\b[^>]*>.*?</\1>", " ", self.dom, flags=re.S | re.I)
        text = html.unescape(re.sub(r"<[^>]+>", " ", body))
        text = re.sub(r"\s+", " ", text)
        return re.sub(r"(?<=\w)\. (?=\w)", ".", text)


def render_page(url: str, screenshot: Path | None = None, *, window: tuple[int, int] = (1400, 1000),
                virtual_time_ms: int = 15_000, timeout: float = 90.0) -> RenderedPage:
    """Load `url` in headless Chromium with a fresh profile, let the SPA run for `virtual_time_ms` of virtual
    time (its fetches included), then dump the DOM and, if asked, write a PNG screenshot."""
    args = [chromium_executable(), *CHROMIUM_FLAGS, f"--window-size={window[0]},{window[1]}",
            f"--virtual-time-budget={virtual_time_ms}", "--dump-dom"]
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.unlink(missing_ok=True)
        args.append(f"--screenshot={screenshot}")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        result = subprocess.run([*args, f"--user-data-dir={profile}", url], capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
    if result.returncode != 0 or not result.stdout.strip():
        raise AssertionError(f"chromium exited {result.returncode} on {url}; stderr:\n{result.stderr[-3000:]}")
    if screenshot is not None and not (screenshot.exists() and screenshot.stat().st_size > 0):
        raise AssertionError(f"chromium wrote no screenshot to {screenshot}; stderr:\n{result.stderr[-3000:]}")
    return RenderedPage(url, result.stdout, screenshot)


def _otlp_id_hex(value: str | None) -> str | None:
    """`/otlpv1` ids are base64 of the raw bytes (OTLP JSON proper would be hex); accept either."""
    if not value:
        return None
    if re.fullmatch(r"[0-9a-f]{16}|[0-9a-f]{32}", value):
        return value
    return base64.b64decode(value).hex()
