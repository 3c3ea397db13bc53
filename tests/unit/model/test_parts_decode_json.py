"""`decode_json` calls the stdlib's JSON scanner directly for `str`: the same values and failures as
`json.loads` (why: ~23 calls per imported session, and json.loads' dispatch was half the cost)."""

from __future__ import annotations

import json
import random
from typing import Any

from wt_otel.model.parts import decode_json

EDGES = ["", " ", "1", " 1 ", "1 2", "[1,]", "{}", '{"a": [1, 2.5, -0, 1e400, NaN, Infinity, -Infinity]} \n',
         "\ufeff{}", '"x"', "nul", "null", "[" * 100_000 + "]" * 100_000, '{"a":1}x', "\t[\r\n]\t", '"\\ud800"',
         "12345678901234567890123", "-", "0x10", "[1]\x00", "\u2028[]", "[1] \n\t\r"]


def _reference(value: Any) -> tuple[str, bool]:
    try:
        return repr(json.loads(value)), True
    except (ValueError, RecursionError):
        return repr(value), False


def _ours(value: Any) -> tuple[str, bool]:
    decoded, ok = decode_json(value)
    return repr(decoded), ok


def test_same_as_json_loads_on_edges_and_noise() -> None:
    rng = random.Random(11)
    noise = ["".join(rng.choice('[]{}":,0123456789.eE-+ \tnultrefasNIy\\') for _ in range(rng.randrange(12)))
             for _ in range(20_000)]
    for value in EDGES + noise:
        assert _ours(value) == _reference(value), value[:40]


def test_bytes_subclasses_and_non_strings_keep_their_paths() -> None:
    class Text(str):
        pass

    assert decode_json(b'{"a": 1}') == ({"a": 1}, True)
    assert decode_json(Text("[1]")) == ([1], True)
    assert decode_json({"already": "data"}) == ({"already": "data"}, True)
