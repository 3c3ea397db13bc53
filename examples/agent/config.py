"""The reference agent's settings, read from the environment.

Everything is an environment variable because that is how a bench configures an
endpoint it did not write (0002, "notes for endpoint authors"): the driver only
knows the URL; which tools, which model and which prompt are endpoint business.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8647  # Contract C's spec'd default: a zero-config driver finds us
DEFAULT_MCP_URL = "http://127.0.0.1:8648/mcp"  # `wt-otel universe serve` / `wt-otel run`'s default
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_AGENT_NAME = "wt-reference-agent"
DEFAULT_INSTRUCTIONS = (
    "You are an operations assistant. Use the available tools to look facts up and answer only from "
    "tool evidence, briefly. If the tools do not have the answer, say so."
)
DUMMY_API_KEY = "sk-wt-reference-agent"  # local OpenAI-compatible servers (the cassette server) ignore it
NO_TOOLS = {"", "none", "off"}


@dataclass(frozen=True)
class AgentConfig:
    """What the agent talks to. `mcp_url=None` runs without tools; `openai_base_url=None` is the client default."""

    mcp_url: str | None = DEFAULT_MCP_URL
    openai_base_url: str | None = None
    openai_api_key: str = DUMMY_API_KEY
    model: str = DEFAULT_MODEL
    instructions: str = DEFAULT_INSTRUCTIONS
    agent_name: str = DEFAULT_AGENT_NAME
    # telemetry: either destination turns it on (see wt_otel/recording.py)
    otlp_endpoint: str | None = None  # the traces URL itself (".../v1/traces" for http/protobuf)
    otlp_extra_endpoints: tuple[str, ...] = ()  # more traces URLs, same protocol: e.g. a collector and a UI
    otlp_protocol: str = "http/protobuf"  # or "grpc"
    otlp_file: str | None = None  # OTLP/JSON lines, as the Collector `file` exporter writes them
    service_name: str = DEFAULT_AGENT_NAME
    # follow the tools and model URLs a /wt/reset names (a replay's free ports); off: keep the configured ones,
    # as an agent that cannot be pointed elsewhere would (the bench then sees it bypass the recorded tools)
    follow_reset_urls: bool = True

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentConfig:
        """Build from `WT_AGENT_*` variables, falling back to the standard OpenAI / OTel ones."""
        env = dict(os.environ if env is None else env)
        mcp_url = env.get("WT_AGENT_MCP_URL", DEFAULT_MCP_URL).strip()
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
        protocol = "grpc" if protocol.strip() == "grpc" else "http/protobuf"
        return cls(
            mcp_url=None if mcp_url.lower() in NO_TOOLS else mcp_url,
            openai_base_url=env.get("WT_AGENT_OPENAI_BASE_URL") or env.get("OPENAI_BASE_URL") or None,
            openai_api_key=env.get("WT_AGENT_OPENAI_API_KEY") or env.get("OPENAI_API_KEY") or DUMMY_API_KEY,
            model=env.get("WT_AGENT_MODEL") or DEFAULT_MODEL,
            instructions=_instructions(env),
            agent_name=env.get("WT_AGENT_NAME") or DEFAULT_AGENT_NAME,
            otlp_endpoint=_traces_endpoint(env, protocol),
            otlp_extra_endpoints=tuple(_traces_url(base.strip(), protocol)
                                       for base in env.get("WT_AGENT_OTLP_EXTRA_ENDPOINTS", "").split(",")
                                       if base.strip()),
            otlp_protocol=protocol,
            otlp_file=env.get("WT_AGENT_OTLP_FILE") or None,
            service_name=env.get("OTEL_SERVICE_NAME") or env.get("WT_AGENT_NAME") or DEFAULT_AGENT_NAME,
            follow_reset_urls=env.get("WT_AGENT_FOLLOW_RESET_URLS", "1").strip().lower() not in ("0", "false", "no"),
        )


def _instructions(env: dict[str, str]) -> str:
    """`WT_AGENT_INSTRUCTIONS` (text) wins over `WT_AGENT_INSTRUCTIONS_FILE` (a path); else the default."""
    if text := env.get("WT_AGENT_INSTRUCTIONS"):
        return text
    if path := env.get("WT_AGENT_INSTRUCTIONS_FILE"):
        return Path(path).read_text(encoding="utf-8").strip()
    return DEFAULT_INSTRUCTIONS


def _traces_endpoint(env: dict[str, str], protocol: str) -> str | None:
    """The OTLP traces URL, resolved the way the OTel SDK resolves its standard variables.

    `WT_AGENT_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_ENDPOINT` are base URLs (http/protobuf appends
    `/v1/traces`); `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as it is.
    """
    base = env.get("WT_AGENT_OTLP_ENDPOINT")
    if not base and (full := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return full
    base = base or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not base:
        return None
    return _traces_url(base, protocol)


def _traces_url(base: str, protocol: str) -> str:
    return base if protocol == "grpc" else base.rstrip("/") + "/v1/traces"
