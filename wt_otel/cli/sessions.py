"""`wt-otel sessions list` and `sessions render`: the sessions of a data dir, through its session store
(exporters/store.py), which sees every session however serve keeps it."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("sessions")
def sessions() -> None:
    """Sessions in a data dir (what `wt-otel serve` wrote): list them, render those kept for later."""


def _distinct(data_dirs: tuple[Path, ...]) -> list[Path]:
    """The --data-dir values ([wt-data]), a dir named twice (by any path) once."""
    return list({d.resolve(): d for d in data_dirs or (Path("wt-data"),)}.values())


@sessions.command("render")
@click.argument("names", nargs=-1, metavar="KEY|SLUG...")
@click.option("--all", "all_", is_flag=True, help="Every session kept for later (not rendered yet).")
@click.option("--data-dir", "data_dirs", type=click.Path(file_okay=False, path_type=Path), multiple=True,
              metavar="DIR", help="The data dir `wt-otel serve` writes [wt-data]. Repeatable: each session is "
              "rendered in the dir it lives in (a KEY|SLUG in several dirs, the parts of a split conversation, "
              "in each of them).")
@click.pass_context
def render(ctx: click.Context, names: tuple[str, ...], all_: bool, data_dirs: tuple[Path, ...]) -> None:
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
      1  a data dir is in use (serve is running on it) or cannot be
         written, or some session's records could not be read or rendered
      2  usage: no KEY|SLUG and no --all, both, or a session in no data dir
    """
    from wt_otel.components import load as load_component

    if bool(names) == all_:
        click.echo("error: name sessions (KEY or SLUG) or pass --all, not both or neither", err=True)
        ctx.exit(2)
    dirs = _distinct(data_dirs)
    try:
        kept = [load_component("exporters", "sessions")(d) for d in dirs]
    except FileNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    stores = []
    try:
        for one in kept:
            try:
                stores.append(one.writer())
            except (OSError, RuntimeError) as exc:
                click.echo(f"error: {exc} (stop `wt-otel serve` on it first)", err=True)
                ctx.exit(1)
        failed = 0
        targets = []
        if all_:
            targets = [(store, key) for store in stores for key in store.unrendered()]
        for name in names:
            found, why = [], None
            for store in stores:
                try:
                    found.append((store, store.resolve(name)[0]))
                except ValueError as exc:
                    why = exc
            if not found:
                click.echo(f"error: {why}" if len(stores) == 1 else
                           f"error: no session {name!r} in any of {', '.join(str(d) for d in dirs)}", err=True)
                ctx.exit(2)
            targets += found
        total = len(targets)
        if all_ and not total:
            click.echo(f"nothing to render: every session in {', '.join(str(d) for d in dirs)} is rendered")
        for n, (store, key) in enumerate(targets, 1):
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
        for store in stores:
            store.close()
    if failed:
        click.echo(f"{failed} of {total} session(s) not rendered", err=True)
        ctx.exit(1)


@sessions.command("list")
@click.option("--data-dir", "data_dirs", type=click.Path(file_okay=False, path_type=Path), multiple=True,
              metavar="DIR", help="The data dir `wt-otel serve` writes [wt-data]. Repeat it to list the data dirs "
              "of several serve instances together, each session with its dir.")
@click.option("--flagged", is_flag=True, help="Only incidents (flagged sessions).")
@click.option("--index-only", is_flag=True, help="With several data dirs: find split conversations from the "
              "index lines only (key, trace id, conversation id), without building sessions that have no "
              "conversation id to compare their transcripts.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def list_(ctx: click.Context, data_dirs: tuple[Path, ...], flagged: bool, index_only: bool, fmt: str) -> None:
    """Every session in the data dir (its latest revision), however serve keeps it.

    \b
    One line per session:
      SLUG  KEPT  REVISION  SERVICE  INCIDENT
    KEPT: rendered (the six files in DATA_DIR/sessions/<slug>/), reference
    (an index line into the segment log) or records (records.otlp.pb); the
    last two are rendered on demand by `wt-otel sessions render` or `flag`.

    \b
    With several --data-dir (serve instances behind a load balancer), each
    line starts with its DIR, and a conversation whose parts landed in
    different dirs is reported, never merged or dropped: a line
      split across 2 data dirs (EVIDENCE): DIR: SLUG; DIR: SLUG
    per such conversation, and "split": true (with "split_with") in --format
    json. Evidence: the same session key, trace id or conversation id in
    two dirs, or (unless --index-only) a session without a conversation id
    that continues another dir's session under the join rule.
    Reads only: works while serve runs. Exit status: 0; 2 not a data dir.
    """
    import json

    from wt_otel.components import load as load_component

    dirs = _distinct(data_dirs)
    store_cls = load_component("exporters", "sessions")
    try:
        view = store_cls.merged(dirs)
    except (FileNotFoundError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    shown = [p for p in view.list() if p.stored.flagged or not flagged]
    several = len(dirs) > 1
    splits = view.splits(content=not index_only) if several else []
    for problem in view.problems if several else view.stores[0].problems:
        click.echo(f"warning: {problem}", err=True)
    if fmt == "json":
        if not several:
            click.echo(json.dumps([p.stored.to_dict() for p in shown], indent=2, ensure_ascii=False))
            return
        split_of = {(q.data_dir, q.stored.key): sp for sp in splits for q in sp.parts}
        rows = []
        for p in shown:
            split = split_of.get((p.data_dir, p.stored.key))
            others = [q.to_dict() for q in split.parts if q != p] if split else []
            rows.append({**p.to_dict(), "split": split is not None, "split_with": others,
                         "split_evidence": split.evidence if split else []})
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    for p in shown:
        s = p.stored
        incident = f"incident {s.flag_ref}" if s.flagged else "-"
        where = f"{p.data_dir}  " if several else ""
        click.echo(f"{where}{s.slug}  {s.kept}  r{s.revision}  {s.service or '-'}  {incident}")
    for split in splits:
        click.echo(split.describe())
    where = ", ".join(str(d) for d in dirs)
    tail = f"; {len(splits)} conversation(s) split across data dirs" if several else ""
    click.echo(f"{len(shown)} session(s) in {where}{tail}", err=True)
