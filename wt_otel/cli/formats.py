"""`wt-otel schema` and `validate`: the wt-otel file formats (every contract's models load with them)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from wt_otel.contracts.formats import FORMATS as CONTRACT_FORMATS
from wt_otel.contracts.formats import json_schema
from wt_otel.contracts.validate import UnreadableFile, find_files, validate_file


@click.command()
@click.argument("name", type=click.Choice([*CONTRACT_FORMATS, "serve-config"]))
def schema(name: str) -> None:
    """Print the JSON Schema of a wt-otel file or wire format.

    \b
    NAME is one of the registered formats (wt_otel/contracts/formats.py):
      envelope          Contract A interchange envelope (*.wtin.json)
      universe          Contract B tool universe (*.universe.json)
      cassette          LLM cassette (*.cassette.json)
      scenario          scenario.yaml
      trace             what `wt-otel run` records per run (*.trace.json)
      score             a run's score (run-<n>.score.json)
      results           the sweep document of `--format json`
      ledger-row        one line of ledger.ndjsonl
      inject-response   Contract C /wt/inject response body
      reset-request     Contract C /wt/reset request body (with the replay URLs)
      surface-response  Contract C /wt/surface response body
      serve-config      `wt-otel serve --config FILE` (docs/serve-config.md)

    The schema is generated from the models `wt-otel validate` uses;
    validate's messages are more precise, the schema is for editors and
    other tools.
    """
    if name == "serve-config":
        from wt_otel.serve.config import ServeConfig

        click.echo(json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema",
                               **ServeConfig.model_json_schema(), "title": "wt-otel serve config"}, indent=2))
        return
    click.echo(json.dumps(json_schema(name), indent=2))


@click.command()
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--strict", is_flag=True, help="Fail (exit 1) on warnings too.")
@click.pass_context
def validate(ctx: click.Context, paths: tuple[Path, ...], strict: bool) -> None:
    """Check wt-otel files against their contracts.

    A PATH is a file or a folder; folders are searched for *.wtin.json,
    *.universe.json, *.cassette.json and scenario.yaml. A file's kind comes
    from its version key, else its name, else its shape.

    \b
    One line per file or problem:
      OK PATH
      INVALID PATH: <json path> <rule> (<how to fix>)
      WARN PATH: <json path> <what replay will get wrong>

    \b
    Exit status: 0 all valid; 1 a file is invalid (or warned, with --strict);
    2 a path could not be read or parsed (reported on stderr).
    """
    status = 0
    for path in paths:
        files = list(find_files(path)) if path.is_dir() else [path]
        if not files:
            click.echo(f"error: no wt-otel files under {path}", err=True)
            status = 2
        for file in files:
            try:
                report = validate_file(file)
            except UnreadableFile as exc:
                click.echo(f"error: {exc}", err=True)
                status = 2
                continue
            for problem in report.problems:
                click.echo(f"INVALID {file}: {problem}")
            for warning in report.warnings:
                click.echo(f"WARN {file}: {warning}")
            if report.valid and not report.warnings:
                click.echo(f"OK {file}")
            if report.problems or (strict and report.warnings):
                status = max(status, 1)
    ctx.exit(status)
