"""`wt-otel conformance`: check an agent endpoint against Contract C."""

from __future__ import annotations

import click


@click.command()
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
    from wt_otel.contracts.inject import RuntimeSpecError
    from wt_otel.replay.conformance import run_conformance

    try:
        report = run_conformance(url, timeout_s, emit=click.echo)
    except RuntimeSpecError as exc:
        click.echo(f"error: {exc}", err=True)
        ctx.exit(2)
    ctx.exit(0 if report.conforming else 1)
