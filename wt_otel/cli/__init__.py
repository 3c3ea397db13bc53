"""The `wt-otel` command line.

Each command is a thin shell over a library function: parse flags, call, map
the outcome to an exit code (0 ok, 1 some inputs had errors, 2 usage).

`main` is the click group (the `wt-otel` console script); the commands live in
one module per family and are registered on it here:

    files        schema, validate, import
    serve        serve, flag
    sessions     sessions render
    servers      universe (serve, freeze), cassette (serve, record)
    conformance  conformance
    replay       run, report, check
    surface      surface (fetch, diff, drift)
"""

from __future__ import annotations

import click

from wt_otel import __version__
from wt_otel.cli import conformance, files, replay, serve, servers, sessions, surface


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wt-otel")
def main() -> None:
    """Turn OpenTelemetry traces of LLM agents into hermetic regression tests."""


for _command in (files.schema, files.validate, files.import_, serve.serve, serve.flag, servers.universe,
                 servers.cassette, conformance.conformance, replay.run_, replay.report_, replay.check_,
                 surface.surface, sessions.sessions):
    main.add_command(_command)

__all__ = ["main"]
