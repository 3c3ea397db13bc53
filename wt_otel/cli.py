"""The `wt-otel` command line.

Each command is a thin shell over a library function: parse flags, call, map
the outcome to an exit code (0 ok, 1 some inputs had errors, 2 usage).
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from wt_otel import __version__
from wt_otel.components import load as load_component
from wt_otel.contracts.validate import KINDS, UnreadableFile, find_files, json_schema, validate_file
from wt_otel.dumps import DumpFormatError, DumpReadError
from wt_otel.importer import FORMATS, ImportAborted, import_dumps
from wt_otel.selection import selection_options


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wt-otel")
def main() -> None:
    """Turn OpenTelemetry traces of LLM agents into hermetic regression tests."""


@main.command()
@click.argument("name", type=click.Choice(KINDS))
def schema(name: str) -> None:
    """Print the JSON Schema of a wt-otel file format.

    NAME is envelope (*.wtin.json), universe (*.universe.json), cassette
    (*.cassette.json), scenario (scenario.yaml) or trace (*.trace.json, what
    `wt-otel run` records). The schema is generated
    from the models `wt-otel validate` uses; validate's messages are more
    precise, the schema is for editors and other tools.
    """
    click.echo(json.dumps(json_schema(name), indent=2))


@main.command()
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


@main.command("import")
@click.argument("dumps", metavar="DUMP...", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder that receives one scenario directory per session.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Input format; auto sniffs each file (gzip is always detected).")
@click.option("--force", is_flag=True, help="Replace scenario directories that already exist.")
@click.option("--trace-id", "trace_ids", multiple=True, metavar="ID",
              help="Only sessions containing this trace id (hex); repeatable.")
@click.option("--flagged-only", is_flag=True,
              help="Only sessions flagged as incidents (a span with wt.incident / wt.flag).")
@click.option("--strict", is_flag=True, help="Stop at the first corrupt input, before writing anything.")
@click.pass_context
def import_(ctx: click.Context, dumps: tuple[Path, ...], out: Path, fmt: str, force: bool,
            trace_ids: tuple[str, ...], flagged_only: bool, strict: bool) -> None:
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

    A corrupt line is reported as FILE:LINE and skipped (--strict makes it fatal).
    Exit status: 0 ok; 1 some inputs or sessions had errors; 2 usage.
    """
    writer = load_component("exporters", "scenario-dir")(out, force=force)
    console = Console(stderr=True)
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                      transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("reading", total=None)

            def progress(what: str, n: int) -> None:
                bar.update(task, description=f"{what}: {n:,}")

            report = import_dumps(list(dumps), writer, fmt=fmt, trace_ids=trace_ids, flagged_only=flagged_only,
                                  strict=strict, progress=progress)
    except ImportAborted as exc:
        click.echo(f"error: {exc} (--strict: nothing was written)", err=True)
        ctx.exit(1)
    except (DumpReadError, DumpFormatError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    for err in report.errors:
        click.echo(f"error: {err}", err=True)
    for path in report.written:
        click.echo(f"wrote {path}")
    click.echo(f"{report.records:,} records, {report.sessions} session(s), {len(report.written)} written"
               + (f", {report.skipped} not selected" if report.skipped else "")
               + (f", {len(report.errors)} error(s)" if report.errors else ""), err=True)
    ctx.exit(0 if report.ok else 1)


@main.command()
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="YAML config (receivers, data_dir, assembler, flagger, redactor, queue, replay); flags override it.")
@click.option("--grpc-endpoint", metavar="HOST:PORT", help="OTLP/gRPC address [default 127.0.0.1:4317; port 0: any].")
@click.option("--http-endpoint", metavar="HOST:PORT", help="OTLP/HTTP address [default 127.0.0.1:4318; port 0: any].")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), help="Where sessions go [./wt-data].")
@click.option("--session-idle-timeout", type=float, metavar="SECONDS",
              help="A session with no new span for this long is complete [30].")
@click.option("--auth-token-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Require `Authorization: Bearer <token>` (the file's content) on both transports.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="PEM certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="PEM private key.")
@click.option("--replay-runtime", metavar="SPEC",
              help="Turn automatic replay on, with this runtime: http_inject or python:MODULE:ATTR [replay.runtime].")
@click.option("--inject-url", metavar="URL",
              help="Turn automatic replay on, against this Contract C endpoint [replay.inject_url].")
@click.option("--results-otlp-endpoint", metavar="URL",
              help="Export replay results as OTel spans to this OTLP endpoint [replay.results.otlp_endpoint].")
@click.option("--quiet", "-q", is_flag=True, help="Do not print a line per written session revision.")
@click.pass_context
def serve(ctx: click.Context, config_path: Path | None, grpc_endpoint: str | None, http_endpoint: str | None,
          data_dir: Path | None, session_idle_timeout: float | None, auth_token_file: Path | None,
          tls_cert: Path | None, tls_key: Path | None, replay_runtime: str | None, inject_url: str | None,
          results_otlp_endpoint: str | None, quiet: bool) -> None:
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
    the agent with the recorded tools (MCP, port 8648) and LLM (port 8649);
    the verdict goes to the ledger and, with --results-otlp-endpoint, out as
    OTel spans. Nothing is retried: an error is an ERROR row.

    SIGTERM / SIGINT stop the receivers, process everything acknowledged, write
    every open session, let the replay in flight finish (bounded), and exit 0.
    Exit 1 if it cannot start, 2 on a bad config.
    """
    import logging
    import signal
    import threading

    from wt_otel.config import ConfigError, load_serve_config
    from wt_otel.otlp import check_protobuf_backend
    from wt_otel.serve import Server, ServeStartError

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()  # handlers first: a SIGTERM during start-up still means a clean stop
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    replay_on = True if (replay_runtime or inject_url) else None
    try:
        config = load_serve_config(config_path, {
            "receivers.grpc_endpoint": grpc_endpoint, "receivers.http_endpoint": http_endpoint,
            "receivers.auth_token_file": auth_token_file and str(auth_token_file),
            "receivers.tls_cert": tls_cert and str(tls_cert), "receivers.tls_key": tls_key and str(tls_key),
            "data_dir": data_dir and str(data_dir), "assembler.idle_timeout": session_idle_timeout,
            "replay.enabled": replay_on, "replay.runtime": replay_runtime, "replay.inject_url": inject_url,
            "replay.results.otlp_endpoint": results_otlp_endpoint,
        })
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    server = Server(config, quiet=quiet, emit=click.echo, warn=lambda text: click.echo(f"warning: {text}", err=True))
    try:
        server.start()
    except ServeStartError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(exc.exit_code)
    for note in server.recovery:
        click.echo(f"data dir: {note}", err=True)
    if server.grpc_port is not None:
        click.echo(f"OTLP/gRPC listening on {config.receivers.grpc_endpoint.rpartition(':')[0]}:{server.grpc_port}")
    if server.http_url is not None:
        click.echo(f"OTLP/HTTP listening on {server.http_url} (/v1/traces, /v1/logs, /healthz, /metrics)")
    backend = check_protobuf_backend()
    click.echo(f"protobuf backend: {backend}")
    if backend != "upb":
        click.echo(f"WARNING: protobuf runs on the {backend!r} backend, not upb: decoding is ~200x slower. "
                   "Unset PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION and reinstall protobuf.", err=True)
    click.echo(f"data dir: {config.data_dir}")
    if server.replay is not None:
        click.echo(f"replay: flagged incidents -> {server.replay.endpoint} ({config.replay.runtime}, llm "
                   f"{config.replay.llm}); runs in {config.runs_dir}; result spans {server.replay.results_target}")
    while not stop.wait(0.5):
        pass
    click.echo("stopping: draining the queue and writing open sessions", err=True)
    server.stop()
    written = server.metrics.get("wt_otel_sessions_written_total")
    click.echo(f"stopped: {written:g} session revision(s) written", err=True)
    ctx.exit(0)


# ---------------------------------------------------------------- universe (Contract B)


@main.group()
def universe() -> None:
    """Serve a recorded tool universe over MCP, or freeze a run's calls into one."""


@universe.command("serve")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8648, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.pass_context
def universe_serve(ctx: click.Context, file: Path, host: str, port: int) -> None:
    """Serve FILE (*.universe.json) as an MCP server (streamable HTTP) until Ctrl-C.

    Prints the MCP URL, then one line per tool call with how it was answered
    (exact, keyed, or the miss policy). The call log is also at GET /wt/calls;
    POST /wt/reset-calls starts a new run.
    """
    import threading

    from wt_otel.contracts.problems import ContractError
    from wt_otel.mcp_server import UniverseMCPServer
    from wt_otel.universe import RecordedUniverse

    def show(entry: dict) -> None:
        args = json.dumps(entry["args"], ensure_ascii=False)
        flag = " ERROR" if entry["is_error"] else ""
        div = " DIVERGENCE" if entry["divergence"] else ""
        click.echo(f"{entry['match']:<10} {entry['tool_name']}({args}){flag}{div}")

    try:
        engine = RecordedUniverse.from_file(str(file), on_call=show)
    except (ContractError, ValueError) as exc:
        click.echo(f"error: {file}: {exc}", err=True)
        ctx.exit(1)
    server = UniverseMCPServer(engine, host=host, port=port)
    try:
        url = server.start()
    except (OSError, RuntimeError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    click.echo(f"serving {len(engine.universe.tools)} tool(s), {len(engine.universe.recordings)} recording(s) "
               f"at {url} (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@universe.command("freeze")
@click.argument("call_log", metavar="CALL_LOG.json", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tools-from", "tools_from", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Universe file whose tools (and matching) the new universe keeps.")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the new *.universe.json.")
@click.option("--include-divergent", is_flag=True,
              help="Also freeze calls answered by a miss policy (empty, nearest, synthesize, fail_call).")
@click.pass_context
def universe_freeze(ctx: click.Context, call_log: Path, tools_from: Path, out: Path, include_divergent: bool) -> None:
    """Turn a run's call log into a universe file (record mode).

    CALL_LOG.json is a list of calls, or an object with a "calls" list (what
    GET /wt/calls returns). Divergent calls are left out unless
    --include-divergent. The result is validated before it is written.
    """
    from wt_otel.contracts.problems import ContractError
    from wt_otel.contracts.universe import load_universe
    from wt_otel.universe import freeze_universe

    try:
        data = json.loads(call_log.read_text(encoding="utf-8"))
        source = load_universe(json.loads(tools_from.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # ContractError is a ValueError
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    calls = data.get("calls") if isinstance(data, dict) else data
    if not isinstance(calls, list):
        click.echo(f"error: {call_log}: expected a list of calls or an object with a \"calls\" list", err=True)
        ctx.exit(1)
    try:
        frozen = freeze_universe(calls, source.tools, source.matching, include_divergent=include_divergent)
    except (ContractError, KeyError, TypeError) as exc:
        click.echo(f"error: the frozen universe is invalid: {exc}", err=True)
        ctx.exit(1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(frozen.model_dump(mode="json", exclude_unset=True), indent=2, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    kept = len(frozen.recordings)
    click.echo(f"wrote {out}: {kept} recording(s) from {len(calls)} call(s)")


@main.group()
def cassette() -> None:
    """Serve recorded LLM cassettes (*.cassette.json) to an agent under test."""


@cassette.command("serve")
@click.argument("file", type=click.Path(exists=True, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8649, show_default=True, help="0 picks a free port.")
@click.option("--match", "match", type=click.Choice(["exact", "sequence"]), default="exact", show_default=True,
              help="exact: by model, messages and tools; sequence: the Nth request gets the Nth recorded call.")
@click.option("--run", "run", metavar="TRACE_ID", help="Which recorded run (a history key); default the latest.")
@click.option("--pace", is_flag=True, help="Replay the recorded delays between frames.")
@click.pass_context
def cassette_serve(ctx: click.Context, file: Path, host: str, port: int, match: str, run: str | None,
                   pace: bool) -> None:
    """Serve FILE (a cassette, or a scenario directory) as an OpenAI-compatible API until interrupted.

    \b
    Prints the base URL, then one line per request:
      #SEQ MATCH recorded[I] STATUS MODEL [stream] [error TYPE]
      #SEQ miss STATUS llm_divergence at PATH: expected ..., received ...
    The call log is also at GET /wt/llm-calls; POST /wt/reset starts a new run.
    """
    import threading

    from wt_otel.cassette_server import CassetteServer

    def line(entry: dict) -> None:
        if entry["event"] == "llm_divergence":
            d = entry["divergence"]
            click.echo(f"#{entry['seq']} miss {entry['status']} llm_divergence at {d['at']}: "
                       f"expected {d['expected']!r}, received {d['received']!r}")
            return
        click.echo(f"#{entry['seq']} {entry['match']} recorded[{entry['recorded_index']}] {entry['status']} "
                   f"{entry['model']}" + (" stream" if entry["stream"] else "")
                   + (f" error {entry['error']}" if entry.get("error") else ""))

    try:
        server = CassetteServer(file, host=host, port=port, match=match, run=run, pace=pace, on_call=line)
        url = server.start()
    except (OSError, ValueError) as exc:  # unreadable, invalid (ContractError), unknown run, port taken
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    replay = server.replay
    click.echo(f"serving {len(replay.calls)} recorded call(s) of run {replay.run} at {url} ({match} match)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


# ---------------------------------------------------------------- conformance (Contract C)


@main.command()
@click.option("--url", metavar="URL", help="Base URL of the endpoint [$WT_INJECT_URL, else http://127.0.0.1:8647].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), metavar="S",
              help="timeout_s sent with every inject [$WT_INJECT_TIMEOUT_S, else 120]; the driver waits 5 s more.")
@click.pass_context
def conformance(ctx: click.Context, url: str | None, timeout_s: float | None) -> None:
    """Check an agent endpoint against Contract C (the inject protocol).

    \b
    One line per check:
      PASS name: what held
      FAIL name: what broke and how to fix it
      SKIP name: why it was not checked (e.g. /wt/surface not implemented)
      INFO name: worth knowing, not a failure

    Checks inject responses (version echo, reply, tool_calls, object
    arguments, error rules), reset (synchronous, total, idempotent), the reset
    canary, two stateful sessions isolated, and /wt/surface when implemented.
    State checks inject a random UUID and ask for it back: a recalled UUID
    proves a leak, a pass is "no leak observed", not proof of isolation.

    Exit status: 0 conforming; 1 a check failed or the endpoint is
    unreachable; 2 usage (bad URL or timeout).
    """
    from wt_otel.conformance import run_conformance
    from wt_otel.inject import RuntimeSpecError

    try:
        report = run_conformance(url, timeout_s, emit=click.echo)
    except RuntimeSpecError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    ctx.exit(0 if report.conforming else 1)


# ---------------------------------------------------------------- run (the replay engine)


@main.command("run")
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--runtime", "runtime_spec", default="http_inject", show_default=True, metavar="SPEC",
              help="http_inject (a Contract C endpoint), python:MODULE:ATTR or MODULE:ATTR (an in-process agent).")
@click.option("--inject-url", "--url", "inject_url", metavar="URL",
              help="http_inject base URL [$WT_INJECT_URL, else http://127.0.0.1:8647].")
@click.option("--runs", type=click.IntRange(min=1), metavar="N", help="Runs per scenario [the scenario's runs].")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Where traces go: RUNS_DIR/<sweep-id>/<scenario>/run-<n>.trace.json.")
@click.option("--llm", type=click.Choice(["live", "replay"]), default="live", show_default=True,
              help="replay: serve each scenario's llm.cassette.json as an OpenAI-compatible API.")
@click.option("--llm-match", type=click.Choice(["exact", "sequence"]), default="exact", show_default=True,
              help="How the cassette server matches requests (with --llm replay).")
@click.option("--universe-port", type=click.IntRange(0, 65535), default=8648, show_default=True,
              help="Port of the universe MCP server (0: a free one; an out-of-process agent must be told).")
@click.option("--llm-port", type=click.IntRange(0, 65535), default=8649, show_default=True,
              help="Port of the cassette server (with --llm replay).")
@click.option("--label", metavar="L", help="A label recorded in every trace, the summary and the ledger.")
@selection_options
@click.option("--format", "fmt", type=click.Choice(["junit", "json"]),
              help="Also write the results as JUnit XML or a JSON sweep document (needs --out).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Where --format writes (results.xml / results.json; the suffix implies the format).")
@click.option("--otlp-endpoint", metavar="URL",
              help="Also export the results as OTel spans to this OTLP endpoint (e.g. http://127.0.0.1:4318; "
                   "docs/viewing-results.md). A failed export is a warning, never a failed sweep.")
@click.option("--otlp-protocol", type=click.Choice(["grpc", "http/protobuf"]),
              help="OTLP protocol for --otlp-endpoint [default: http/protobuf].")
@click.option("--otlp-header", "otlp_headers", multiple=True, metavar="K=V",
              help="A header sent with every export, e.g. authorization='Bearer T' (repeatable).")
@click.option("--agent-name", metavar="NAME",
              help="gen_ai.agent.name of the result spans' invoke_agent spans [the inject URL or runtime].")
@click.pass_context
def run_(ctx: click.Context, paths: tuple[Path, ...], runtime_spec: str, inject_url: str | None, runs: int | None,
         runs_dir: Path, llm: str, llm_match: str, universe_port: int, llm_port: int, label: str | None,
         scenario_globs: tuple[str, ...], tags: tuple[str, ...], packs: tuple[str, ...], owners: tuple[str, ...],
         fmt: str | None, out: Path | None, otlp_endpoint: str | None, otlp_protocol: str | None,
         otlp_headers: tuple[str, ...], agent_name: str | None) -> None:
    """Replay scenarios against an agent, hermetically, and record a trace per run.

    PATH is a scenario directory (holding scenario.yaml) or a folder searched
    for them. For each scenario its universe is served over MCP at
    http://127.0.0.1:8648/mcp (and with --llm replay its cassette at
    http://127.0.0.1:8649/v1); configure the agent with those URLs (an
    in-process agent finds them in $WT_UNIVERSE_URL and $WT_LLM_BASE_URL).
    Each run resets the agent, probes /wt/surface, and injects the scenario's
    user turns into one new session.

    \b
    Selection: --scenario GLOB, --tag TAG, --pack NAME, --owner OWNER, each
    repeatable; AND across flags, OR within one. A scenario's pack and owner
    come from its scenario.yaml, else from the nearest pack.yaml above it.
    A selector matching no scenario is a warning; selecting none is exit 2.

    \b
    A table, one row per scenario (plain text unless stdout is a terminal):
      VERDICT  SCENARIO  RUNS  <LAYER pass rates>  DETAIL
    VERDICT is PASS, FAIL, PASS_WITH_VARIANCE, INVALID (the agent reported tool
    calls the universe never saw) or ERROR (endpoint down, reset failed, bad
    fixture, port in use, or "not run: circuit breaker" after 3 scenarios in a
    row errored). RUNS is runs passed / runs recorded.
    Traces: RUNS_DIR/<sweep-id>/<scenario>/run-<n>.trace.json, with a
    summary.json of the sweep; one row per scenario is appended to
    RUNS_DIR/ledger.ndjsonl (see `wt-otel report`); --format junit|json --out F
    writes the results for CI; --otlp-endpoint URL sends them as OTel spans,
    linked to each incident's original trace, after everything else is written.

    Exit status: 0 every scenario passed; 1 any ERROR, INVALID or not run;
    2 usage (no scenario found or selected, bad flags, runtime or pack.yaml).
    """
    import logging
    import sys

    from wt_otel.inject import RuntimeSpecError, resolve_runtime
    from wt_otel.packs import PackError
    from wt_otel.runner import RunOptions, Sweep, load_all
    from wt_otel.scenarios import NoScenarios, find_scenarios
    from wt_otel.selection import EmptySelection, from_options
    from wt_otel.sweeps import infer_format, select_scenarios, write_results

    try:
        fmt = infer_format(fmt, out)
        dirs = find_scenarios(list(paths))
        if (otlp_protocol or otlp_headers) and not otlp_endpoint:
            raise ValueError("--otlp-protocol and --otlp-header need --otlp-endpoint URL")
        spans = load_component("exporters", "result-spans")(
            otlp_endpoint, otlp_protocol or "http/protobuf", otlp_headers, agent_name=agent_name,
            warn=lambda text: click.echo(f"warning: {text}", err=True)) if otlp_endpoint else None
        runtime = resolve_runtime(runtime_spec, url=inject_url)
    except (NoScenarios, RuntimeSpecError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    if inject_url and runtime.name != "http_inject":
        click.echo("error: --inject-url applies to --runtime http_inject only", err=True)
        ctx.exit(2)
    selection = from_options(scenario_globs, tags, packs, owners)
    try:
        selected = select_scenarios(load_all(dirs, llm), selection)
    except (PackError, EmptySelection) as exc:
        runtime.close()
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    for warning in selected.warnings:
        click.echo(f"warning: {warning}", err=True)
    scenarios = selected.items
    # divergence is recorded in every trace and summed up per scenario below; no log line mid-progress
    universe_log = logging.getLogger("wt_otel.universe")
    saved_level = universe_log.level
    universe_log.setLevel(logging.ERROR)
    console = Console(stderr=True)
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                      transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("starting", total=None)
            options = RunOptions(runtime=runtime, runs_dir=runs_dir, runs=runs, llm=llm,
                                 llm_match=llm_match, universe_port=universe_port,
                                 llm_port=llm_port, label=label, emit=click.echo,
                                 progress=lambda text: bar.update(task, description=text),
                                 selection=selection.to_dict())
            sweep = Sweep(options).run(scenarios)
    finally:
        runtime.close()
        universe_log.setLevel(saved_level)
    record = sweep.record
    load_component("exporters", "table")(record, file=sys.stdout)
    if sweep.stopped:
        click.echo(f"stopped: {sweep.stopped}", err=True)
    written = ""
    if fmt and out:
        try:
            write_results(record, fmt, out)
            written = f"; {fmt} in {out}"
        except OSError as exc:
            click.echo(f"error: cannot write {out}: {exc}", err=True)
            ctx.exit(1)
    counts: dict[str, int] = {}
    for row in record.scenarios:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    counted = ", ".join(f"{n} {v.lower()}" for v, n in counts.items())
    ledger = f"; ledger {sweep.ledger_path}" if sweep.ledger_path else ""
    if spans is not None:  # last: the ledger, summary and files are already on disk; never changes the exit code
        report = spans.export_sweep(sweep)
        if report.ok:
            click.echo(report.describe())
    click.echo(f"{counted}; traces in {sweep.directory}/{ledger}{written}")
    ctx.exit(sweep.exit_code)


@main.command("report")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="The runs dir whose ledger.ndjsonl to read.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write the report here instead of stdout.")
@click.option("--window", type=click.IntRange(min=1), default=20, show_default=True, metavar="N",
              help="How many of the latest sweeps the trend and flip count cover.")
@click.pass_context
def report_(ctx: click.Context, runs_dir: Path, fmt: str, out: Path | None, window: int) -> None:
    """Summarise the ledger: per scenario its latest verdict, pass-rate trend, flakiness, time since green.

    \b
    text/markdown: one row per scenario
      VERDICT  SCENARIO  PACK  OWNER  TREND  RATE  FLIPS  SINCE GREEN  DETAIL
    TREND is the pass rate (runs passed / runs) of the last N rows; FLIPS
    counts changes between green (PASS, PASS_WITH_VARIANCE) and not green.
    json: the same data as one document; html: a self-contained page (inline
    CSS and SVG charts) to attach to a CI run.

    Unreadable ledger lines (a torn last line after a crash) are skipped with
    a warning. Exit status: 0 ok; 1 no ledger or no row in it; 2 usage.
    """
    from wt_otel.fsutil import atomic_write
    from wt_otel.report import build_report, render
    from wt_otel.sweeps import LEDGER_FILE

    path = runs_dir / LEDGER_FILE
    read = load_component("exporters", "ledger")(path).read()
    for problem in read.problems:
        click.echo(f"warning: {problem}", err=True)
    if not read.rows:
        click.echo(f"error: no ledger rows in {path} (run `wt-otel run --runs-dir {runs_dir}` first)", err=True)
        ctx.exit(1)
    text = render(build_report(read.rows, window=window, problems=read.problems), fmt)
    if out is None:
        click.echo(text, nl=False)
    else:
        atomic_write(out, text)
        click.echo(f"wrote {out}", err=True)


# ---------------------------------------------------------------- check (offline trace2test suites)


@main.command("check")
@click.argument("dump", metavar="[DUMP]", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--suite", "suite_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="SUITE.yaml", help="The trace2test suite (by convention tests/agents/*.t2t.yaml).")
@click.option("--format", "fmt", type=click.Choice(["text", "junit", "json"]), default="text", show_default=True,
              help="junit / json also write the results document to --out (the text lines still print).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Where --format junit|json goes; results.xml or results.json alone picks the format.")
@click.option("--trace-id", metavar="ID", help="The recorded session to check, when DUMP holds several.")
@selection_options
@click.pass_context
def check_(ctx: click.Context, dump: Path | None, suite_path: Path, fmt: str, out: Path | None,
           trace_id: str | None, **selectors: tuple[str, ...]) -> None:
    """Check a recorded trace against a trace2test suite, offline: no agent, no network, no model.

    DUMP is an OTLP dump (JSON lines or protobuf, any supported GenAI
    dialect), OpenAI Agents SDK JSONL, generic JSONL or a *.wtin.json
    envelope; without it, the suite's runner.trace (relative to the suite
    file) is read. The dump must hold one session (or pick one with
    --trace-id). Assertions are judged on server-witnessed tool calls when
    the dump has execute_tool / TOOL spans, else on the transcript.

    \b
    One line per test, then the failing assertions' details:
      PASS safe-refund: Refund requires identity verification
      FAIL wrong-order: ...
          tests[1].assertions[0] tool-sequence: expected [...], got [...] (evidence: ...)

    Exit status: 0 every test passed; 1 a test failed; 2 an invalid suite
    (each problem with its YAML path), an unreadable trace, or bad flags.
    """
    from wt_otel.check import CheckInputError, SuiteError, run_check

    if fmt == "text" and out is not None:
        suffix = out.suffix.lower()
        fmt = {".xml": "junit", ".json": "json"}.get(suffix, "")
        if not fmt:
            click.echo(f"error: --out {out}: say --format junit or --format json", err=True)
            ctx.exit(2)
    if fmt != "text" and out is None:
        click.echo(f"error: --format {fmt} needs --out FILE", err=True)
        ctx.exit(2)
    from wt_otel.selection import Candidate, EmptySelection, from_options, select

    selection, notes = from_options(**selectors), []

    def chosen(tests):  # --scenario / --tag select suite tests by id (tests carry no tags, pack or owner)
        picked = select(tests, selection, key=lambda t: Candidate(id=t.id))
        notes.extend(picked.warnings)
        return picked.items

    try:
        run = run_check(suite_path, dump, trace_id, select=chosen)
    except (SuiteError, CheckInputError, EmptySelection) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    for note in notes:
        click.echo(f"warning: {note}", err=True)
    for warning in run.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(run.text(), nl=False)
    if out is not None:
        load_component("exporters", fmt)(run.sweep(), out)
        click.echo(f"{fmt} results in {out}", err=True)
    ctx.exit(0 if run.passed else 1)

if __name__ == "__main__":  # pragma: no cover
    main()
