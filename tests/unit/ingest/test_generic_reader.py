"""Leave one producer out: every producer fixture read by the shape reader alone, no dialect at all.

The dialects know where each producer puts its content; the shape reader (`wt_otel.ingest.dialects.shape`)
knows none of that. Importing every fixture with all dialects switched off (`WT_OTEL_DIALECTS_OFF=all`) is
the strictest leave-one-out there is: each producer is read as if nobody had written a line for it. The
table of fields right (user turns, answers, tool names, arguments and results; `tests/support/session_fields`)
is printed and each producer is held to a floor: 0.9, or, for the known gaps below, what it reads today
(raise the floor when a gap closes; the test says so when a producer reads better than its floor).

Run `pytest -s tests/unit/ingest/test_generic_reader.py` to see the table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.paths import PRODUCERS
from tests.support.session_fields import Score, producer_dumps, score, wanted
from wt_otel.components import load
from wt_otel.ingest import dialects
from wt_otel.ingest.importer import import_dumps

FLOOR = 0.9

# Producers the shape reader alone does not yet read to FLOOR: (floor today, why). Each is a gap to close.
KNOWN_GAPS: dict[str, tuple[float, str]] = {}


def _rel(dump: Path) -> str:
    return f"{dump.parent.name}/{dump.name}"


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> dict[str, Score]:
    out: dict[str, Score] = {}
    dialects.switch_off("all")
    try:
        for dump in producer_dumps():
            dest = tmp_path_factory.mktemp(dump.parent.name)
            report = import_dumps([dump], load("exporters", "scenario-dir")(dest))
            envelopes = [json.loads((d / "incident.wtin.json").read_text()) for d in report.written]
            out[_rel(dump)] = score(envelopes, wanted(dump.parent))
    finally:
        dialects.switch_off("")
    return out


def test_leave_one_producer_out_table(table, capsys):
    rows = [f"{'producer dump':58} {'fields right':>13} {'sessions':>9}"]
    for name, s in sorted(table.items()):
        rows.append(f"{name:58} {s.right:>5}/{s.total:<4} {s.ratio:>4.0%} {s.sessions_got:>4}/{s.sessions_wanted}")
    right, total = sum(s.right for s in table.values()), sum(s.total for s in table.values())
    rows.append(f"{'all':58} {right:>5}/{total:<4} {right / total:>4.0%}")
    with capsys.disabled():
        print("\nshape reader alone (every dialect off):\n" + "\n".join(rows))
    assert len(table) >= 50, "every producer fixture is in the table"


@pytest.mark.parametrize("dump", [_rel(d) for d in producer_dumps()])
def test_the_shape_reader_alone_reads_each_producer(table, dump):
    floor, why = KNOWN_GAPS.get(dump, (FLOOR, ""))
    got = table[dump]
    assert got.ratio >= floor, f"{dump}: {got.right}/{got.total} fields right with no dialect ({why})"
    if dump in KNOWN_GAPS and got.ratio >= FLOOR:
        pytest.fail(f"{dump} now reads {got.ratio:.0%} with no dialect: remove it from KNOWN_GAPS")


def test_known_gaps_name_real_dumps():
    assert all((PRODUCERS / name).is_file() for name in KNOWN_GAPS)


def test_the_switch_turns_dialects_off_and_back_on():
    from wt_otel.ingest.dialects import shape

    dialects.switch_off("all")
    try:
        assert dialects._active == (shape,)
    finally:
        dialects.switch_off("")
    assert len(dialects._active) == len(dialects.DIALECTS) + 1
    with pytest.raises(ValueError, match="unknown dialect"):
        dialects.switch_off("no-such-dialect")
