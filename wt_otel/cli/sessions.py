"""`wt-otel sessions list` and `sessions render`: the sessions of a data dir, through its session store
(exporters/store.py), which sees every session however serve keeps it."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("sessions")
def sessions() -> None:
    """Sessions in a data dir (what `wt-otel serve` wrote): list them, render those kept for later."""


@sessions.command("render")
@click.argument("names", nargs=-1, metavar="KEY|SLUG...")
@click.option("--all", "all_", is_flag=True, help="Every session kept for later (not rendered yet).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("wt-data"),
              show_default=True, help="The data dir `wt-otel serve` writes.")
@click.pass_context
def render(ctx: click.Context, names: tuple[str, ...], all_: bool, data_dir: Path) -> None:
    """Render sessions kept for later into the six files of `wt-otel import`.

    With `datadir.render: flagged` (the default), serve renders incidents and
    keeps every other session as its index line: by reference into the
    segment log (DATA_DIR/segments/, kept for them within
    durability.retain_age and retain_bytes), or, without the log, plus
    DATA_DIR/sessions/<slug>/records.otlp.pb. This command renders it in
    place, exactly as serve would have, and appends a revision to
    sessions.ndjsonl (`rendered: true`). A session already rendered is left
    alone. `wt-otel flag` renders one as well.

    \b
    Exit status:
      0  every named session is rendered (now or before)
      1  the data dir is in use (serve is running on it) or cannot be
         written, or some session's records could not be read or rendered
      2  usage: no KEY|SLUG and no --all, both, or an unknown session
    """
    from wt_otel.components import load as load_component

    if bool(names) == all_:
        click.echo("error: name sessions (KEY or SLUG) or pass --all, not both or neither", err=True)
        ctx.exit(2)
    try:
        kept = load_component("exporters", "sessions")(data_dir)
    except FileNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    try:
        store = kept.writer()
    except (OSError, RuntimeError) as exc:
        click.echo(f"error: {exc} (stop `wt-otel serve` on it first)", err=True)
        ctx.exit(1)
    failed = 0
    try:
        if all_:
            targets = store.unrendered()
        else:
            targets = []
            for name in names:
                try:
                    targets.append(store.resolve(name)[0])
                except ValueError as exc:
                    click.echo(f"error: {exc}", err=True)
                    ctx.exit(2)
        total = len(targets)
        if all_ and not total:
            click.echo(f"nothing to render: every session in {data_dir} is rendered")
        for n, key in enumerate(targets, 1):
            where = f"[{n}/{total}] " if all_ else ""
            try:
                written = store.render(key)
            except (ValueError, OSError) as exc:
                failed += 1
                click.echo(f"{where}error: {exc}", err=True)
                continue
            if written is None:
                click.echo(f"{where}{store.sessions / store.resolve(key)[1]}: already rendered")
            else:
                click.echo(f"{where}rendered {written.path} (revision {written.revision})")
    finally:
        store.close()
    if failed:
        click.echo(f"{failed} of {total} session(s) not rendered", err=True)
        ctx.exit(1)


@sessions.command("list")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("wt-data"),
              show_default=True, help="The data dir `wt-otel serve` writes.")
@click.option("--flagged", is_flag=True, help="Only incidents (flagged sessions).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def list_(ctx: click.Context, data_dir: Path, flagged: bool, fmt: str) -> None:
    """Every session in the data dir (its latest revision), however serve keeps it.

    \b
    One line per session:
      SLUG  KEPT  REVISION  SERVICE  INCIDENT
    KEPT: rendered (the six files in DATA_DIR/sessions/<slug>/), reference
    (an index line into the segment log) or records (records.otlp.pb); the
    last two are rendered on demand by `wt-otel sessions render` or `flag`.
    Reads only: works while serve runs. Exit status: 0; 2 not a data dir.
    """
    import json

    from wt_otel.components import load as load_component

    try:
        store = load_component("exporters", "sessions")(data_dir)
    except FileNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    for problem in store.problems:
        click.echo(f"warning: {problem}", err=True)
    shown = [s for s in store.list() if s.flagged or not flagged]
    if fmt == "json":
        click.echo(json.dumps([s.to_dict() for s in shown], indent=2, ensure_ascii=False))
        return
    for s in shown:
        incident = f"incident {s.flag_ref}" if s.flagged else "-"
        click.echo(f"{s.slug}  {s.kept}  r{s.revision}  {s.service or '-'}  {incident}")
    click.echo(f"{len(shown)} session(s) in {data_dir}", err=True)
