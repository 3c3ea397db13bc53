"""`wt-otel run`, `report` and `check`: replay scenarios, summarise the ledger, check recorded traces."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from wt_otel.cli._record_options import budget_from, record_budget_options
from wt_otel.components import load as load_component
from wt_otel.components import names
from wt_otel.replay.runtimes import runtime_names
from wt_otel.replay.selection import selection_options

if TYPE_CHECKING:  # click passes the Choice values; the modules are imported when a command runs
    from wt_otel.replay.cassette_server import MatchMode
    from wt_otel.replay.runner import LlmMode


@click.command("run")
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--runtime", "runtime_spec", default="http_inject", show_default=True, metavar="SPEC",
              help="http_inject (a Contract C endpoint), python:MODULE:ATTR or MODULE:ATTR (an in-process agent), "
                   f"or a registered runtime NAME[:ARG] ({', '.join(runtime_names())}).")
@click.option("--inject-url", "--url", "inject_url", metavar="URL",
              help="http_inject base URL [$WT_INJECT_URL, else http://127.0.0.1:8647].")
@click.option("--runs", type=click.IntRange(min=1), metavar="N", help="Runs per scenario [the scenario's runs].")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"),
              show_default=True, help="Where traces go: RUNS_DIR/<sweep-id>/<scenario>/run-<n>.trace.json.")
@click.option("--llm", type=click.Choice(["auto", "replay", "live", "record"]), default="auto", show_default=True,
              help="replay: answer the model from each scenario's cassette (OpenAI Chat Completions, Responses and "
                   "Anthropic Messages APIs); a request the recording lacks fails with a diff of what changed. "
                   "live: the agent's own provider. record: live through a proxy that appends each run that ends "
                   "within budget to the scenario's cassette (the new baseline after a fix). auto, the default here "
                   "and in serve's auto-replay alike: replay when the scenario has a cassette (hermetic, free, the "
                   "incident reproduced), else live with a warning. See docs/fix-loop.md.")
@click.option("--llm-upstream", metavar="URL",
              help="--llm record: the live provider's base URL [$OPENAI_BASE_URL, else https://api.openai.com/v1].")
@record_budget_options
@click.option("--llm-match", type=click.Choice(["exact", "sequence"]), default="exact", show_default=True,
              help="How the cassette server matches requests (with --llm replay).")
@click.option("--pace", is_flag=True,
              help="With --llm replay: replay the recorded latencies (time to first token, gaps between frames).")
@click.option("--perturb", "perturb", multiple=True, metavar="KIND[:TOOL[:ARG]]",
              help="A robustness run per flag, for every scenario: error:TOOL[:MESSAGE], empty:TOOL, "
                   "slow:TOOL[:SECONDS] (TOOL * for all); results in the robustness layer, which joins the gate.")
@click.option("--universe-port", type=click.IntRange(0, 65535), default=0, envvar="WT_UNIVERSE_PORT",
              show_envvar=True, help="Port of the universe MCP server [default: 0, a free one; the agent is told "
                                     "the URL in every /wt/reset and in $WT_UNIVERSE_URL].")
@click.option("--llm-port", type=click.IntRange(0, 65535), default=0, envvar="WT_LLM_PORT", show_envvar=True,
              help="Port of the cassette server or recording proxy (with --llm replay, record) [default: 0, a free "
                   "one, told as llm_base_url and $WT_LLM_BASE_URL].")
@click.option("--label", metavar="L", help="A label recorded in every trace, the summary and the ledger.")
@selection_options
@click.option("--format", "fmt", type=click.Choice(names("results_formats")),
              help="Also write the results in this registered results format, e.g. junit (JUnit XML) or json "
                   "(a JSON sweep document); needs --out.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Where --format writes (results.xml / results.json; the suffix implies the format).")
@click.option("--otlp-endpoint", metavar="URL",
              help="Also export the results as OTel spans to this OTLP endpoint (e.g. http://127.0.0.1:4318; "
                   "docs/viewing-results.md) [$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, $OTEL_EXPORTER_OTLP_ENDPOINT; "
                   "`none`: off]. A failed export is a warning, never a failed sweep.")
@click.option("--otlp-protocol", type=click.Choice(["grpc", "http/protobuf"]),
              help="OTLP protocol for --otlp-endpoint [$OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf].")
@click.option("--otlp-header", "otlp_headers", multiple=True, metavar="K=V",
              help="A header sent with every export, e.g. authorization='Bearer T' (repeatable) "
                   "[$OTEL_EXPORTER_OTLP_HEADERS].")
@click.option("--agent-name", metavar="NAME",
              help="gen_ai.agent.name of the result spans' invoke_agent spans [the inject URL or runtime].")
@click.pass_context
def run_(ctx: click.Context, paths: tuple[Path, ...], runtime_spec: str, inject_url: str | None, runs: int | None,
         runs_dir: Path, llm: LlmMode, llm_upstream: str | None, max_llm_calls: int, max_seconds: float,
         max_bytes: int, llm_match: MatchMode, pace: bool,
         perturb: tuple[str, ...], universe_port: int, llm_port: int, label: str | None,
         scenario_globs: tuple[str, ...], tags: tuple[str, ...], packs: tuple[str, ...], owners: tuple[str, ...],
         fmt: str | None, out: Path | None, otlp_endpoint: str | None, otlp_protocol: str | None,
         otlp_headers: tuple[str, ...], agent_name: str | None) -> None:
    """Replay scenarios against an agent, hermetically, and record a trace per run.

    PATH is a scenario directory (holding scenario.yaml) or a folder searched
    for them. For each scenario its universe is served over MCP (and with
    --llm replay its cassette as an OpenAI-compatible API) on free ports; the
    agent is told the URLs: an http_inject endpoint in every /wt/reset body
    (universe_url, llm_base_url; docs/inject-protocol.md), an in-process agent
    in $WT_UNIVERSE_URL and $WT_LLM_BASE_URL.
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

    \b
    Runtimes (--runtime):
      http_inject                 a Contract C endpoint (any language, any process)
      python:MODULE:ATTR          a callable agent(text) or agent(text, session_id),
                                  plain or async, returning the reply string, or
                                  {"reply", "tool_calls": [{"name", "arguments"}], "error"?},
                                  or (reply, tool_calls); optional agent.reset() before
                                  each run, agent.surface(); tools from $WT_UNIVERSE_URL
                                  (MCP), model at $WT_LLM_BASE_URL when replayed
      openai-agents:MODULE:ATTR   an agents.Agent as it is: function tools answered by
                                  the universe (their bodies never run), model pointed at
                                  the cassette; docs/replay-your-agent.md
      langgraph:MODULE:ATTR       a compiled LangGraph graph (langchain.agents.create_agent):
                                  ToolNode tools answered by the universe, langchain-openai
                                  chat models pointed at the cassette
      pydantic-ai:MODULE:ATTR     a pydantic_ai.Agent: function tools answered by the
                                  universe, its OpenAI/Anthropic model pointed at the cassette

    Exit status: 0 every scenario passed; 1 any ERROR, INVALID or not run;
    2 usage (no scenario found or selected, bad flags, runtime or pack.yaml).
    """
    import logging
    import sys

    from wt_otel._util.otlp_env import resolve_otlp
    from wt_otel.contracts.inject import RuntimeSpecError
    from wt_otel.contracts.perturbation import parse_flag
    from wt_otel.replay.packs import PackError
    from wt_otel.replay.runner import RunOptions, Sweep, load_all
    from wt_otel.replay.runtimes import resolve_runtime
    from wt_otel.replay.scenarios import NoScenarios, find_scenarios
    from wt_otel.replay.selection import EmptySelection, from_options, select_scenarios
    from wt_otel.reporting.outputs import infer_format, write_results

    try:
        perturbations = [parse_flag(spec) for spec in perturb]
        fmt = infer_format(fmt, out)
        dirs = find_scenarios(list(paths))
        settings = resolve_otlp(otlp_endpoint, otlp_protocol, otlp_headers or None, explicit_source="--otlp-endpoint")
        if (otlp_protocol or otlp_headers) and settings is None:
            raise ValueError("--otlp-protocol and --otlp-header need --otlp-endpoint URL "
                             "(or OTEL_EXPORTER_OTLP_ENDPOINT)")
        spans = load_component("exporters", "result-spans").from_settings(
            settings, agent_name=agent_name,
            warn=lambda text: click.echo(f"warning: {text}", err=True)) if settings else None
        runtime = resolve_runtime(runtime_spec, url=inject_url)
    except (NoScenarios, RuntimeSpecError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    if pace and llm != "replay":
        runtime.close()
        click.echo("error: --pace applies to --llm replay only (it paces the recorded LLM)", err=True)
        ctx.exit(2)
    if inject_url and runtime.name.startswith("python"):
        runtime.close()
        click.echo("error: --inject-url applies to --runtime http_inject (or an entry-point runtime) only", err=True)
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
    universe_log = logging.getLogger("wt_otel.replay.universe")
    saved_level = universe_log.level
    universe_log.setLevel(logging.ERROR)
    console = Console(stderr=True)
    try:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                      transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("starting", total=None)
            options = RunOptions(runtime=runtime, runs_dir=runs_dir, runs=runs, llm=llm, llm_upstream=llm_upstream,
                                 record_budget=budget_from(max_llm_calls, max_seconds, max_bytes),
                                 llm_match=llm_match, pace=pace, perturbations=perturbations,
                                 universe_port=universe_port,
                                 llm_port=llm_port, label=label, emit=click.echo,
                                 progress=lambda text: bar.update(task, description=text),
                                 selection=selection.to_dict())
            sweep = Sweep(options).run(scenarios)
    finally:
        runtime.close()
        universe_log.setLevel(saved_level)
    record = sweep.record
    assert record is not None, "a finished sweep has its results document"
    load_component("exporters", "table")(record, file=sys.stdout)
    for line in sweep.miss_hints():  # per tool call the universe could not answer, the command that answers it
        click.echo(line)
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


@click.command("report")
@click.option("--runs-dir", "runs_dirs", type=click.Path(file_okay=False, path_type=Path), multiple=True,
              metavar="DIR", help="The runs dir whose ledger.ndjsonl to read [runs]. Repeatable: the ledgers are "
              "reported together.")
@click.option("--data-dir", "data_dirs", type=click.Path(file_okay=False, path_type=Path), multiple=True,
              metavar="DIR", help="A serve data dir: its automatic replays' ledger, DIR/runs/ledger.ndjsonl. "
              "Repeatable (one per serve instance), and combines with --runs-dir.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True)
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Write the report here instead of stdout.")
@click.option("--window", type=click.IntRange(min=1), default=20, show_default=True, metavar="N",
              help="How many of the latest sweeps the trend and flip count cover.")
@click.pass_context
def report_(ctx: click.Context, runs_dirs: tuple[Path, ...], data_dirs: tuple[Path, ...], fmt: str,
            out: Path | None, window: int) -> None:
    """Summarise the ledger: per scenario its latest verdict, pass-rate trend, flakiness, time since green.

    \b
    text/markdown: one row per scenario, grouped by owner (no owner last),
    each owner followed by its subtotal ("owner team-a: 2 scenario(s), 1 green
    (50%): FAIL 1, PASS 1")
      VERDICT  SCENARIO  PACK  OWNER  TREND  RATE  FLIPS  SINCE GREEN  DETAIL
    TREND is the pass rate (runs passed / runs) of the last N rows; FLIPS
    counts changes between green (PASS, PASS_WITH_VARIANCE) and not green.
    json: the same data as one document; html: a self-contained page (inline
    CSS and SVG charts) to attach to a CI run.

    Several ledgers (--runs-dir and --data-dir, each repeatable: the serve
    instances behind a load balancer) are reported as one: a scenario's rows
    from every ledger, in time order. A ledger named twice is read once; one
    that is missing among several is a warning.

    Unreadable ledger lines (a torn last line after a crash) are skipped with
    a warning. Exit status: 0 ok; 1 no ledger or no row in it; 2 usage.
    """
    from wt_otel._util.fsutil import atomic_write
    from wt_otel.reporting.outputs import LEDGER_FILE
    from wt_otel.reporting.report import build_report, render

    paths = [d / LEDGER_FILE for d in runs_dirs] + [d / "runs" / LEDGER_FILE for d in data_dirs]
    paths = list({p.resolve(): p for p in paths or [Path("runs") / LEDGER_FILE]}.values())
    rows, problems = [], []
    for path in paths:
        if len(paths) > 1 and not path.is_file():
            click.echo(f"warning: no ledger at {path}", err=True)
            continue
        read = load_component("exporters", "ledger")(path).read()
        rows += read.rows
        problems += read.problems
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)
    if not rows:
        where = ", ".join(str(p) for p in paths)
        hint = f"run `wt-otel run --runs-dir {paths[0].parent}` first" if len(paths) == 1 else "no ledger has a row"
        click.echo(f"error: no ledger rows in {where} ({hint})", err=True)
        ctx.exit(1)
    text = render(build_report(rows, window=window, problems=problems), fmt)
    if out is None:
        click.echo(text, nl=False)
    else:
        atomic_write(out, text)
        click.echo(f"wrote {out}", err=True)


# ---------------------------------------------------------------- check (offline trace2test suites)


@click.command("check")
@click.argument("dump", metavar="[DUMP]", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--suite", "suite_paths", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="SUITE.yaml", help="A trace2test suite (repeatable) [every tests/agents/*.t2t.yaml].")
@click.option("--format", "fmt", type=click.Choice(["text", *names("results_formats")]), default="text",
              show_default=True, help="A registered results format (junit, json, ...) also writes the results "
                                      "document to --out (the text lines still print).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Where --format junit|json goes; results.xml or results.json alone picks the format.")
@click.option("--trace-id", metavar="ID", help="The recorded session to check, when DUMP holds several.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), metavar="D",
              help="Check a session of serve's data dir instead of DUMP (with --session).")
@click.option("--session", "session_name", metavar="KEY|SLUG",
              help="With --data-dir: the session (rendered or kept for later: read as it is kept).")
@selection_options
@click.pass_context
def check_(ctx: click.Context, dump: Path | None, suite_paths: tuple[Path, ...], fmt: str, out: Path | None,
           trace_id: str | None, data_dir: Path | None, session_name: str | None,
           **selectors: tuple[str, ...]) -> None:
    """Check recorded traces against trace2test suites, offline: no agent, no network, no model.

    Without --suite, every tests/agents/*.t2t.yaml (the convention) is
    checked; --suite may be repeated. Each suite is judged on DUMP when given,
    else on its own runner.trace (relative to the suite file).

    DUMP is an OTLP dump (JSON lines or protobuf, any supported GenAI
    dialect), OpenAI Agents SDK JSONL, generic JSONL or a *.wtin.json
    envelope. The dump must hold one session (or pick one with --trace-id).
    --data-dir D --session KEY|SLUG checks a session of serve's data dir,
    however it is kept (sessions kept by reference are read from the segment
    log; nothing is written, serve may run).
    Assertions are judged on server-witnessed tool calls when the dump has
    execute_tool / TOOL spans, else on the transcript.

    \b
    Per suite, one line per test, then the failing assertions' details:
      PASS safe-refund: Refund requires identity verification
      FAIL wrong-order: ...
          tests[1].assertions[0] tool-sequence: expected [...], got [...] (evidence: ...)

    JUnit: one <testsuite> per suite. Exit status: 0 every test passed; 1 a
    test failed; 2 no suite found, an invalid suite (each problem with its
    YAML path), an unreadable trace, or bad flags.
    """
    from wt_otel.contracts.results import SweepResult
    from wt_otel.reporting.outputs import infer_format, write_results
    from wt_otel.scoring.check import CheckInputError, SuiteError, discover_suites, run_check

    try:
        fmt = infer_format(None if fmt == "text" else fmt, out) or "text"
    except ValueError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    stored = None
    if data_dir is not None or session_name is not None:
        if data_dir is None or session_name is None or dump is not None:
            click.echo("error: --data-dir and --session go together, instead of DUMP", err=True)
            ctx.exit(2)
        try:  # through the data dir's session store: every session, however serve keeps it
            store = load_component("exporters", "sessions")(data_dir)
            found = store.get(session_name)
            stored = (store.session(found), store.directory(found))
        except (FileNotFoundError, ValueError) as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
    suites = list(dict.fromkeys(suite_paths)) or discover_suites(Path())
    if not suites:
        click.echo("error: no suite: pass --suite FILE or put suites in tests/agents/*.t2t.yaml", err=True)
        ctx.exit(2)
    from wt_otel.replay.selection import Candidate, EmptySelection, from_options, select

    selection, notes = from_options(**selectors), []

    def chosen(tests):  # --scenario / --tag select suite tests by id (tests carry no tags, pack or owner)
        picked = select(tests, selection, key=lambda t: Candidate(id=t.id))
        notes.extend(picked.warnings)
        return picked.items

    runs, broken = [], False
    for suite_path in suites:
        try:
            run = run_check(suite_path, dump, trace_id, select=chosen, stored=stored)
        except (SuiteError, CheckInputError, EmptySelection) as exc:
            click.echo(f"error: {exc}", err=True)
            broken = True
            continue
        if len(suites) > 1:
            click.echo(f"== {run.suite.name or suite_path} ({suite_path})")
        for warning in run.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(run.text(), nl=False)
        runs.append(run)
    for note in dict.fromkeys(notes):
        click.echo(f"warning: {note}", err=True)
    if out is not None and runs:
        sweeps = [run.sweep() for run in runs]
        names = [s.scenarios[0].pack if s.scenarios else "" for s in sweeps]
        for sweep, run in zip(sweeps, runs, strict=True):  # one <testsuite> per suite, even when names repeat
            if names.count(run.suite.name) > 1:
                for record in sweep.scenarios:
                    record.pack = f"{run.suite.name} ({run.suite.path})"
        merged = SweepResult(sweep_id=sweeps[0].sweep_id, started_at=sweeps[0].started_at,
                             finished_at=sweeps[-1].finished_at, wt_version=sweeps[0].wt_version,
                             scenarios=[r for s in sweeps for r in s.scenarios],
                             selection={"suites": [str(r.suite.path) for r in runs]})
        write_results(merged, fmt, out)
        click.echo(f"{fmt} results in {out}", err=True)
    ctx.exit(2 if broken else 0 if all(run.passed for run in runs) else 1)
