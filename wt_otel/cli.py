"""The `wt-otel` command line.

Each command is a thin shell over a library function: parse flags, call, map
the outcome to an exit code (0 ok, 1 some inputs had errors, 2 usage).
"""

from __future__ import annotations

import click

from wt_otel import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wt-otel")
def main() -> None:
    """Turn OpenTelemetry traces of LLM agents into hermetic regression tests."""


if __name__ == "__main__":  # pragma: no cover
    main()
