"""`canonical_json` tries orjson without `OPT_NON_STR_KEYS` first (why: it is faster, and a history's
signatures take ~30 calls per imported session): the same text as with the option, whatever the keys."""

from __future__ import annotations

import json

import orjson

from wt_otel._util import safejson
from wt_otel.model.parts import canonical_json


class Key(str):
    pass


def _with_the_option(value):
    """`canonical_json` as it was: the option always on, then the stdlib, then safejson."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str).decode()
    except (TypeError, orjson.JSONEncodeError):
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
        except (ValueError, RecursionError):
            return safejson.dumps(value, indent=False).decode("utf-8")


def _outcome(canon, value):
    try:
        return canon(value)
    except TypeError as e:  # a key no encoder takes (a tuple): the same error either way
        return type(e)


def test_same_text_as_with_non_str_keys_allowed():
    values = [{"b": 1, "a": [1.5, None, True]}, {1: "x", "2": "y"}, {"a": {3: {"z": 0}}}, {Key("k"): 1, "j": 2},
              {"big": 2**70}, [{"q": "x"}, {(1, 2): "tuple key"}], "text", 7, None, {"nested": [{"x": {True: 1}}]},
              {"deep": [[[[{"n": float("nan")}]]]]}]
    for value in values:
        assert _outcome(canonical_json, value) == _outcome(_with_the_option, value), value
