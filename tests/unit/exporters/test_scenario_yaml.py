"""scenario.yaml's dumper (plain data made into nodes directly, the constant tail emitted once) writes
exactly what PyYAML's safe dumper writes."""

from __future__ import annotations

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from wt_otel.exporters import scenario

TRICKY = ["", "yes", "no", "null", "~", "123", "0x1F", "1e3", "- a", "a: b", "#x", " lead", "trail ", "multi\nline",
          "tab\tx", "é unicode ☃", "'q'", '"dq"', "@at", "%p", "!bang", "&amp", "*star", "[x]", "{x}", "x,y", "?", ":",
          "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 30, "line1\n\nline3 " * 20, "\x00ctl",
          "2026-12-01", "1_000", ".inf", "+1", "=", "<<"]
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(TRICKY) | st.text(max_size=30)
data = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6) | st.sampled_from(TRICKY), inner, max_size=4), max_leaves=25)


def _both(value):
    """(PyYAML's safe dumper, ours): ours is `_Dumper` through `yaml.dump` and the nodes `scenario._dump`
    builds itself, which must agree with each other first."""
    out = []
    for dumper in (getattr(yaml, "CSafeDumper", yaml.SafeDumper), scenario._Dumper):
        try:
            out.append(yaml.dump(value, Dumper=dumper, sort_keys=False, allow_unicode=True, width=100))
        except Exception as e:  # noqa: BLE001 - both must refuse alike (lone surrogates...)
            out.append(type(e).__name__)
    try:
        direct = scenario._dump(value)
    except Exception as e:  # noqa: BLE001 - and refuse alike
        direct = type(e).__name__
    assert direct == out[1]
    return out


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), data, max_size=6))
def test_same_bytes_as_the_safe_dumper(value):
    ours, theirs = _both(value)
    assert ours == theirs


def test_tricky_scalars_and_shared_lists():
    shared = ["a", "b"]
    for value in ({"k": t, "l": [t, 1, True, None, 2**70, 1.5]} for t in TRICKY):
        assert _both(value)[0] == _both(value)[1]
    assert _both({"x": shared, "y": shared})[0] == _both({"x": shared, "y": shared})[1]  # anchors and aliases
    assert _both({"s": "\udcff"})[0] == _both({"s": "\udcff"})[1]


def test_the_cached_tail_is_what_the_dumper_writes():
    tail = {"assertions": [], "fixtures": dict(scenario.FIXTURES), "scorer": "scorer.py", "runs": 1}
    assert scenario._tail_yaml() == yaml.dump(tail, Dumper=yaml.SafeDumper, sort_keys=False, allow_unicode=True,
                                              width=100).rstrip()


def test_the_resolver_fast_path_gives_the_safe_resolvers_tags():
    """`_Dumper.resolve` skips the resolver's lists and regexes for scalars no implicit resolver claims by
    their first character, and for collections: the tags are the safe resolver's, for every flag pair, and
    a resolver registered later (here on a subclass) is honoured, not bypassed."""
    import io
    import random
    import re
    import string

    rng = random.Random(5)
    values = TRICKY + ["true", "True", "OFF", "12:30:00", "-", "é"] + [
        "".join(rng.choice(string.printable + "é☃") for _ in range(rng.randrange(0, 10))) for _ in range(3000)]
    safe = getattr(yaml, "CSafeDumper", yaml.SafeDumper)(io.StringIO())
    ours = scenario._Dumper(io.StringIO())
    for value in values:
        for implicit in ((True, False), (False, True), (True, True), (False, False)):
            assert ours.resolve(yaml.ScalarNode, value, implicit) == safe.resolve(yaml.ScalarNode, value, implicit)
    for kind in (yaml.MappingNode, yaml.SequenceNode):
        assert ours.resolve(kind, None, (True, False)) == safe.resolve(kind, None, (True, False))

    class Shouting(scenario._Dumper):
        pass

    Shouting.add_implicit_resolver("!shout", re.compile(r"^HEY$"), list("H"))
    assert Shouting(io.StringIO()).resolve(yaml.ScalarNode, "HEY", (True, False)) == "!shout"
    assert ours.resolve(yaml.ScalarNode, "HEY", (True, False)) == "tag:yaml.org,2002:str"


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.none() | st.booleans() | st.text(max_size=20)
                       | st.integers() | st.floats() | st.lists(st.text(max_size=3), max_size=2), max_size=4))
def test_imported_md_source_block_is_the_stdlib_json(source):
    """IMPORTED.md's source block: orjson for a flat object of strings, booleans and nulls (control characters,
    quotes, lone surrogates included), the stdlib otherwise: the same text either way."""
    import json

    assert scenario._indented_json(source) == json.dumps(source, indent=2, ensure_ascii=False)
