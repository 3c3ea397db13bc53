"""The wt-otel file and wire formats as pydantic models, with their validators.

Contract A envelope (`*.wtin.json`), Contract B universe (`*.universe.json`),
LLM cassette (`*.cassette.json`), `scenario.yaml` and its assertions, Contract C
inject wire, the run record (`*.trace.json`), and results (score, sweep, ledger
row); `formats.FORMATS` registers each by name. Each `load_*` raises
`ContractError`, whose `problems` name the JSON path, the rule and the fix.
This package imports nothing of wt_otel beyond `model` and `_util`.

The names below load their submodule on first use (module `__getattr__`): importing one
contract (`wt_otel.contracts.inject`, which every command's start-up needs) runs this
`__init__`, and loading every contract's pydantic models here cost ~0.1 s of each start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers and readers; loaded lazily by __getattr__
    from wt_otel.contracts.cassette import Cassette, load_cassette
    from wt_otel.contracts.envelope import Envelope, lint_envelope, load_envelope
    from wt_otel.contracts.formats import FORMATS, Format
    from wt_otel.contracts.problems import ContractError, Problem
    from wt_otel.contracts.scenario import Scenario, load_scenario
    from wt_otel.contracts.universe import Universe, lint_universe, load_universe
    from wt_otel.contracts.validate import (
        KINDS,
        FileReport,
        UnreadableFile,
        check_data,
        detect_kind,
        json_schema,
        validate_data,
        validate_file,
    )

_SUBMODULE = {  # public name -> the submodule that defines it
    **dict.fromkeys(("Cassette", "load_cassette"), "cassette"),
    **dict.fromkeys(("Envelope", "lint_envelope", "load_envelope"), "envelope"),
    **dict.fromkeys(("FORMATS", "Format"), "formats"),
    **dict.fromkeys(("ContractError", "Problem"), "problems"),
    **dict.fromkeys(("Scenario", "load_scenario"), "scenario"),
    **dict.fromkeys(("Universe", "lint_universe", "load_universe"), "universe"),
    **dict.fromkeys(("KINDS", "FileReport", "UnreadableFile", "check_data", "detect_kind", "json_schema",
                     "validate_data", "validate_file"), "validate"),
}


def __getattr__(name: str) -> Any:
    """`wt_otel.contracts.X`: imports X's submodule the first time, then X is a plain attribute."""
    module = _SUBMODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBMODULE})

__all__ = [
    "FORMATS",
    "KINDS",
    "Cassette",
    "ContractError",
    "Envelope",
    "FileReport",
    "Format",
    "Problem",
    "Scenario",
    "Universe",
    "UnreadableFile",
    "check_data",
    "detect_kind",
    "json_schema",
    "lint_envelope",
    "lint_universe",
    "load_cassette",
    "load_envelope",
    "load_scenario",
    "load_universe",
    "validate_data",
    "validate_file",
]
