"""Finding and loading scenario directories for `wt-otel run`.

A PATH is a scenario directory (it holds `scenario.yaml`) or a folder searched
recursively for them, in sorted order so a sweep is reproducible. Loading
never raises for a broken scenario: a bad `scenario.yaml` or fixture becomes
`LoadedScenario.error`, because a scenario that cannot run must still appear
in the results as ERROR instead of vanishing from the sweep.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from wt_otel._util.fsutil import safe_slug
from wt_otel.contracts.cassette import Cassette
from wt_otel.contracts.scenario import Scenario, load_scenario
from wt_otel.contracts.universe import Universe, load_universe
from wt_otel.replay.cassette import CASSETTE_FILE, read_cassette

SCENARIO_FILE = "scenario.yaml"


class NoScenarios(ValueError):
    """A PATH holds no scenario directory (a usage error: exit 2)."""


def find_scenarios(paths: list[Path]) -> list[Path]:
    """Scenario directories under `paths`, each once, in the order given (folders sorted, hidden ones skipped).

    Raises `NoScenarios` naming the first PATH that does not exist or holds none.
    """
    found: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        if path.is_file() and path.name == SCENARIO_FILE:
            path = path.parent
        if not path.is_dir():
            raise NoScenarios(f"{path}: no such scenario directory")
        if (path / SCENARIO_FILE).is_file():
            dirs = [path]
        else:
            dirs = [f.parent for f in sorted(path.rglob(SCENARIO_FILE))
                    if not any(p.startswith(".") for p in f.relative_to(path).parts[:-1])]
        if not dirs:
            raise NoScenarios(f"{path}: no {SCENARIO_FILE} in it or below it")
        for d in dirs:
            key = d.resolve()
            if key not in seen:
                seen.add(key)
                found.append(d)
    return found


@dataclass
class LoadedScenario:
    """One scenario directory, loaded: the model and its fixtures, or the reason it cannot run.

    `id` is the scenario's id, or the directory's name as a slug when the
    scenario file itself is broken (the run still needs a name to report under).
    """

    path: Path
    id: str
    scenario: Scenario | None = None
    universe: Universe | None = None
    cassette: Cassette | None = None
    error: str | None = None

    @property
    def runs(self) -> int:
        return self.scenario.runs if self.scenario else 1


def _fixture(path: Path, rel: str | None) -> Path | None:
    return path / rel if rel else None


def recording_path(loaded: LoadedScenario) -> Path:
    """Where `--llm record` writes: the cassette the scenario names, else `llm.cassette.json` beside it."""
    named = _fixture(loaded.path, loaded.scenario.fixtures.cassette) if loaded.scenario else None
    return named or loaded.path / CASSETTE_FILE


def load_scenario_dir(path: Path, *, need_cassette: bool) -> LoadedScenario:
    """Load `path/scenario.yaml` and its universe (and cassette when replaying the LLM).

    Every failure is returned as `error`, phrased as the reason the scenario is ERROR.
    """
    loaded = LoadedScenario(path=path, id=safe_slug(path.resolve().name, "scenario"))
    try:
        data = yaml.safe_load((path / SCENARIO_FILE).read_text(encoding="utf-8"))
        loaded.scenario = load_scenario(data)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:  # ContractError is a ValueError
        loaded.error = f"bad fixture: {path / SCENARIO_FILE}: {exc}"
        return loaded
    scenario = loaded.scenario
    loaded.id = scenario.id
    universe_path = _fixture(path, scenario.fixtures.universe)
    if universe_path is not None:
        try:
            loaded.universe = load_universe(json.loads(universe_path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            loaded.error = f"bad fixture: {universe_path}: {exc}"
            return loaded
    if need_cassette:
        cassette_path = _fixture(path, scenario.fixtures.cassette)
        if cassette_path is None:
            loaded.error = (f"bad fixture: {path / SCENARIO_FILE} names no fixtures.cassette, so --llm replay has "
                            "nothing to answer the model with (record one, or run with --llm live)")
            return loaded
        try:
            loaded.cassette = read_cassette(cassette_path)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            loaded.error = f"bad fixture: {cassette_path}: {exc}"
    return loaded
