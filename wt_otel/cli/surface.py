"""`wt-otel surface`: store an endpoint's prompt surface as a golden, diff later surfaces against it, and
watch surfaces drift in serve's data dir."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from wt_otel.contracts.inject import SurfaceProbe


@click.group("surface")
def surface() -> None:
    """Gate on an agent's prompt surface (system instructions, tool definitions, extra segments, model).

    \b
      wt-otel surface fetch --url URL --out golden.surface.json
      wt-otel surface diff golden.surface.json --url URL        # or --trace run-1.trace.json
      wt-otel surface drift --data-dir wt-data [--service S]

    A surface is what the endpoint *reports* on /wt/surface (Contract C), not
    what the model rendered. It is the system prompt: treat goldens as such.
    """


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@surface.command("fetch")
@click.option("--url", metavar="URL", help="The endpoint [$WT_INJECT_URL, else http://127.0.0.1:8647].")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Take the surface a run recorded (a *.trace.json) instead of asking the endpoint.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True, metavar="FILE",
              help="Where the golden goes (e.g. golden.surface.json).")
@click.pass_context
def fetch(ctx: click.Context, url: str | None, trace_file: Path | None, out: Path) -> None:
    """Store the endpoint's reported surface as a golden.

    Only a surface that validated is stored: an invalid one (exit 1) or none
    (unavailable, exit 1) is never written as if it were a golden.
    """
    from wt_otel._util.fsutil import atomic_write
    from wt_otel.contracts.inject import ContractViolation, RuntimeSpecError
    from wt_otel.contracts.surface import SurfaceGolden

    try:
        probe, model, source = _current(url, trace_file)
    except (RuntimeSpecError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    except ContractViolation as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    if probe.status != "reported" or probe.surface is None:
        click.echo(f"error: {source}: surface {probe.status}: {probe.detail} (nothing stored)", err=True)
        ctx.exit(1)
    golden = SurfaceGolden(wt_surface=1, source=source, fetched_at=_now(), model=model, surface=probe.surface)
    atomic_write(out, json.dumps(golden.to_dict(), indent=2, ensure_ascii=False) + "\n")
    s = probe.surface
    click.echo(f"wrote {out}: {len(s.system_instructions)} instruction part(s), {len(s.tool_definitions)} tool(s), "
               f"{len(s.extra_segments)} extra segment(s)" + (f", model {model}" if model else ""))


def _current(url: str | None, trace_file: Path | None) -> tuple[SurfaceProbe, str | None, str]:
    from wt_otel.replay.surface import probe_endpoint, recorded_probe

    if trace_file is not None:
        if url:
            raise ValueError("give --url or --trace, not both")
        try:
            data = json.loads(trace_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read {trace_file}: {exc}") from exc
        probe, model = recorded_probe(data)
        return probe, model, str(trace_file)
    probe, model = probe_endpoint(url)
    from wt_otel.replay.runtimes import HttpInjectRuntime

    return probe, model, HttpInjectRuntime(url).base


@surface.command("diff")
@click.argument("golden_file", metavar="GOLDEN", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--url", metavar="URL", help="Compare the live endpoint [$WT_INJECT_URL, else :8647].")
@click.option("--trace", "trace_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Compare the surface a run recorded (a *.trace.json).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Also write the comparison as JSON to FILE.")
@click.pass_context
def diff(ctx: click.Context, golden_file: Path, url: str | None, trace_file: Path | None, fmt: str,
         out: Path | None) -> None:
    """Diff a live or recorded surface against GOLDEN, segment by segment.

    Exit status: 0 same; 1 drift, an invalid surface (a hard failure) or no
    surface to compare; 2 usage (unreadable golden, bad flags).
    """
    from wt_otel._util.fsutil import atomic_write
    from wt_otel.contracts.inject import ContractViolation, RuntimeSpecError
    from wt_otel.contracts.problems import ContractError
    from wt_otel.contracts.surface import load_golden
    from wt_otel.replay.surface import compare

    try:
        golden = load_golden(json.loads(golden_file.read_text(encoding="utf-8")))
    except (OSError, ValueError, ContractError) as exc:
        click.echo(f"error: {golden_file}: {exc}", err=True)
        ctx.exit(2)
    try:
        probe, model, source = _current(url, trace_file)
    except (ValueError, RuntimeSpecError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    except ContractViolation as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    result = compare(golden.surface, probe, golden_name=str(golden_file), current_name=source,
                     golden_model=golden.model, current_model=model)
    click.echo(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) if fmt == "json" else result.text())
    if out is not None:
        atomic_write(out, json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n")
    ctx.exit(0 if result.ok else 1)


@surface.command("drift")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), required=True, metavar="D",
              help="serve's data dir (sessions.ndjsonl and sessions/).")
@click.option("--service", metavar="S", help="Only this service (service.name).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.pass_context
def drift(ctx: click.Context, data_dir: Path, service: str | None, fmt: str) -> None:
    """The surface each service's telemetry carried over time, and every change between sessions.

    Derived from the system instructions and tool definitions the sessions in
    the data dir recorded, so drift in production shows without the endpoint.
    Every session counts: those serve keeps by reference (`datadir.render:
    flagged`) are rendered in memory, nothing is written, and serve may run.
    Exit status: 0 no drift; 1 a service's surface changed; 2 no data dir.
    """
    from wt_otel.components import load as load_component
    from wt_otel.replay.surface import drift

    try:
        store = load_component("exporters", "sessions")(data_dir)
    except FileNotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    for problem in store.problems:
        click.echo(f"warning: {problem}", err=True)
    sessions = []
    for stored, env, why in store.envelopes():
        if env is None:
            click.echo(f"warning: {why}; left out", err=True)
        else:
            sessions.append((stored.entry, env))
    reports = drift(sessions, service)
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in reports], indent=2, ensure_ascii=False))
    else:
        if not reports:
            click.echo("no sessions" + (f" of service {service!r}" if service else "") + f" in {data_dir}")
        for r in reports:
            state = "DRIFT" if r.changes else "STABLE"
            click.echo(f"{state} {r.service}: {r.sessions} session(s), {r.versions} surface version(s)")
            for change in r.changes:
                click.echo(f"  at {change['at']} (session {change['session']}, after {change['previous']}):")
                for text in change["text"]:
                    click.echo("    " + text.replace("\n", "\n    "))
    ctx.exit(1 if any(r.changes for r in reports) else 0)
