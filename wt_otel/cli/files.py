"""`wt-otel import`: turning dumps into scenario directories (`schema` and `validate` are in `formats`)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from wt_otel.components import load_plugin
from wt_otel.ingest.dumps import DumpFormatError, DumpReadError
from wt_otel.ingest.importer import FORMATS, ImportAborted, import_dumps


def _trace_ids(values: tuple[str, ...]) -> tuple[str, ...]:
    """Trace ids as the sessions hold them (32 lowercase hex); anything else is a usage error, not a filter
    that silently matches nothing."""
    import re

    out = []
    for value in values:
        text = value.strip().lower().removeprefix("0x")
        if not re.fullmatch(r"[0-9a-f]{32}", text):
            raise click.BadParameter(f"{value!r} is not a trace id (32 hex digits, e.g. "
                                     "4bf92f3577b34da6a3ce929d0e0e4736)")
        out.append(text)
    return tuple(out)


def _may_be_terminal() -> bool:
    """False when rich's `Console(stderr=True).is_terminal` is surely False: stderr is no terminal and
    neither TTY_COMPATIBLE nor FORCE_COLOR says otherwise. Then rich (~25 ms of every start) is not loaded."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stderr, or a closed one: rich says no terminal too
        return False


@contextlib.contextmanager
def _progress_display() -> Iterator[Callable[[str, int], None] | None]:
    """A transient spinner with the import's progress on a terminal (rich); None elsewhere."""
    if not _may_be_terminal():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("reading", total=None)

        def progress(what: str, n: int) -> None:
            bar.update(task, description=f"{what}: {n:,}")

        yield progress


def _echo_lines(lines: list[str], err: bool = False, chunk: int = 1000) -> None:
    """`click.echo` of each line, `chunk` lines a call: the same text, one write and flush per chunk instead of
    per line (a line per written session was ~50 ms of the main process for 10,000 sessions)."""
    for i in range(0, len(lines), chunk):
        click.echo("".join(f"{line}\n" for line in lines[i:i + chunk]), nl=False, err=err)


@click.command("import")
@click.argument("dumps", metavar="DUMP...", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder that receives one scenario directory per session.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Input format; auto sniffs each file (gzip is always detected).")
@click.option("--force", is_flag=True, help="Replace scenario directories that already exist.")
@click.option("--trace-id", "trace_ids", multiple=True, metavar="ID", callback=lambda _c, _p, v: _trace_ids(v),
              help="Only sessions containing this trace id (32 hex digits); repeatable.")
@click.option("--flagged-only", is_flag=True,
              help="Only sessions flagged as incidents (wt.incident / wt.flag / incident.id, negative feedback, or "
                   "the rules of --config).")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="wt-otel serve's YAML config: its `flagger:` section decides what is an incident, as in serve.")
@click.option("--strict", is_flag=True,
              help="Stop at the first corrupt input or session warning, before writing anything.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes that build and write sessions (default: the CPU count; 1: none).")
@click.pass_context
def import_(ctx: click.Context, dumps: tuple[Path, ...], out: Path, fmt: str, force: bool,
            trace_ids: tuple[str, ...], flagged_only: bool, config_path: Path | None, strict: bool,
            jobs: int | None) -> None:
    """Turn telemetry dumps into scenario directories, one per agent session.

    \b
    DUMP formats (auto-detected, gzip or not):
      otlp-json      OTLP/JSON lines, as the Collector `file` exporter writes (traces and logs)
      otlp-proto     a serialized OTLP request (.pb) or the collector's length-prefixed stream
      agents-jsonl   OpenAI Agents SDK trace export (object: trace / trace.span)
      generic-jsonl  one span per line (trace_id, span_id, type, workflow_name, ...)
      wtin           a Contract A envelope (*.wtin.json)

    \b
    Each OUT/<session>/ holds incident.wtin.json (Contract A), fixture.universe.json
    (Contract B), llm.cassette.json, scenario.yaml, scorer.py and IMPORTED.md.

    A corrupt line is reported as FILE:LINE and skipped (--strict makes it fatal). What the
    importer did not understand in a session (no user turn, content capture off, a tool call
    without result, conversation attributes no dialect read...) is a warning on stderr, in
    IMPORTED.md and in the envelope's `diagnostics` (--strict makes it fatal too).
    Exit status: 0 ok; 1 some inputs or sessions had errors, or no GenAI session was found
    (the message says why); 2 usage.
    """
    flag_rules = None
    if config_path:  # serve's config (and the receivers it names) loads only when asked for
        from wt_otel.ingest.flags import FlagRules
        from wt_otel.serve.config import ConfigError, load_serve_config

        try:
            flag_rules = FlagRules(load_serve_config(config_path).flagger)
        except ConfigError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
    writer = load_plugin("sinks", "scenario-dir")(out, force=force)
    try:
        with _progress_display() as progress:
            report = import_dumps(list(dumps), writer, fmt=fmt, trace_ids=trace_ids, flagged_only=flagged_only,
                                  strict=strict, progress=progress, flag_rules=flag_rules,
                                  jobs=jobs or os.cpu_count() or 1)
    except ImportAborted as exc:
        click.echo(f"error: {exc} (--strict: nothing was written)", err=True)
        ctx.exit(1)
    except (DumpReadError, DumpFormatError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    _echo_lines([f"error: {err}" for err in report.errors], err=True)
    _echo_lines([f"warning: {warning}" for warning in report.warnings], err=True)
    if report.stale_staging:
        click.echo(f"removed {len(report.stale_staging)} staging folder(s) an interrupted import left in {out}: "
                   f"{', '.join(report.stale_staging[:5])}", err=True)
    if report.why_none:
        click.echo(f"error: no GenAI session found: {report.why_none}", err=True)
        ctx.exit(1)
    _echo_lines([f"wrote {path}" for path in report.written])
    click.echo(f"{report.records:,} records, {report.sessions} session(s), {len(report.written)} written"
               + (f", {report.skipped} not selected" if report.skipped else "")
               + (f", {report.empty} without content" if report.empty else "")
               + (f", {len(report.warnings)} warning(s)" if report.warnings else "")
               + (f", {len(report.errors)} error(s)" if report.errors else ""), err=True)
    ctx.exit(0 if report.ok else 1)
