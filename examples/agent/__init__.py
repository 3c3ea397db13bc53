"""wt-otel's reference agent: a Contract C (inject protocol) endpoint built on the OpenAI Agents SDK.

Its tools come from an MCP server, its model from an OpenAI-compatible Chat Completions endpoint, and it
emits OTel GenAI telemetry when asked, so it can both produce incidents and replay them. See README.md.
"""

from .config import AgentConfig
from .server import create_app, start_in_thread

__all__ = ["AgentConfig", "create_app", "start_in_thread"]
