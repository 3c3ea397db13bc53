"""safejson.dumps skips its NaN walk when orjson wrote no null, and the walk finds NaN anywhere."""

from __future__ import annotations

import json
import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from wt_otel._util import safejson

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    | st.tuples(inner, inner),
    max_leaves=20,
)


def _old_walk(data):
    """The walk before exact-type dispatch: isinstance on every value."""
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, float):
            if not math.isfinite(x):
                return True
        elif isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(x)
    return False


class Ratio(float):
    pass


@settings(max_examples=300, deadline=None)
@given(values)
def test_the_walk_agrees_with_isinstance_everywhere(data):
    assert safejson._has_float_oddity(data) == _old_walk(data)
    notes: list[str] = []
    out = safejson.dumps(data, notes=notes)
    if _old_walk(data):
        assert notes and "non-finite number kept as text" in notes[0]
        assert b'"nan"' in out or b'inf"' in out
    else:
        assert not notes and out == orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def test_subclasses_and_nulls():
    assert safejson._has_float_oddity({"a": [Ratio("nan")]}) and safejson._has_float_oddity(Ratio("inf"))
    notes: list[str] = []
    data = {"text": "null and nullable", "x": None, "deep": [[{"r": float("-inf")}]]}
    assert json.loads(safejson.dumps(data, notes=notes))["deep"] == [[{"r": "-inf"}]]
    assert notes == ["deep[0][0].r: non-finite number kept as text"]
