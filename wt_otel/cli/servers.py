"""`wt-otel universe` and `wt-otel cassette`: serve recorded tools (Contract B) and LLM calls."""

from __future__ import annotations

import errno
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wt_otel.cli._record_options import budget_from, record_budget_options

if TYPE_CHECKING:  # the Choice value click passes; the module is imported when the command runs
    from wt_otel.replay.cassette_server import MatchMode


def listen_error(host: str, port: int, exc: BaseException) -> str:
    """One line naming the address and the cause, e.g. a port in use (not `[Errno 98] Address already in use`)."""
    import errno

    causes = [exc, exc.__cause__, exc.__context__]
    if any(isinstance(c, OSError) and c.errno == errno.EADDRINUSE for c in causes) or "in use" in str(exc):
        return (f"cannot listen on {host}:{port}: the port is already in use (another process listens there; "
                "choose another with --port, or --port 0 for a free one)")
    inner = next((c for c in causes if isinstance(c, OSError) and c.strerror), None)
    return f"cannot listen on {host}:{port}: {inner.strerror if inner else exc}"


@click.group()
def universe() -> None:
    """Serve a recorded tool universe over MCP, freeze a run's calls into one, or add answers to one."""


@universe.command("serve")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8648, show_default=True, type=click.IntRange(0, 65535), envvar="WT_UNIVERSE_PORT",
              show_envvar=True, help="0 picks a free port.")
@click.option("--synthesize", "synthesize_spec", metavar="MODULE:ATTR",
              help="The synthesize hook, called as hook(tool_name, args, universe) on a miss under on_miss: "
                   "synthesize (the universe file's folder and the current directory are importable).")
@click.option("--stdio", is_flag=True,
              help="Answer MCP on stdin/stdout instead of HTTP, for an MCP client that launches its server as a "
                   "command; ends when the client closes stdin. The lines go to stderr.")
@click.option("--calls-out", "calls_out", type=click.Path(dir_okay=False, path_type=Path),
              help="At exit, write the call log here (what GET /wt/calls answers, and what `universe freeze` "
                   "reads).")
@click.pass_context
def universe_serve(ctx: click.Context, file: Path, host: str, port: int, synthesize_spec: str | None, stdio: bool,
                   calls_out: Path | None) -> None:
    """Serve FILE (*.universe.json) as an MCP server (streamable HTTP) until Ctrl-C.

    Prints the MCP URL, then one line per tool call with how it was answered
    (exact, keyed, or the miss policy). The call log is also at GET /wt/calls;
    POST /wt/reset-calls starts a new run.

    With --stdio the server speaks MCP on stdin/stdout (point the agent's MCP
    client at the command `wt-otel universe serve FILE --stdio`), and prints
    its lines to stderr.
    """

    from wt_otel.contracts.problems import ContractError
    from wt_otel.replay.mcp_server import UniverseMCPServer, serve_stdio
    from wt_otel.replay.universe import RecordedUniverse, divergence_of

    def show(entry: dict) -> None:
        args = json.dumps(entry["args"], ensure_ascii=False)
        flag = " ERROR" if entry["is_error"] else ""
        div = " DIVERGENCE" if divergence_of(entry) else ""
        click.echo(f"{entry['match']:<10} {entry['tool_name']}({args}){flag}{div}", err=stdio)

    from wt_otel._util.hooks import HookError, load_hook

    try:
        hook = load_hook(synthesize_spec, "synthesize hook", extra_path=str(file.resolve().parent)) \
            if synthesize_spec else None
    except HookError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    try:
        engine = RecordedUniverse.from_file(str(file), on_call=show, synthesize=hook)
    except (ContractError, ValueError) as exc:
        click.echo(f"error: {file}: {exc}", err=True)
        ctx.exit(1)
    if calls_out is not None and not calls_out.resolve().parent.is_dir():
        click.echo(f"error: --calls-out {calls_out}: its folder does not exist", err=True)
        ctx.exit(2)
    served = f"serving {len(engine.universe.tools)} tool(s), {len(engine.universe.recordings)} recording(s)"
    if stdio:  # an MCP client stops its server by closing stdin, or with SIGTERM
        serve_until_stopped(f"{served} on stdin/stdout (until the client closes stdin)",
                            serve=lambda: serve_stdio(engine), err=True)
    else:
        server = UniverseMCPServer(engine, host=host, port=port)
        try:
            url = server.start()
        except (OSError, RuntimeError) as exc:
            click.echo(f"error: {listen_error(host, port, exc)}", err=True)
            ctx.exit(1)
        serve_until_stopped(f"{served} at {url} (Ctrl-C to stop)", stop=server.stop)
    if calls_out is not None:
        log = engine.call_log()
        try:
            calls_out.write_text(json.dumps({"calls": log, "count": len(log)}, indent=2, ensure_ascii=False) + "\n",
                                 encoding="utf-8")
        except OSError as exc:
            click.echo(f"error: --calls-out {calls_out}: {exc.strerror or exc}", err=True)
            ctx.exit(1)
        click.echo(f"wrote {len(log)} call(s) to {calls_out}", err=stdio)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve_until_stopped(ready: str, stop: Callable[[], object] = lambda: None,
                        serve: Callable[[], object] | None = None, err: bool = False) -> None:
    """Print `ready` and wait for Ctrl-C, SIGTERM (a process manager, an MCP client) or, given `serve`, its
    return; then `stop()` the server: each ends it cleanly (a recording proxy saves its cassette,
    `--calls-out` is written).

    `serve` runs in a daemon thread, so the main thread only ever waits here: the KeyboardInterrupt a
    signal raises lands in this wait, never half-way through a server's event loop. The handler is in
    place before `ready` is printed, so a caller that signals as soon as it reads the line is safe too."""
    import threading

    finished, failed = threading.Event(), []

    def run(target: Callable[[], object]) -> None:
        try:
            target()
        except BaseException as exc:  # handed to the main thread, which reports it
            failed.append(exc)
        finally:
            finished.set()

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        if serve is not None:
            threading.Thread(target=run, args=(serve,), name="wt-otel-serve", daemon=True).start()
        click.echo(ready, err=err)
        finished.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop()
        signal.signal(signal.SIGTERM, previous)
    if failed:
        raise failed[0]


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
    from wt_otel.replay.universe import freeze_universe

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


def _read_universe(ctx: click.Context, file: Path) -> dict:
    """FILE parsed and validated, or a one-line error and exit 1."""
    from wt_otel.contracts.universe import load_universe

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a universe file (a *.universe.json is one JSON object)")
        load_universe(data)  # ContractError is a ValueError
    except (OSError, ValueError) as exc:
        click.echo(f"error: {file}: {getattr(exc, 'strerror', None) or exc}", err=True)
        ctx.exit(1)
    return data


def _write_universe(file: Path, data: dict) -> None:
    from wt_otel._util.fsutil import atomic_write

    atomic_write(file, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _json_option(ctx: click.Context, flag: str, text: str, want_object: bool = False) -> object:
    try:
        value = json.loads(text)
    except ValueError as exc:
        click.echo(f"error: {flag} must be JSON ({exc}); got {text[:80]!r}"
                   + (" (replace it with the tool's answer)" if text == "RESULT_JSON" else ""), err=True)
        ctx.exit(2)
    if want_object and not isinstance(value, dict):
        click.echo(f'error: {flag} must be a JSON object of arguments, e.g. \'{{"query": "Bluewing"}}\'', err=True)
        ctx.exit(2)
    return value


@universe.command("add")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tool", required=True, help="The tool's name (added to the universe's tools if it is new).")
@click.option("--args", "args_json", required=True, metavar="JSON", help="The call's arguments, a JSON object.")
@click.option("--result", "result_json", metavar="JSON", help="What the tool answers, as JSON (stored as given).")
@click.option("--error", "error_text", metavar="TEXT", help="The call fails with this error text instead.")
@click.pass_context
def universe_add(ctx: click.Context, file: Path, tool: str, args_json: str, result_json: str | None,
                 error_text: str | None) -> None:
    """Add a reviewed answer (source: manual) for a call the universe lacks.

    For a fix that calls another tool, or the same tool with other arguments:
    `wt-otel run` prints this command for each such call, with the arguments
    filled in. A stateless tool's recording with the same arguments is replaced.
    """
    from wt_otel.contracts.problems import ContractError
    from wt_otel.replay.universe import add_answer

    if (result_json is None) == (error_text is None):
        click.echo("error: give exactly one of --result JSON or --error TEXT", err=True)
        ctx.exit(2)
    args = _json_option(ctx, "--args", args_json, want_object=True)
    assert isinstance(args, dict)  # _json_option exits otherwise
    result = None if result_json is None else _json_option(ctx, "--result", result_json)
    data = _read_universe(ctx, file)
    try:
        out, said = add_answer(data, tool, args, result=result, error=error_text, source="manual")
    except ContractError as exc:
        click.echo(f"error: the answer would make {file} invalid: {exc}", err=True)
        ctx.exit(1)
    _write_universe(file, out)
    click.echo(f"{file}: {said} for {tool}({json.dumps(args, ensure_ascii=False, sort_keys=True)}), source manual")


@universe.command("record")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--from", "source", required=True, metavar="URL_OR_COMMAND",
              help="The real tool server: its MCP URL (streamable HTTP), or the command that starts it on stdio.")
@click.option("--sweep", "sweep_dir", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="The sweep of `wt-otel run` whose tool misses to record (<runs-dir>/<sweep id>).")
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds for the whole exchange with the server.")
@click.pass_context
def universe_record(ctx: click.Context, file: Path, source: str, sweep_dir: Path, timeout_s: float) -> None:
    """Ask the real tool server once for each call of a sweep that FILE had no answer for; record each
    answer (source: recorded) and show it.

    Only the sweep's misses are called, each once: review what is printed
    before you commit the universe (the server's answers become the replay's).
    """
    from wt_otel.contracts.problems import ContractError
    from wt_otel.replay.misses import sweep_tool_misses
    from wt_otel.replay.tool_recorder import ask_tool_server
    from wt_otel.replay.universe import add_answer

    data = _read_universe(ctx, file)
    try:
        misses = sweep_tool_misses(sweep_dir, file)
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(1)
    if not misses:
        click.echo(f"no tool call of {sweep_dir} missed {file}: nothing to record")
        return
    try:
        listing, answers = ask_tool_server(source, [(m.tool, m.args) for m in misses], timeout_s=timeout_s)
    except Exception as exc:  # the SDK raises its own types (and groups) for a server that is down or not MCP
        from wt_otel.replay.runtimes import describe_exception

        click.echo(f"error: cannot ask the tool server at {source}: {describe_exception(exc)}", err=True)
        ctx.exit(1)
    defs = {t["name"]: t for t in listing}
    for answer in answers:
        shown = json.dumps(answer.result, ensure_ascii=False)
        what = f"error {answer.error!r}" if answer.error is not None else (
            shown if len(shown) <= 300 else shown[:297] + "...")
        args = json.dumps(answer.args, ensure_ascii=False, sort_keys=True)
        try:
            data, said = add_answer(data, answer.tool, answer.args, result=answer.result, error=answer.error,
                                    source="recorded", tool_def=defs.get(answer.tool))
        except ContractError as exc:
            click.echo(f"error: {answer.tool}({args}): the answer would make {file} invalid: {exc}", err=True)
            ctx.exit(1)
        click.echo(f"{answer.tool}({args}) -> {what}  [{said}]")
    _write_universe(file, data)
    click.echo(f"wrote {file}: {len(answers)} answer(s) recorded from {source} (source: recorded); review them")


@click.group()
def cassette() -> None:
    """Serve recorded LLM cassettes (*.cassette.json) to an agent under test."""


@cassette.command("serve")
@click.argument("file", type=click.Path(exists=True, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8649, show_default=True, envvar="WT_LLM_PORT",
              show_envvar=True, help="0 picks a free port.")
@click.option("--match", "match", type=click.Choice(["exact", "sequence"]), default="exact", show_default=True,
              help="exact: by model, messages and tools; sequence: the Nth request gets the Nth recorded call.")
@click.option("--run", "run", metavar="TRACE_ID", help="Which recorded run (a history key); default the latest.")
@click.option("--pace", is_flag=True, help="Replay the recorded delays between frames.")
@click.pass_context
def cassette_serve(ctx: click.Context, file: Path, host: str, port: int, match: MatchMode, run: str | None,
                   pace: bool) -> None:
    """Serve FILE (a cassette, or a scenario directory) as an OpenAI-compatible API until interrupted.

    \b
    Prints the base URL, then one line per request:
      #SEQ MATCH recorded[I] STATUS MODEL [stream] [error TYPE]
      #SEQ miss STATUS llm_divergence at PATH: expected ..., received ...
    The call log is also at GET /wt/llm-calls; POST /wt/reset starts a new run.
    """

    from wt_otel.replay.cassette_server import CassetteServer

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
    except (OSError, ValueError) as exc:  # unreadable, invalid (ContractError), unknown run
        click.echo(f"error: {file}: {exc}", err=True)
        ctx.exit(1)
    try:
        url = server.start()
    except (OSError, RuntimeError) as exc:  # port taken
        click.echo(f"error: {listen_error(host, port, exc)}", err=True)
        ctx.exit(1)
    replay = server.replay
    serve_until_stopped(f"serving {len(replay.calls)} recorded call(s) of run {replay.run} at {url} ({match} match)",
                        stop=server.stop)


@cassette.command("record")
@click.option("--upstream", required=True, metavar="URL",
              help="The live provider's base URL, as its client takes it (https://api.openai.com/v1, "
                   "https://api.anthropic.com).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path), metavar="CASSETTE",
              help="The cassette to record into; an existing one keeps its history (a ring buffer of 5 runs).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8649, show_default=True, envvar="WT_LLM_PORT",
              show_envvar=True, help="0 picks a free port.")
@click.option("--record-tick-ms", type=click.FloatRange(min=0), default=100.0, show_default=True,
              help="Streamed chunks arriving within this window become one frame.")
@record_budget_options
@click.pass_context
def cassette_record(ctx: click.Context, upstream: str, out: Path, host: str, port: int,
                    record_tick_ms: float, max_llm_calls: int, max_seconds: float, max_bytes: int) -> None:
    """Pass an agent's model calls through to UPSTREAM and record them into CASSETTE until interrupted.

    \b
    Point the agent's base URL at the printed URL. OpenAI Chat Completions,
    the OpenAI Responses API and Anthropic Messages (JSON or streamed) are
    recorded in the provider-agnostic cassette layer, so `cassette serve`
    replays them to any of the three APIs. This session is one new run of the
    cassette (POST /wt/reset ends it and starts another). A run is written
    once, atomically, when it ends (reset, Ctrl-C, SIGTERM) within its budget
    (--max-llm-calls, --max-seconds, --max-bytes); a run over budget has its
    next model call refused, is never written, and the exit status is 1. A
    killed recorder leaves the file as it was. One line per recorded call:
      #SEQ recorded[I] STATUS API MODEL [stream] frames=N ttfb=MS
    """

    from wt_otel.replay.recorder import RecordingProxy

    def line(entry: dict) -> None:
        if entry["event"] == "upstream_error":
            click.echo(f"#{entry['seq']} 502 upstream unreachable: {entry['error']}")
            return
        if entry["event"] == "budget_exceeded":
            click.echo(f"#{entry['seq']} 400 recording stopped: {entry['error']}")
            return
        click.echo(f"#{entry['seq']} recorded[{entry['recorded_index']}] {entry['status']} {entry['api']} "
                   f"{entry['model']}" + (" stream" if entry["stream"] else "")
                   + f" frames={entry['frames']} ttfb={entry['ttfb_ms']:.0f}ms")

    try:
        proxy = RecordingProxy(upstream, out, host=host, port=port, tick_ms=record_tick_ms, on_call=line,
                               budget=budget_from(max_llm_calls, max_seconds, max_bytes))
        url = proxy.start()
    except (OSError, ValueError) as exc:  # bad URL, unreadable/invalid cassette (ContractError), port taken
        taken = isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
        click.echo(f"error: {listen_error(host, port, exc) if taken else exc}", err=True)
        ctx.exit(1)
    serve_until_stopped(f"recording at {url} -> {upstream} into {out} (run {proxy.cassette.run})", stop=proxy.stop)
    try:  # the server is stopped: no call is in flight while the run is written
        ended = proxy.end_run(keep=True)
    except (OSError, ValueError) as exc:
        click.echo(f"error: the run was not written: {exc}", err=True)
        ctx.exit(1)
    click.echo(ended.describe(), err=ended.stopped_by is not None)
    ctx.exit(1 if any(e.stopped_by for e in proxy.ended) else 0)
