"""The wt-otel file and wire formats as pydantic models, with their validators.

Contract A envelope (`*.wtin.json`), Contract B universe (`*.universe.json`),
LLM cassette (`*.cassette.json`), `scenario.yaml` and its assertions, Contract C
inject wire, the run record (`*.trace.json`), and results (score, sweep, ledger
row); `formats.FORMATS` registers each by name. Each `load_*` raises
`ContractError`, whose `problems` name the JSON path, the rule and the fix.
This package imports nothing of wt_otel beyond `model` and `_util`.
"""

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
