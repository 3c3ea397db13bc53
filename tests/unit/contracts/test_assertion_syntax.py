"""The assertion syntax lives in contracts: parsing never needs (or loads) the scorer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from wt_otel.contracts.assertions import (
    AssertionSyntaxError,
    ObjectMatcher,
    Output,
    StringMatcher,
    ToolSequence,
    parse_assertions,
)


def test_parsed_assertions_are_plain_data_with_their_layer() -> None:
    seq, out = parse_assertions([
        {"type": "tool-sequence", "mode": "contiguous", "tools": ["a", "b"]},
        {"type": "output", "tool": "a", "index": -1, "match": {"type": "object", "shape": {"s": {"type": "string",
                                                                                                "regex": "^ok"}}}},
    ])
    assert seq == ToolSequence(("assertions", 0), "contiguous", ("a", "b")) and seq.layer == "trajectory"
    assert isinstance(out, Output) and out.layer == "outcome" and out.index == -1 and out.where == "assertions[1]"
    assert isinstance(out.match, ObjectMatcher) and isinstance(out.match.shape["s"], StringMatcher)
    assert not hasattr(seq, "evaluate")  # evaluation is wt_otel.scoring.assertions


def test_syntax_errors_name_the_yaml_path() -> None:
    with pytest.raises(AssertionSyntaxError) as caught:
        parse_assertions([{"type": "output", "tool": "a", "match": {"type": "strng"}}])
    assert "assertions[0].match.type: 'strng' is not one of" in str(caught.value) and "did you mean 'string'" in str(
        caught.value)


def test_loading_a_scenario_does_not_import_scoring() -> None:
    code = ("import sys; from wt_otel.contracts.scenario import load_scenario\n"
            "load_scenario({'wt_scenario': 1, 'id': 's', 'user_turns': ['hi'],"
            " 'assertions': [{'type': 'tool-sequence', 'mode': 'exact', 'tools': ['a']}]})\n"
            "print(sorted(m for m in sys.modules if m.startswith('wt_otel.')"
            " and not m.startswith(('wt_otel.contracts', 'wt_otel.model', 'wt_otel._util'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
