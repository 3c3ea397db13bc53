"""`wt-otel conformance`: check an agent endpoint against Contract C."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--url", metavar="URL", help="Base URL of the endpoint [$WT_INJECT_URL, else http://127.0.0.1:8647].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), metavar="S",
              help="timeout_s sent with every inject [$WT_INJECT_TIMEOUT_S, else 120]; the driver waits 5 s more.")
@click.option("--deadline", "deadline_s", type=click.FloatRange(min=0, min_open=True), default=2.0,
              show_default=True, metavar="S", help="The short timeout_s of the deadline check (inject.timeout_s).")
@click.option("--scenario", "scenario_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="A scenario (with must_call, its universe and ideally its cassette) for the failure-path and "
                   "runtime checks; its universe and cassette are served on free ports, and every /wt/reset tells "
                   "the agent their URLs (universe_url, llm_base_url).")
@click.option("--state-probe", metavar="MODULE:ATTR",
              help="Called as probe(nonce) after the canary's reset; returns where the nonce still sits (empty: "
                   "the stores are clean).")
@click.option("--universe-port", type=click.IntRange(0, 65535), default=0,
              help="Port the scenario's universe is served on (with --scenario) [default: 0, a free one].")
@click.option("--llm-port", type=click.IntRange(0, 65535), default=0,
              help="Port the scenario's cassette is served on (with --scenario) [default: 0, a free one].")
@click.pass_context
def conformance(ctx: click.Context, url: str | None, timeout_s: float | None, deadline_s: float,
                scenario_dir: Path | None, state_probe: str | None, universe_port: int, llm_port: int) -> None:
    """Check an agent endpoint against Contract C (the inject protocol).

    \b
    One line per check:
      PASS name: what held
      FAIL name: what broke and how to fix it
      SKIP name: why it was not checked (e.g. /wt/surface not implemented)
      INFO name: worth knowing, not a failure

    Checks inject responses (version echo, reply, tool_calls, object
    arguments, error rules), reset (synchronous, total, idempotent), the reset
    canary, two stateful sessions isolated, and /wt/surface when implemented;
    then the failure paths: a turn with a short timeout_s must come back as
    an in-contract answer in time (an endpoint that ignores its deadline
    fails), and with --scenario DIR its tools are held past that deadline, its
    model made to fail (a 200 with "error" set is required), and it is run
    through the universe (its must_call must hold). --state-probe pairs the
    reset canary with a look into the stores.
    State checks inject a random UUID and ask for it back: a recalled UUID
    proves a leak, a pass is "no leak observed", not proof of isolation.

    Exit status: 0 conforming; 1 a check failed or the endpoint is
    unreachable; 2 usage (bad URL or timeout).
    """
    from wt_otel._util.hooks import HookError, load_hook
    from wt_otel.contracts.inject import RuntimeSpecError
    from wt_otel.replay.conformance import run_conformance
    from wt_otel.replay.scenarios import load_scenario_dir

    try:
        probe = load_hook(state_probe, "state probe") if state_probe else None
        loaded = load_scenario_dir(scenario_dir, need_cassette=False) if scenario_dir else None
        if scenario_dir and loaded and loaded.scenario and loaded.scenario.fixtures.cassette:
            loaded = load_scenario_dir(scenario_dir, need_cassette=True)
        if loaded is not None and loaded.error:
            raise ValueError(f"--scenario {scenario_dir}: {loaded.error}")
        report = run_conformance(url, timeout_s, emit=click.echo, deadline_s=deadline_s, scenario=loaded,
                                 state_probe=probe, universe_port=universe_port, llm_port=llm_port)
    except (RuntimeSpecError, HookError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    ctx.exit(0 if report.conforming else 1)
