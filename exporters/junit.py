"""`--format junit`: a sweep as JUnit XML, so CI gates a pull request on it like on `go test`.

Shape (the common JUnit XML format every CI reads; see github.com/testmoapp/junitxml):

    <testsuites name="wt-otel" tests failures errors skipped time timestamp>
      <testsuite name=PACK tests failures errors skipped time timestamp>     one per pack
        <properties> sweep_id, label, git_sha, wt_version, pack owner </properties>
        <testcase classname=PACK name=SCENARIO_ID time>                     one per scenario
          <properties> verdict, owner, origin, runs, runs_passed, run_id... </properties>
          <failure message type="FAIL">triage, layer details</failure>   FAIL
          <error message type="ERROR|INVALID">triage, detail</error>      ERROR, INVALID
          <system-out>warnings the runs recorded (surface invalid, divergence, state not wiped...)</system-out>

Each failure and error starts with its triage category (`triage: recording_gap: ...`, see
`wt_otel.scoring.triage`), also a testcase property, so CI output says who must act.

PASS_WITH_VARIANCE is a pass (its variance is a property, not a failure).
Scenarios without a pack go to the suite "default".

Everything is text from traces (agent replies, tool arguments) and so
hostile: ElementTree escapes markup, but characters XML 1.0 forbids (most C0
controls, lone surrogates, U+FFFE/U+FFFF) would make the file unparseable
for every consumer, so they are replaced by a visible `\\xNN` / `\\uNNNN`.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections import OrderedDict
from pathlib import Path

from wt_otel._util.fsutil import atomic_write
from wt_otel.components import ResultsFormatSpec
from wt_otel.contracts.results import ScenarioResult, SweepResult
from wt_otel.scoring.triage import WHO_ACTS

DEFAULT_SUITE = "default"
MAX_MESSAGE = 1000  # a message attribute is a one-line summary; the element's text has the rest
_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: object) -> str:
    """`text` with every character XML 1.0 cannot carry replaced by a visible escape (markup is left to
    the serializer, which escapes it)."""
    return _ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        str(text))


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_MESSAGE else line[: MAX_MESSAGE - 1] + "…"


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: object) -> ET.Element:
    el = ET.SubElement(parent, tag, {k: xml_safe(v) for k, v in attrs.items() if v is not None})
    if text:
        el.text = xml_safe(text)
    return el


def _properties(parent: ET.Element, props: dict[str, object]) -> None:
    present = {k: v for k, v in props.items() if v not in (None, "", [])}
    if present:
        el = _sub(parent, "properties")
        for name, value in present.items():
            _sub(el, "property", name=name, value=value)


def layer_details(result: ScenarioResult) -> str:
    """Why a scenario did not pass, run by run and layer by layer (what a reviewer reads first)."""
    triage = getattr(result, "triage", None)
    lines = [f"triage: {triage}: {WHO_ACTS.get(triage, '')}".rstrip(": ")] if triage else []
    lines += [result.detail] if result.detail else []
    rates = ", ".join(f"{k} {v:.0%}" for k, v in result.layer_pass_rates.items())
    lines.append(f"runs passed {result.runs_passed}/{result.runs}" + (f"; layer pass rates: {rates}" if rates else ""))
    for score in result.scores:
        for name, layer in score.layers.items():
            if not layer.passed:
                lines.append(f"run {score.run_index} {name}: {layer.detail or 'failed'}")
    for entry in getattr(result, "robustness", None) or []:
        status = entry.get("status") or ("PASS" if entry.get("passed") else "FAIL")  # ERROR: it tested nothing
        lines.append(f"robustness {entry.get('perturbation')}: {status}: {entry.get('detail', '')}")
    return "\n".join(lines)


def _testcase(suite: ET.Element, result: ScenarioResult, classname: str) -> tuple[int, int]:
    case = _sub(suite, "testcase", classname=classname, name=result.scenario_id, time=f"{result.duration_s:.3f}")
    _properties(case, {"verdict": result.verdict, "reviewed": None if result.reviewed else "false",
                       "reproduced": None if result.reproduced is None else str(result.reproduced).lower(),
                       "owner": result.owner, "origin": result.origin,
                       "label": result.label, "model": result.model, "quant": getattr(result, "quant", None),
                       "triage": getattr(result, "triage", None), "runs": result.runs,
                       "runs_passed": result.runs_passed, "tags": ", ".join(result.tags),
                       **{f"run_id.{n}": rid for n, rid in enumerate(result.run_ids, 1)}})
    body = layer_details(result)
    message = _one_line(result.detail or result.verdict)
    failures = errors = 0
    if result.verdict == "FAIL":
        _sub(case, "failure", body, message=message, type="FAIL")
        failures = 1
    elif result.verdict in ("ERROR", "INVALID"):
        _sub(case, "error", body, message=message, type=result.verdict)
        errors = 1
    elif result.verdict == "UNREVIEWED":  # not a pass: CI shows it as skipped, with whether it reproduced
        _sub(case, "skipped", body, message=message)
    out = [body] if result.verdict == "PASS_WITH_VARIANCE" else []
    warnings = getattr(result, "warnings", None) or []
    out += ["warnings:", *(f"- {w}" for w in warnings)] if warnings else []
    if out:
        _sub(case, "system-out", "\n".join(out))
    return failures, errors


def to_element(sweep: SweepResult) -> ET.Element:
    """The `<testsuites>` element of a sweep."""
    by_pack: OrderedDict[str, list[ScenarioResult]] = OrderedDict()
    for result in sweep.scenarios:
        by_pack.setdefault(result.pack or DEFAULT_SUITE, []).append(result)
    root = ET.Element("testsuites", {"name": "wt-otel"})
    totals = [0, 0, 0, 0.0]
    totals_skipped = [0]
    host = socket.gethostname() or "localhost"
    for n, (pack, results) in enumerate(by_pack.items()):
        suite = _sub(root, "testsuite", name=pack, id=n, timestamp=sweep.started_at, hostname=host)
        owners = sorted({r.owner for r in results if r.owner})
        _properties(suite, {"sweep_id": sweep.sweep_id, "label": sweep.label, "git_sha": sweep.git_sha,
                            "wt_version": sweep.wt_version, "owner": ", ".join(owners), "stopped": sweep.stopped})
        failures = errors = 0
        for result in results:
            f, e = _testcase(suite, result, pack)
            failures, errors = failures + f, errors + e
        time = sum(r.duration_s for r in results)
        skipped = sum(r.verdict == "UNREVIEWED" for r in results)
        totals_skipped[0] += skipped
        for key, value in (("tests", len(results)), ("failures", failures), ("errors", errors), ("skipped", skipped),
                           ("time", f"{time:.3f}")):
            suite.set(key, str(value))
        totals = [totals[0] + len(results), totals[1] + failures, totals[2] + errors, totals[3] + time]
    for key, total in (("tests", totals[0]), ("failures", totals[1]), ("errors", totals[2]),
                       ("skipped", totals_skipped[0]),
                       ("time", f"{totals[3]:.3f}"), ("timestamp", xml_safe(sweep.started_at))):
        root.set(key, str(total))
    return root


def to_xml(sweep: SweepResult) -> bytes:
    root = to_element(sweep)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(sweep: SweepResult, out: Path) -> None:
    """Write the JUnit XML of `sweep` to `out` atomically (a CI step never reads half a file)."""
    atomic_write(out, to_xml(sweep))


# the `junit` results format (entry-point group wt_otel.results_formats): `wt-otel run/check --format junit`
FORMAT = ResultsFormatSpec(name="junit", suffix=".xml", write=write_junit)
