"""`wt-otel serve`: the OTLP receiver, session writer and automatic replay."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="YAML config (pipeline, receivers, data_dir, filter, assembler, flagger, redactor, queue, replay); "
                   "flags override it.")
@click.option("--grpc-endpoint", metavar="HOST:PORT|none",
              help="OTLP/gRPC address [127.0.0.1:14317; port 0: any; none: off]. Not 4317: the collector's.")
@click.option("--http-endpoint", metavar="HOST:PORT|none",
              help="OTLP/HTTP address [127.0.0.1:14318; port 0: any; none: off]. Not 4318: the collector's.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), help="Where sessions go [./wt-data].")
@click.option("--session-idle-timeout", type=float, metavar="SECONDS",
              help="A session with no new span for this long is complete [30].")
@click.option("--auth-token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Require `Authorization: Bearer <token>` (the file's content) on both transports.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="PEM certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="PEM private key.")
@click.option("--replay-runtime", metavar="SPEC",
              help="Turn automatic replay on, with this runtime: any `wt-otel run --runtime` (http_inject, "
                   "python:MODULE:ATTR, openai-agents:MODULE:ATTR, ...) [replay.runtime].")
@click.option("--inject-url", metavar="URL",
              help="Turn automatic replay on, against this Contract C endpoint [replay.inject_url].")
@click.option("--replay-service", "replay_services", multiple=True, metavar="SERVICE",
              help="service.name (fnmatch pattern) whose incidents the agent replays (repeatable) [replay.services]; "
                   "incidents of other services are kept and reported, not replayed.")
@click.option("--results-otlp-endpoint", metavar="URL",
              help="Export replay results as OTel spans to this OTLP endpoint [replay.results.otlp_endpoint].")
@click.option("--quiet", "-q", is_flag=True, help="Do not print a line per written session revision.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, help="debug adds gRPC core's own lines; warning hides the per-session lines.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: `<UTC time> <LEVEL> <message>`; json: one object per line (time, level, logger, message).")
@click.pass_context
def serve(ctx: click.Context, config_path: Path | None, grpc_endpoint: str | None, http_endpoint: str | None,
          data_dir: Path | None, session_idle_timeout: float | None, auth_token_file: Path | None,
          tls_cert: Path | None, tls_key: Path | None, replay_runtime: str | None, inject_url: str | None,
          replay_services: tuple[str, ...], results_otlp_endpoint: str | None, quiet: bool, log_level: str,
          log_format: str) -> None:
    """Receive OTLP traces and logs, write every agent session to the data dir, and replay flagged incidents.

    \b
    Pipeline: OTLP receivers -> GenAI filter -> session assembler -> incident
    flagger -> redactor (off by default) -> data dir -> automatic replay (off by default):
      DATA_DIR/sessions/<slug>/     the files `wt-otel import` writes (latest revision)
      DATA_DIR/sessions.ndjsonl     one JSON line per written revision (flagged ones too)
      DATA_DIR/scenarios/<slug>/    flagged incidents imported for replay (unreviewed, auto-replay)
      DATA_DIR/replay-queue.ndjsonl the replay queue (enqueued / started / done / refused)
      DATA_DIR/runs/                replay traces, scores and ledger.ndjsonl (as `wt-otel run` writes them)

    Automatic replay (config `replay:`, or --replay-runtime / --inject-url):
    each complete, flagged session is imported, queued (bounded, one job per
    incident ref, kept across restarts) and replayed one at a time against
    the agent with the recorded tools (MCP) and LLM on free ports, named in
    every /wt/reset (config replay.universe_port / llm_port fix them);
    the verdict goes to the ledger and, with --results-otlp-endpoint, out as
    OTel spans. Nothing is retried: an error is an ERROR row.

    Log: one line per event, `<UTC time> <LEVEL> <message>` (--log-format json:
    one object per line); info to stdout, warnings and errors to stderr.

    An export is acknowledged once fsynced to DATA_DIR/segments (`durability:`);
    a restart replays what was acknowledged but not yet written. With two cores
    or more the receivers run in a process of their own, fed to this one through
    the segment log (`processes.receivers`); if it dies, serve exits 1. SIGTERM / SIGINT
    stop the receivers, process what was acknowledged and write open sessions
    until `durability.shutdown_deadline` (the rest waits in the segment log for
    the next start), let the replay in flight finish (bounded), and exit 0.
    Exit 1 if it cannot start, 2 on a bad config.
    """
    import signal
    import time

    from wt_otel.serve.config import ConfigError, load_serve_config
    from wt_otel.serve.logs import configure
    from wt_otel.serve.server import Server, ServeStartError

    log = configure(log_level, "json" if log_format == "json" else "text")
    # Handlers first: a SIGTERM during start-up still means a clean stop. The handler only flips a
    # flag: a threading.Event.set() here can deadlock, because Python runs the handler in the main
    # thread, possibly while that thread holds the very Event's lock inside Event.wait().
    signals: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: signals.append(signum))
    replay_on = True if (replay_runtime or inject_url) else None
    try:
        config = load_serve_config(config_path, {
            "receivers.grpc_endpoint": grpc_endpoint, "receivers.http_endpoint": http_endpoint,
            "receivers.auth_token_file": auth_token_file and str(auth_token_file),
            "receivers.tls_cert": tls_cert and str(tls_cert), "receivers.tls_key": tls_key and str(tls_key),
            "data_dir": data_dir and str(data_dir), "assembler.idle_timeout": session_idle_timeout,
            "replay.enabled": replay_on, "replay.runtime": replay_runtime, "replay.inject_url": inject_url,
            "replay.results.otlp_endpoint": results_otlp_endpoint,
            "replay.services": list(replay_services) or None,
        })
    except ConfigError as exc:
        log.error("%s", exc)
        ctx.exit(2)
    server = Server(config, quiet=quiet, emit=log.info, warn=log.warning)
    try:
        server.start()
    except ServeStartError as exc:
        log.error("%s", exc)
        ctx.exit(exc.exit_code)
    from wt_otel._util.tuning import tune_for_serve

    tune_for_serve()  # rare, short GC collections; request buffers go back to the OS when freed
    for note in server.recovery:
        log.warning("data dir: %s", note)
    if server.grpc_port is not None:
        host = (config.receivers.grpc_endpoint or "").rpartition(":")[0]  # set: grpc_port is
        log.info("OTLP/gRPC listening on %s:%s", host, server.grpc_port)
    if server.http_url is not None:
        log.info("OTLP/HTTP listening on %s (/v1/traces, /v1/logs, /v1/metrics dropped, /healthz, /metrics)",
                 server.http_url)
    workers = config.datadir.workers
    log.info("data dir: %s (render %s; %s)", config.data_dir, config.datadir.render,
             f"{workers} render worker process(es)" if workers else "rendered in the pipeline thread")
    if server.replay is not None:
        log.info("replay: flagged incidents -> %s (%s, llm %s); runs in %s; result spans %s", server.replay.endpoint,
                 config.replay.runtime, config.replay.llm, config.runs_dir, server.replay.results_target)
        for target in server.replay.targets:
            if target.services:
                log.info("replay target %s: services %s -> %s", target.name, ", ".join(target.services),
                         target.runtime.url or target.runtime.name)
            else:
                log.warning("replay: no service named for %s (--replay-service / replay.services): flagged "
                            "incidents are kept and reported, not replayed", target.runtime.url or target.runtime.name)
    while not signals and server.failed is None:
        time.sleep(0.2)
    log.info("stopping: draining the queue and writing open sessions")
    server.stop()
    written = server.metrics.get("wt_otel_sessions_written_total")
    log.info("stopped: %s session revision(s) written", f"{written:g}")
    if server.failed is not None:
        log.error("%s", server.failed)
        ctx.exit(1)
    ctx.exit(0)


@click.command("flag")
@click.argument("session", metavar="SESSION")
@click.option("--ref", metavar="INC-…", help="The incident id (source.ref) [the session's own ref, else its key].")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("wt-data"),
              show_default=True, help="The data dir `wt-otel serve` writes.")
@click.option("--no-queue", is_flag=True, help="Do not queue it for automatic replay.")
@click.option("--wait", type=click.FloatRange(min=0), default=30.0, show_default=True, metavar="SECONDS",
              help="While serve runs on the data dir: how long to wait for it to flag the session.")
@click.pass_context
def flag(ctx: click.Context, session: str, ref: str | None, data_dir: Path, no_queue: bool, wait: float) -> None:
    """Promote a session in the data dir to an incident, after the fact.

    SESSION is a session's slug (its folder under DATA_DIR/sessions/), its key,
    or its folder. Its envelope and scenario.yaml are marked flagged (with
    --ref as source.ref; a session kept for later is rendered as the
    incident), a revision is appended to sessions.ndjsonl, the session is
    copied to DATA_DIR/scenarios/<slug>/ (unreviewed) and queued for replay:
    the next `wt-otel serve` with replay on replays it, or run it now with
    `wt-otel run DATA_DIR/scenarios/<slug>`. This is how a run that carries
    no flag attribute (an Agents SDK run without group_id, a complaint that
    came by e-mail) becomes an incident.

    While `wt-otel serve` runs on the data dir, the request goes to it
    (DATA_DIR/flag-requests.ndjsonl, taken at its next tick): serve flags
    the session and, with replay on, queues it itself; this command waits
    up to --wait seconds for the flagged revision.

    Exit status: 0 flagged; 1 the data dir cannot be written, or the running
    serve did not flag it within --wait; 2 no such session or no data dir.
    """
    import shutil

    from wt_otel._util.fsutil import unique_slug
    from wt_otel.components import load as load_component
    from wt_otel.serve.replay_queue import QueueAdmission, ReplayQueue

    try:
        store = load_component("exporters", "sessions")(data_dir)
        outcome = store.flag(session, ref)
    except (FileNotFoundError, ValueError) as exc:  # no data dir (NotADataDir), no such session
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    except OSError as exc:
        click.echo(f"error: cannot write {data_dir}: {exc}", err=True)
        ctx.exit(1)
    if outcome.requested is not None:
        asked = outcome.requested
        click.echo(f"serve is running on {data_dir}: asked it to flag {asked.slug}")
        done = store.wait_flagged(asked, wait)
        if done is None:
            click.echo(f"error: serve did not flag {asked.slug} within {wait:g} s (is it stalled? its log says "
                       "why; the request stays in flag-requests.ndjsonl for its next tick)", err=True)
            ctx.exit(1)
        click.echo(f"flagged {data_dir / (done.entry.get('path') or '')} as incident {done.flag_ref} "
                   f"(revision {done.revision}, by the running serve; with replay on it queues it)")
        return
    written = outcome.written
    ref = written.entry["flag_ref"]
    click.echo(f"flagged {written.path} as incident {ref} (revision {written.revision})")
    if no_queue:
        return
    queue = ReplayQueue(data_dir)
    try:
        if queue.admit(ref) is not QueueAdmission.OK:
            click.echo(f"not queued: incident {ref} is already queued or replayed, or the queue is full")
            return
        scenarios = data_dir / "scenarios"
        scenarios.mkdir(parents=True, exist_ok=True)
        slug = unique_slug(ref, written.entry["key"], {p.name for p in scenarios.iterdir()})
        shutil.copytree(written.path, scenarios / slug)
        queue.enqueue(ref, f"scenarios/{slug}", session=str(written.entry["path"]), key=written.entry["key"],
                      service=written.entry.get("service"), flagged_by="wt-otel flag")
        click.echo(f"queued for replay: {scenarios / slug} (unreviewed; run it now with "
                   f"`wt-otel run {scenarios / slug}`)")
    finally:
        queue.close()
