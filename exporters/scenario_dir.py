"""The scenario directory `wt-otel import` and `wt-otel serve` write per session.

    <out>/<slug>/incident.wtin.json     Contract A envelope
                 fixture.universe.json  Contract B universe
                 llm.cassette.json      LLM cassette
                 scenario.yaml          declarative skeleton
                 scorer.py              outcome scorer stub
                 IMPORTED.md            what was inferred from what, what needs a human

The directory appears atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from wt_otel._util.fsutil import write_directory
from wt_otel.contracts.cassette import add_run, load_cassette
from wt_otel.exporters.cassette import cassette
from wt_otel.exporters.envelope import envelope
from wt_otel.exporters.scenario import FIXTURES, imported_md, scenario_yaml, scorer_py
from wt_otel.exporters.universe import universe
from wt_otel.model.session import Session


def _json(data: Any) -> bytes:
    """Indented for review in a pull request; orjson because stdlib json is slow with indent."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE, default=str)


def render(session: Session, scenario_id: str, unreviewed: bool = True,
           outcome_scorers: list[str] | None = None) -> dict[str, str | bytes]:
    """All files of one scenario directory, as {file name: content}.

    `outcome_scorers` marks an automatic replay (`wt-otel serve` with `replay.enabled`): scorer.py gets
    that default outcome check instead of the failing stub, and scenario.yaml / IMPORTED.md say it is
    unreviewed and automatic.

    Not re-validated here (it would double the cost of an import); the test
    suite validates what every writer produces for every producer fixture.
    """
    env, uni, cas = envelope(session), universe(session), cassette(session, scenario_id)
    return {
        FIXTURES["envelope"]: _json(env),
        FIXTURES["universe"]: _json(uni),
        FIXTURES["cassette"]: _json(cas),
        "scenario.yaml": scenario_yaml(session, scenario_id, unreviewed, auto_replay=outcome_scorers is not None),
        "scorer.py": scorer_py(session, outcome_scorers),
        "IMPORTED.md": imported_md(session, scenario_id, env["source"], uni["stubbed_schemas"], outcome_scorers),
    }


class ScenarioDirWriter:
    """Writes one directory per session under `out`; refuses to overwrite unless `force`."""

    def __init__(self, out: Path, force: bool = False) -> None:
        self.out = Path(out)
        self.force = force

    def write(self, session: Session, slug: str, unreviewed: bool = True,
              outcome_scorers: list[str] | None = None) -> Path:
        dest = self.out / slug
        files = render(session, slug, unreviewed, outcome_scorers)
        if self.force:
            files[FIXTURES["cassette"]] = appended_cassette(dest / FIXTURES["cassette"], files[FIXTURES["cassette"]])
        write_directory(dest, files, force=self.force)
        return dest


def appended_cassette(existing: Path, new: str | bytes) -> str | bytes:
    """A re-import (`--force`) adds its run to the cassette already there instead of replacing its history:
    the ring buffer keeps the last 5 runs (re-importing the same session replaces only its own run). An
    existing file that is not a valid cassette is replaced, as --force says."""
    try:
        data = json.loads(existing.read_text(encoding="utf-8"))
        load_cassette(data)
    except (OSError, ValueError):  # absent, unreadable, invalid (ContractError is a ValueError)
        return new
    fresh = json.loads(new)
    for key in fresh["history_keys"]:
        add_run(data, fresh["traces"][key])
    return _json(data)
