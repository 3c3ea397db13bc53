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


def test_the_prefilter_finds_every_non_finite_encoding():
    """marshal's bytes say where a float can be odd: NaN payloads, signs, a float met twice (written once,
    then as a reference), at any depth; the largest finite floats and look-alike text are no NaN."""
    import struct

    payloads = [float("nan"), float("inf"), float("-inf"), -float("nan"),
                struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0],
                struct.unpack("<d", b"\xff\xff\xff\xff\xff\xff\xff\xff")[0]]
    for odd in payloads:
        shared = [odd]
        assert safejson._has_float_oddity({"a": shared, "b": shared, "c": [1.5, {"d": odd}]})
        assert safejson._has_float_oddity(odd)
        assert safejson._has_float_oddity([[[[[[odd]]]]]])
        deep: object = odd
        for _ in range(3000):  # deeper than marshal goes: the walk decides alone
            deep = [deep]
        assert safejson._has_float_oddity(deep)
    finite = {"max": 1.7976931348623157e308, "min": -1.7976931348623157e308, "tiny": 5e-324,
              "text": "g\x00\x00\x00\x00\x00\x00\xf0\x7f \xff\U0001f600", "big": 2**80, "neg": -1}
    assert not safejson._has_float_oddity(finite)


def test_plain_finite_data_is_cleared_without_the_walk(monkeypatch):
    """The common case (trace data: text, ints, finite floats) never pays for the Python walk."""
    def walk(data):
        raise AssertionError("walked")

    monkeypatch.setattr(safejson, "_walk_for_odd_floats", walk)
    doc = {"messages": [{"role": "user", "parts": [{"type": "text", "content": "Lorem ipsum " * 200}]}],
           "usage": {"input_tokens": 100, "cost": 0.25}, "x": None, "ids": list(range(300)),
           "bytes_like_a_pickled_nan": "G\x7f\U00010000"}
    assert not safejson._has_float_oddity(doc)
    assert safejson.dumps(doc) == orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


@settings(max_examples=200, deadline=None)
@given(st.lists(values, min_size=1, max_size=4))
def test_dumps_all_writes_what_dumps_writes_item_by_item(items):
    """One walk for a scenario's files: the same bytes and notes, in order, as one `dumps` per file."""
    pairs = [(data, f"file{i}.json") for i, data in enumerate(items)]
    one_by_one: list[str] = []
    expected = [safejson.dumps(data, where=where, notes=one_by_one) for data, where in pairs]
    together: list[str] = []
    assert safejson.dumps_all(pairs, together) == expected
    assert together == one_by_one


def test_dumps_all_walks_once_for_all_files(monkeypatch):
    files = [({"a": None, "b": 1.5}, "x.json"), ({"c": None}, "y.json"), ({"d": 2}, "z.json")]
    expected = [safejson.dumps(d) for d, _ in files]
    calls = []
    real = safejson._has_float_oddity
    monkeypatch.setattr(safejson, "_has_float_oddity", lambda data: calls.append(data) or real(data))
    assert safejson.dumps_all(files) == expected
    assert calls == [[files[0][0], files[1][0]]]  # one look, at the files whose output has a null


def test_dumps_all_names_the_file_of_each_odd_value():
    notes: list[str] = []
    out = safejson.dumps_all([({"ok": None}, "a.json"), ({"t": math.nan}, "b.json"), ({"big": 2**70}, "c.json")],
                             notes)
    assert [json.loads(o) for o in out] == [{"ok": None}, {"t": "nan"}, {"big": str(2**70)}]
    assert notes == ["b.json: t: non-finite number kept as text", "c.json: big: integer beyond 64 bits kept as text"]
