"""The `wt-otel` group imports a command's module only when it runs, and still offers every command.

Why: start-up time is part of every command (`bench/import_throughput.py` runs `wt-otel import` as a
process); loading serve, replay and the MCP servers for an import cost ~0.17 s of it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from wt_otel.cli import COMMANDS, main


def test_help_lists_every_command() -> None:
    done = CliRunner().invoke(main, ["--help"])
    assert done.exit_code == 0, done.output
    listed = [line.split()[0] for line in done.output.split("Commands:", 1)[1].splitlines() if line.strip()]
    assert listed == sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_loads_and_has_help(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert isinstance(command, click.Command) and command.name == name
    done = CliRunner().invoke(main, [name, "--help"])
    assert done.exit_code == 0, done.output
    assert f"Usage: main {name}" in done.output or f"Usage: wt-otel {name}" in done.output


def test_unknown_command_is_a_usage_error() -> None:
    done = CliRunner().invoke(main, ["no-such-command"])
    assert done.exit_code == 2 and "No such command" in done.output


PROBE = """
import json, sys
from wt_otel.cli import main
try:
    main(["import", "--help"])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith("wt_otel"))))
"""


def test_a_command_imports_only_its_own_family() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "wt_otel.cli.files" in loaded
    others = {f"wt_otel.cli.{module}" for module, _ in COMMANDS.values()} - {"wt_otel.cli.files"}
    assert not others & loaded, sorted(others & loaded)


def test_contracts_names_load_their_submodule_on_first_use() -> None:
    """`wt_otel.contracts` re-exports its submodules' names lazily (module `__getattr__`)."""
    import wt_otel.contracts as contracts

    for name in contracts.__all__:
        assert getattr(contracts, name) is not None
    assert set(contracts.__all__) <= set(dir(contracts))
    with pytest.raises(AttributeError):
        contracts.no_such_name  # noqa: B018


def test_one_contract_does_not_load_them_all() -> None:
    code = "import sys, wt_otel.contracts.inject; print('wt_otel.contracts.scenario' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"
