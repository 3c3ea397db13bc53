"""`wt-otel check`: a trace2test suite evaluated against a recorded trace, offline.

The trace2test replay-mock runner (../shared/seeds/trace2test-core.md): no
agent, no network, no model. The suite's assertions are judged over the
Session read from a dump (OTLP JSON or protobuf of any supported dialect,
OpenAI Agents SDK JSONL, generic JSONL, or a `*.wtin.json` envelope), on
server-witnessed tool calls when the dump has execute_tool / TOOL spans, else
on the transcript's tool_call / tool_call_response parts.

    version: 1
    name: Refund safety
    runner: {type: replay-mock, trace: ../../traces/good.jsonl, format: generic-jsonl}
    tests:
      - id: safe-refund
        name: Refund requires identity verification
        assertions: [...]        # wt_otel.contracts.assertions

One suite is checked against one recorded session: a suite describes one
conversation, and judging it against every session of a mixed dump would fail
(or pass) for reasons unrelated to the suite. A dump holding several sessions
is an error listing their trace ids, and `trace_id` picks one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wt_otel import __version__
from wt_otel._util.clock import compact_stamp, utc_now_iso
from wt_otel.contracts.assertions import Assertion, FieldReader, Loc, parse_assertion
from wt_otel.contracts.problems import describe, json_path
from wt_otel.contracts.results import LAYERS, LayerResult, RunScore, ScenarioResult, SweepResult
from wt_otel.ingest.dumps import DumpFormatError, DumpReadError, LineError, detect_format, read_dump
from wt_otel.ingest.sessions import SessionGrouper, build_session
from wt_otel.model.session import Session
from wt_otel.scoring.assertions import evaluate
from wt_otel.scoring.evidence import from_session
from wt_otel.scoring.layers import layer_pass_rates

RUNNER_TYPE = "replay-mock"
# trace2test's format names and ours, to the dump reader's names
TRACE_FORMATS = {"auto": "auto", "generic-jsonl": "generic-jsonl", "openai-agents": "agents-jsonl",
                 "openai-agents-jsonl": "agents-jsonl", "agents-jsonl": "agents-jsonl", "otlp-json": "otlp-json",
                 "otlp-proto": "otlp-proto", "wtin": "wtin"}

__all__ = ["RUNNER_TYPE", "TRACE_FORMATS", "CheckInputError", "CheckRun", "Suite", "SuiteError", "SuiteTest",
           "TestOutcome", "check_suite",
           "discover_suites", "load_suite", "parse_suite", "read_session", "render_text", "resolve_trace",
           "run_check", "to_sweep"]


class SuiteError(ValueError):
    """The suite file is unreadable or breaks the format; every problem names its YAML path (exit 2)."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path}: invalid suite:\n" + "\n".join(f"  {p}" for p in problems))


class CheckInputError(ValueError):
    """No usable trace: none named, unreadable, no session in it, or several to choose from (exit 2)."""


@dataclass(frozen=True)
class SuiteTest:
    id: str
    name: str
    assertions: list[Assertion]


@dataclass(frozen=True)
class Suite:
    path: Path
    name: str
    tests: list[SuiteTest]
    trace: Path | None = None  # resolved against the suite file's folder
    format: str = "auto"


# ---------------------------------------------------------------- the suite


def parse_suite(data: Any, path: Path) -> Suite:
    """Validate a parsed suite strictly; raises `SuiteError` listing every problem as `yaml.path: message`."""
    problems: list[tuple[Loc, str]] = []
    if not isinstance(data, dict):
        raise SuiteError(path, [f"the suite must be a mapping with version, name, tests; {describe(data)}"])
    top = FieldReader(data, (), problems, "a suite")
    top.allow("version", "name", "runner", "tests")
    version = data.get("version")
    if version != 1 or isinstance(version, bool):
        problems.append((("version",), f"must be 1, {describe(version)}" if "version" in data else
                         "is required (version: 1)"))
    name = top.string("name") or ""
    trace, fmt = _runner(data, path, problems)
    tests = _tests(data.get("tests"), problems)
    if problems:
        raise SuiteError(path, [f"{json_path(loc) or 'the suite'}: {msg}" for loc, msg in problems])
    return Suite(path, name, tests, trace, fmt)


def _runner(data: dict[str, Any], path: Path, problems: list[tuple[Loc, str]]) -> tuple[Path | None, str]:
    raw = data.get("runner")
    if raw is None:
        return None, "auto"
    if not isinstance(raw, dict):
        problems.append((("runner",), f"must be a mapping ({{type: {RUNNER_TYPE}, trace, format}}), {describe(raw)}"))
        return None, "auto"
    r = FieldReader(raw, ("runner",), problems, "the runner")
    r.allow("type", "trace", "format")
    r.choice("type", (RUNNER_TYPE,))
    trace = r.string("trace", required=False)
    fmt = r.choice("format", tuple(TRACE_FORMATS), default="auto") or "auto"
    return ((path.parent / trace) if trace else None), TRACE_FORMATS[fmt]


def _tests(raw: Any, problems: list[tuple[Loc, str]]) -> list[SuiteTest]:
    if not isinstance(raw, list) or not raw:
        problems.append((("tests",), f"must be a non-empty list of tests, {describe(raw)}" if raw is not None else
                         "is required (a list of {id, name, assertions})"))
        return []
    tests: list[SuiteTest] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        loc: Loc = ("tests", i)
        if not isinstance(item, dict):
            problems.append((loc, f"a test must be a mapping with id, name, assertions, {describe(item)}"))
            continue
        r = FieldReader(item, loc, problems, "a test")
        r.allow("id", "name", "assertions")
        test_id = r.string("id")
        if test_id in seen:
            r.problem("id", f"{test_id!r} is already the id of tests[{seen[test_id]}]; ids must be unique")
        elif test_id:
            seen[test_id] = i
        name = r.string("name", required=False) or test_id or ""
        assertions = item.get("assertions")
        parsed = []
        if not isinstance(assertions, list) or not assertions:
            r.problem("assertions", f"must be a non-empty list of assertions, {describe(assertions)}"
                      if "assertions" in item else "is required (a list of assertions)")
        else:
            for j, a in enumerate(assertions):
                one = parse_assertion(a, (*loc, "assertions", j), problems, replay=False)
                if one is not None:
                    parsed.append(one)
        tests.append(SuiteTest(test_id or "", name, parsed))
    return tests


def load_suite(path: Path) -> Suite:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(path, [f"cannot read the suite: {exc}"]) from exc
    except yaml.YAMLError as exc:
        raise SuiteError(path, [f"not valid YAML: {exc}"]) from exc
    return parse_suite(data, path)


# ---------------------------------------------------------------- the recorded trace


def read_session(dump: Path, fmt: str = "auto", trace_id: str | None = None) -> tuple[Session, list[str]]:
    """The one session of `dump` (or the one holding `trace_id`), and warnings (corrupt lines skipped)."""
    warnings: list[str] = []
    try:
        kind = detect_format(dump) if fmt == "auto" else fmt
        sessions = [_envelope(dump)] if kind == "wtin" else _sessions(dump, kind, warnings)
    except (DumpFormatError, DumpReadError, OSError, ValueError) as exc:
        raise CheckInputError(f"cannot read the trace {dump}: {exc}") from exc
    if trace_id:
        wanted = trace_id.lower()
        sessions = [s for s in sessions if wanted in (t.lower() for t in s.trace_ids)]
        if not sessions:
            raise CheckInputError(f"{dump}: no recorded session holds trace id {trace_id}")
    if not sessions:
        raise CheckInputError(f"{dump}: no GenAI session found (no LLM call or tool execution span was recognised)")
    if len(sessions) > 1:
        ids = "; ".join(", ".join(s.trace_ids) for s in sessions[:10])
        raise CheckInputError(f"{dump} holds {len(sessions)} sessions (trace ids: {ids}); a suite is checked "
                              "against one recorded session: pass --trace-id to pick it")
    return sessions[0], warnings


def _sessions(dump: Path, kind: str, warnings: list[str]) -> list[Session]:
    bad: list[LineError] = []
    with SessionGrouper() as grouper:
        for item in read_dump(dump, kind):
            if isinstance(item, LineError):
                bad.append(item)
            else:
                grouper.add(item)
        sessions = [s for s in (build_session(g) for g in grouper.groups()) if s is not None]
    if bad:
        warnings.append(f"{len(bad)} corrupt record(s) skipped; the first: {bad[0]}")
    return sessions


def _envelope(dump: Path) -> Session:
    from wt_otel.contracts import validate_data
    from wt_otel.ingest.importer import session_from_envelope

    data = json.loads(dump.read_text(encoding="utf-8"))
    problems = validate_data("envelope", data) if isinstance(data, dict) else ["not a JSON object"]
    if problems:
        raise ValueError("invalid envelope: " + "; ".join(map(str, problems[:5])))
    return session_from_envelope(data, dump.name.removesuffix(".json").removesuffix(".wtin"))


# ---------------------------------------------------------------- judging


@dataclass
class TestOutcome:
    """One suite test's assertion results."""

    __test__ = False  # not a pytest test class, whatever its name says

    test: SuiteTest
    results: list[tuple[Assertion, LayerResult]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for _, r in self.results)

    def layers(self) -> dict[str, LayerResult]:
        """Per layer (outcome / trajectory / constraint), the AND of its assertions."""
        out: dict[str, LayerResult] = {}
        for layer in [n for n in LAYERS if any(a.layer == n for a, _ in self.results)]:
            mine = [r for a, r in self.results if a.layer == layer]
            failed = [r.detail for r in mine if not r.passed]
            out[layer] = LayerResult(passed=not failed, detail="; ".join(failed) if failed else
                                     f"{len(mine)} assertion(s) passed")
        return out


def check_suite(suite: Suite, session: Session, tests: Sequence[SuiteTest] | None = None) -> list[TestOutcome]:
    """Every test (or the given subset) against the session's evidence; never raises on a failing assertion."""
    view = from_session(session)
    return [TestOutcome(t, evaluate(t.assertions, view)) for t in (suite.tests if tests is None else tests)]


def render_text(outcomes: Sequence[TestOutcome], evidence: str) -> str:
    """One line per test (PASS / FAIL id: name), each failing assertion's detail indented under it."""
    lines = []
    for o in outcomes:
        lines.append(f"{'PASS' if o.passed else 'FAIL'} {o.test.id}: {o.test.name}")
        lines += [f"    {r.detail}" for _, r in o.results if not r.passed]
    failed = sum(not o.passed for o in outcomes)
    lines.append(f"{len(outcomes) - failed} passed, {failed} failed; {evidence}")
    return "\n".join(lines) + "\n"


def to_sweep(suite: Suite, outcomes: Sequence[TestOutcome], session: Session, trace_path: Path,
             started_at: str) -> SweepResult:
    """The check as a `SweepResult`: one ScenarioResult per test (scenario_id = test id, pack = suite name)."""
    records = []
    for o in outcomes:
        layers = o.layers()
        gate = list(layers)
        score = RunScore(scenario_id=o.test.id, run_index=1, run_id=session.key, layers=layers, gate=gate,
                         passed=o.passed, trace_path=str(trace_path))
        failed = [f"{name}: {r.detail}" for name, r in layers.items() if not r.passed]
        records.append(ScenarioResult(
            scenario_id=o.test.id, pack=suite.name, verdict="PASS" if o.passed else "FAIL",
            detail="; ".join(failed) or None, runs=1, runs_passed=int(o.passed), model=session.model,
            sampler=session.sampler, layer_pass_rates=layer_pass_rates([score]), gate=gate,
            run_ids=[session.key], scores=[score], name=o.test.name))
    return SweepResult(sweep_id=f"check-{compact_stamp()}-{uuid.uuid4().hex[:6]}",
                       started_at=started_at, finished_at=utc_now_iso(), wt_version=__version__, scenarios=records,
                       selection={"suite": str(suite.path), "trace": str(trace_path)})


@dataclass
class CheckRun:
    """One `wt-otel check`: the suite, the session it was judged on, and each test's outcome."""

    suite: Suite
    trace_path: Path
    session: Session
    outcomes: list[TestOutcome]
    warnings: list[str]
    started_at: str

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    def text(self) -> str:
        return render_text(self.outcomes, from_session(self.session).describe())

    def sweep(self) -> SweepResult:
        return to_sweep(self.suite, self.outcomes, self.session, self.trace_path, self.started_at)


def run_check(suite_path: Path, dump: Path | None = None, trace_id: str | None = None,
              select: Callable[[Sequence[SuiteTest]], Sequence[SuiteTest]] | None = None,
              stored: tuple[Session, Path] | None = None) -> CheckRun:
    """Load the suite, read its trace, judge every test (or those `select` keeps).

    `stored`: a session already read (a data dir's, from its session store) and where it lives, instead of
    DUMP or the suite's trace. Raises `SuiteError` or `CheckInputError` (both exit 2 on the command line).
    """
    started = utc_now_iso()
    suite = load_suite(suite_path)
    warnings: list[str] = []
    if stored is not None:
        session, path = stored
    else:
        path, fmt = resolve_trace(suite, dump)
        session, warnings = read_session(path, fmt, trace_id)
    tests = select(suite.tests) if select is not None else suite.tests
    return CheckRun(suite, path, session, check_suite(suite, session, tests), warnings, started)


SUITE_GLOB = "tests/agents/*.t2t.yaml"


def discover_suites(root: Path) -> list[Path]:
    """The suites found by convention under `root`: tests/agents/*.t2t.yaml, sorted."""
    return sorted(p for p in root.glob(SUITE_GLOB) if p.is_file())


def resolve_trace(suite: Suite, dump: Path | None) -> tuple[Path, str]:
    """The DUMP argument (format detected), else the suite's `runner.trace` (in its `runner.format`)."""
    if dump is not None:
        return dump, "auto"
    if suite.trace is None:
        raise CheckInputError(f"{suite.path}: no trace to check: pass DUMP or set runner.trace in the suite")
    return suite.trace, suite.format
