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
import os
from pathlib import Path
from typing import Any

from wt_otel._util import safejson
from wt_otel._util.fsutil import write_directory
from wt_otel.contracts.cassette import add_run, load_cassette
from wt_otel.exporters.cassette import cassette
from wt_otel.exporters.envelope import envelope
from wt_otel.exporters.scenario import FIXTURES, imported_md, observed_tools, scenario_yaml, scorer_py
from wt_otel.exporters.universe import universe
from wt_otel.model.session import Session


def _json(data: Any, where: str = "", notes: list[str] | None = None) -> bytes:
    """Indented for review in a pull request; orjson because stdlib json is slow with indent.

    Values orjson refuses (ints beyond 64 bits, lone surrogates, deep nesting) are kept as text and
    noted in `notes` (`wt_otel._util.safejson`): one odd value must not cost the whole session."""
    return safejson.dumps(data, where=where, notes=notes)


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
    notes: list[str] = []
    names = (FIXTURES["envelope"], FIXTURES["universe"], FIXTURES["cassette"])
    texts = safejson.dumps_all([(env, names[0]), (uni, names[1]), (cas, names[2])], notes)  # one NaN walk for all
    files: dict[str, str | bytes] = dict(zip(names, texts, strict=True))
    if notes:  # the envelope and IMPORTED.md carry the session's warnings: say what was kept as text
        session.warnings.extend(n for n in dict.fromkeys(notes) if n not in session.warnings)
        env = envelope(session)
        files[FIXTURES["envelope"]] = _json(env, FIXTURES["envelope"])
    tools = observed_tools(session)
    return {
        **files,
        "scenario.yaml": _text(scenario_yaml(session, scenario_id, unreviewed,
                                             auto_replay=outcome_scorers is not None, tools=tools)),
        "scorer.py": _text(scorer_py(session, outcome_scorers)),
        "IMPORTED.md": _text(imported_md(session, scenario_id, env["source"], uni["stubbed_schemas"],
                                         outcome_scorers, tools)),
    }


def _text(text: str) -> bytes:
    """UTF-8; a lone surrogate from trace text is written as its `\\udcXX` escape instead of failing."""
    return text.encode("utf-8", "backslashreplace")


class ScenarioDirWriter:
    """Writes one directory per session under `out`; refuses to overwrite unless `force`."""

    def __init__(self, out: Path, force: bool = False) -> None:
        self.out = Path(out)
        self.force = force

    def write(self, session: Session, slug: str, unreviewed: bool = True,
              outcome_scorers: list[str] | None = None) -> Path:
        dest = self.out / slug
        write_directory(dest, self.files(session, slug, unreviewed, outcome_scorers), force=self.force)
        return dest

    def files(self, session: Session, slug: str, unreviewed: bool = True,
              outcome_scorers: list[str] | None = None) -> dict[str, str | bytes]:
        """What `write` puts in `<out>/<slug>/` (with --force, the cassette already there plus this run):
        `wt-otel import` renders in worker processes and moves the directories into place itself."""
        files = render(session, slug, unreviewed, outcome_scorers)
        if self.force:  # (a path as text: a Path per session cost more than the read that finds nothing)
            existing = os.path.join(self.out, slug, FIXTURES["cassette"])
            files[FIXTURES["cassette"]] = appended_cassette(existing, files[FIXTURES["cassette"]])
        return files


def appended_cassette(existing: Path | str, new: str | bytes) -> str | bytes:
    """A re-import (`--force`) adds its run to the cassette already there instead of replacing its history:
    the ring buffer keeps the last 5 runs (re-importing the same session replaces only its own run). An
    existing file that is not a valid cassette is replaced, as --force says."""
    try:
        with open(existing, encoding="utf-8") as f:
            data = json.loads(f.read())
        load_cassette(data)
    except (OSError, ValueError):  # absent, unreadable, invalid (ContractError is a ValueError)
        return new
    fresh = json.loads(new)
    for key in fresh["history_keys"]:
        add_run(data, fresh["traces"][key])
    return _json(data)
