"""The `wt-otel` command line.

Each command is a thin shell over a library function: parse flags, call, map
the outcome to an exit code (0 ok, 1 some inputs had errors, 2 usage).

`main` is the click group (the `wt-otel` console script); the commands live in
one module per family, named here and imported only when a command of theirs
runs (or `--help` lists them): `wt-otel import` need not load serve, replay
or the MCP servers, and each family's imports cost start-up time.

    formats      schema, validate
    files        import
    serve        serve, flag
    sessions     sessions list, render
    servers      universe (serve, freeze, add, record), cassette (serve, record)
    conformance  conformance
    replay       run, report, check
    surface      surface (fetch, diff, drift)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import click

from wt_otel import __version__

if TYPE_CHECKING:  # the command modules, for readers and the layering test; imported lazily below
    from wt_otel.cli import conformance, files, formats, replay, serve, servers, sessions, surface  # noqa: F401

# command name -> (module under wt_otel.cli, attribute): the one list of commands
COMMANDS: dict[str, tuple[str, str]] = {
    "schema": ("formats", "schema"),
    "validate": ("formats", "validate"),
    "import": ("files", "import_"),
    "serve": ("serve", "serve"),
    "flag": ("serve", "flag"),
    "universe": ("servers", "universe"),
    "cassette": ("servers", "cassette"),
    "conformance": ("conformance", "conformance"),
    "run": ("replay", "run_"),
    "report": ("replay", "report_"),
    "check": ("replay", "check_"),
    "surface": ("surface", "surface"),
    "sessions": ("sessions", "sessions"),
}


class LazyGroup(click.Group):
    """A group whose commands (`COMMANDS`) are imported on first use, so that a command's start-up
    pays only for its own module."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(f"wt_otel.cli.{module}"), attr)
            if not isinstance(command, click.Command) or command.name != cmd_name:
                raise RuntimeError(f"wt_otel.cli.{module}.{attr} is not the {cmd_name!r} command")
            self.add_command(command)
        return self.commands.get(cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wt-otel")
@click.option("-v", "--verbose", count=True,
              help="Show more of the log: -v info lines and the libraries' warnings, -vv debug with tracebacks "
                   "(default: wt-otel's warnings and the libraries' errors).")
def main(verbose: int) -> None:
    """Turn OpenTelemetry traces of LLM agents into hermetic regression tests."""
    from wt_otel.cli.logsetup import configure_cli_logging

    configure_cli_logging(verbose)


__all__ = ["COMMANDS", "main"]
