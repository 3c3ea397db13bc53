"""A pytest plugin: `pytest --wt-scenarios DIR` runs each scenario as a test item.

DIR may be serve's data dir: its incidents (flagged sessions, listed by the data dir's session store) are
the items, each once.

Teams gate merges with the test runner they already have (its `-k`, `-x`,
`--junitxml`, xdist-free reporting), so each scenario under DIR becomes one
item that replays it through the configured runtime, exactly as `wt-otel run`
does, and fails with the scenario's detail unless the verdict is PASS (or
PASS_WITH_VARIANCE, which the scenario's author opted into). The whole pytest
session is one sweep: traces under `--wt-runs-dir`, one ledger row per
scenario at the end.

Registered as a `pytest11` entry point, so it loads in every pytest run of an
environment where wt-otel is installed: without `--wt-scenarios` it adds its
options and nothing else, and it imports the runner (servers, MCP) only when
scenarios are asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

PASSING = ("PASS", "PASS_WITH_VARIANCE")
_STATE = pytest.StashKey["_WtSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wt-otel", "wt-otel scenario replay")
    group.addoption("--wt-scenarios", action="append", default=[], metavar="DIR",
                    help="Collect every scenario directory under DIR as a test item (repeatable); a data dir: "
                         "its incidents.")
    group.addoption("--wt-runtime", default="http_inject", metavar="SPEC",
                    help="http_inject (a Contract C endpoint), python:MODULE:ATTR or MODULE:ATTR [http_inject].")
    group.addoption("--wt-inject-url", default=None, metavar="URL",
                    help="http_inject base URL [$WT_INJECT_URL, else http://127.0.0.1:8647].")
    group.addoption("--wt-llm", default="auto", choices=("auto", "replay", "live", "record"),
                    help="As `wt-otel run --llm`: auto replays a scenario's LLM cassette when it has one [auto].")
    group.addoption("--wt-runs-dir", default="runs", metavar="DIR",
                    help="Where traces and the ledger go [runs].")
    group.addoption("--wt-universe-port", default=None, type=int, metavar="PORT",
                    help="Universe MCP server port [0: a free one, named in every /wt/reset and $WT_UNIVERSE_URL].")
    group.addoption("--wt-llm-port", default=None, type=int, metavar="PORT",
                    help="Cassette server port [0: a free one, named in every /wt/reset and $WT_LLM_BASE_URL].")
    group.addoption("--wt-label", default=None, metavar="L", help="A label recorded in traces and the ledger.")


class ScenarioFailed(Exception):
    """A non-passing verdict; its text is what pytest shows for the item."""


class _WtSession:
    """The one sweep a pytest session is: built at collection, finished at session end."""

    def __init__(self, config: pytest.Config) -> None:
        from wt_otel.contracts.inject import RuntimeSpecError
        from wt_otel.replay.runner import RunOptions, Sweep
        from wt_otel.replay.runtimes import resolve_runtime

        opt = config.option
        try:
            self.runtime = resolve_runtime(opt.wt_runtime, url=opt.wt_inject_url)
        except RuntimeSpecError as exc:
            raise pytest.UsageError(f"--wt-runtime: {exc}") from exc
        self.options = RunOptions(runtime=self.runtime, runs_dir=Path(opt.wt_runs_dir), llm=opt.wt_llm,
                                  universe_port=opt.wt_universe_port, llm_port=opt.wt_llm_port, label=opt.wt_label,
                                  emit=lambda line: None)
        self.sweep = Sweep(self.options)
        self.results: list[Any] = []

    def run(self, scenario_dir: Path, position: str) -> Any:
        from wt_otel.replay.runner import load_one

        loaded = load_one(scenario_dir, self.options.llm)
        result = self.sweep.run_scenario(loaded, position)
        self.results.append(result)
        return result.record

    def finish(self) -> Any:
        try:
            return self.sweep.finish(self.results) if self.results else None
        finally:
            self.runtime.close()


class ScenarioItem(pytest.Item):
    """One scenario directory, replayed when the item runs."""

    def __init__(self, *, scenario_dir: Path, position: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario_dir = scenario_dir
        self.position = position
        self.record: Any = None

    def runtest(self) -> None:
        state = self.config.stash[_STATE]
        self.record = state.run(self.scenario_dir, self.position)
        for key, value in (("verdict", self.record.verdict), ("origin", self.record.origin),
                           ("owner", self.record.owner)):
            if value:
                self.user_properties.append((key, value))
        if self.record.verdict not in PASSING:
            raise ScenarioFailed(self.record)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed):
            record = excinfo.value.args[0]
            lines = [f"{record.verdict} {record.scenario_id} (runs passed {record.runs_passed}/{record.runs})"]
            lines += [f"  {line}" for line in _details(record)]
            return "\n".join(lines)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.scenario_dir / "scenario.yaml", 0, f"wt-otel scenario {self.name}"


def _details(record: Any) -> list[str]:
    out = [record.detail] if record.detail else []
    out += [f"run {s.run_index} {name}: {layer.detail or 'failed'}" for s in record.scores
            for name, layer in s.layers.items() if not layer.passed]
    return out


class ScenarioCollector(pytest.Collector):
    """The `--wt-scenarios DIR` tree; yields one `ScenarioItem` per scenario directory."""

    def __init__(self, *, dirs: list[Path], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dirs = dirs

    def collect(self) -> list[pytest.Item]:
        from wt_otel.replay.scenarios import NoScenarios, find_scenarios, load_scenario_dir

        try:
            found = find_scenarios([p for d in self.dirs for p in _incidents_or(d)])
        except NoScenarios as exc:
            raise pytest.UsageError(f"--wt-scenarios: {exc}") from exc
        items: list[pytest.Item] = []
        taken: set[str] = set()
        for n, d in enumerate(found, 1):
            name = load_scenario_dir(d, need_cassette=False).id
            unique, k = name, 2
            while unique in taken:
                unique, k = f"{name}-{k}", k + 1
            taken.add(unique)
            items.append(ScenarioItem.from_parent(self, name=unique, scenario_dir=d, position=f"[{n}/{len(found)}]"))
        return items


def _incidents_or(path: Path) -> list[Path]:
    """A data dir (what `wt-otel serve` writes) stands for its incidents: the flagged sessions its session
    store lists (exporters/store.py), each once, not again as its auto-replay copy under scenarios/, and not
    the unflagged sessions beside them. Any other path stands for itself."""
    from wt_otel.components import load

    if not (path / "sessions.ndjsonl").is_file():
        return [path]
    store = load("exporters", "sessions")(path)
    incidents = [s for s in store.list() if s.flagged]
    if not incidents:
        raise pytest.UsageError(f"--wt-scenarios: {path} is a data dir without an incident (flag one with "
                                f"`wt-otel flag SESSION --data-dir {path}`)")
    kept = [s.slug for s in incidents if not s.rendered]
    if kept:  # serve renders incidents as they come: only a damaged or foreign index gets here
        raise pytest.UsageError(f"--wt-scenarios: incidents in {path} not rendered yet: {', '.join(kept)} "
                                f"(`wt-otel sessions render --all --data-dir {path}`)")
    return [store.directory(s) for s in incidents]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the scenario items before `-k`/`-m` deselection runs (tryfirst), so those filter them too."""
    dirs = [Path(d) for d in config.getoption("wt_scenarios") or []]
    if not dirs:
        return
    collector = ScenarioCollector.from_parent(session, name="wt-scenarios", dirs=dirs)
    items.extend(collector.collect())
    config.stash[_STATE] = _WtSession(config)  # a bad --wt-runtime is a usage error before anything runs


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        sweep = state.finish()
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if sweep is not None and reporter is not None:
            where = f", ledger {sweep.ledger_path}" if sweep.ledger_path else ""
            reporter.write_line(f"wt-otel: sweep {sweep.sweep_id}: traces in {sweep.directory}/{where}")
