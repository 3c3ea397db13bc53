"""wt-otel: OpenTelemetry traces of LLM agents in, hermetic regression tests out."""

__version__ = "0.1.0"
