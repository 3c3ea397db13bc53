"""Real producer dumps, mutated as a producer nobody here has seen would emit them (issue 29).

Each case takes one OTLP/JSON fixture dump under tests/fixtures/producers and applies a list of mutations
chosen by hypothesis: attribute keys renamed (prefix swaps, segment renames, camelCase), values re-typed
(string <-> int/bool/array/kvlist, structures JSON-encoded into strings and JSON strings decoded into
kvlists), attributes / events / spans / log records / resources dropped, log records pointed at other spans
or at nothing, spans duplicated, strings truncated, lone surrogates escaped in the JSON, values nested deep.

The property is the importer's promise to a new user: `import_dumps` never raises; every dump ends in
written sessions or a message that says why not; every written envelope validates; nothing is written
outside the output folder. `pytest` runs the fast profile; `pytest -m fuzz` (`make test-fuzz`) the long one.
"""

from __future__ import annotations

import copy
import json
import random
import re
import tempfile
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.fuzzing import count
from tests.support.paths import PRODUCERS
from wt_otel.components import load
from wt_otel.contracts import validate_file
from wt_otel.ingest.importer import import_dumps

pytestmark = pytest.mark.fuzz

Doc = dict[str, Any]
DUMPS = sorted(str(p.relative_to(PRODUCERS)) for p in PRODUCERS.glob("*/dump*.otlp.jsonl"))


@cache
def _requests(dump: str) -> tuple[str, ...]:
    """The dump's lines (one OTLP/JSON request each), read once per run."""
    return tuple(line for line in (PRODUCERS / dump).read_text(encoding="utf-8").splitlines() if line.strip())


# -- walking an OTLP/JSON request: the places an unfamiliar producer could differ


def _resources(doc: Doc) -> Iterator[Doc]:
    for key in ("resourceSpans", "resourceLogs"):
        for r in doc.get(key) or []:
            if isinstance(r, dict):
                yield r


def _spans(doc: Doc) -> Iterator[tuple[list[Any], Doc]]:
    for r in doc.get("resourceSpans") or []:
        for ss in (r.get("scopeSpans") or []) if isinstance(r, dict) else []:
            spans = ss.get("spans") if isinstance(ss, dict) else None
            for s in list(spans or []):
                if isinstance(s, dict):
                    yield spans, s


def _logs(doc: Doc) -> Iterator[tuple[list[Any], Doc]]:
    for r in doc.get("resourceLogs") or []:
        for sl in (r.get("scopeLogs") or []) if isinstance(r, dict) else []:
            logs = sl.get("logRecords") if isinstance(sl, dict) else None
            for rec in list(logs or []):
                if isinstance(rec, dict):
                    yield logs, rec


def _attr_lists(node: Any) -> Iterator[list[Any]]:
    """Every list of {key, value} pairs: resource, span, event, link and log attributes, and kvlists."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            for k, v in cur.items():
                if k in ("attributes", "values") and isinstance(v, list) and all(
                        isinstance(kv, dict) and "key" in kv for kv in v):
                    yield v
                stack.append(v)
        elif isinstance(cur, list):
            stack.extend(cur)


def _any_values(node: Any) -> Iterator[Doc]:
    """Every OTLP AnyValue (attribute values, array and kvlist members, log bodies)."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, dict):
            if len(cur) == 1 and next(iter(cur)) in ANY_KINDS:
                yield cur
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)


ANY_KINDS = ("stringValue", "intValue", "boolValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue")


# -- AnyValue <-> plain JSON, so a structure can be JSON-encoded into a string and back


def _plain(v: Any) -> Any:
    if not isinstance(v, dict) or len(v) != 1:
        return v
    [(kind, x)] = v.items()
    if kind == "arrayValue":
        return [_plain(i) for i in (x or {}).get("values") or []] if isinstance(x, dict) else x
    if kind == "kvlistValue":
        return ({kv.get("key"): _plain(kv.get("value")) for kv in x.get("values") or [] if isinstance(kv, dict)}
                if isinstance(x, dict) else x)
    return x


def _otlp(x: Any) -> Doc:
    if isinstance(x, bool):
        return {"boolValue": x}
    if isinstance(x, int):
        return {"intValue": str(x)}
    if isinstance(x, float):
        return {"doubleValue": x}
    if isinstance(x, list):
        return {"arrayValue": {"values": [_otlp(i) for i in x]}}
    if isinstance(x, dict):
        return {"kvlistValue": {"values": [{"key": str(k), "value": _otlp(v)} for k, v in x.items()]}}
    return {"stringValue": "" if x is None else str(x)}


# -- mutations: each takes the requests of one dump and a seeded Random, and changes them in place

PREFIXES = ["acme.genai.", "ai.", "llm.", "", "x-", "GenAI.", "gen_ai.", "otel.gen_ai.", "a.b.c.d.e."]
SEGMENTS = ["content", "payload", "msg", "inputs", "Output", "role_name", "data", "0", ""]


def _keys(docs: list[Doc]) -> list[str]:
    return sorted({kv["key"] for d in docs for attrs in _attr_lists(d) for kv in attrs if isinstance(kv["key"], str)})


def _rename_keys(docs: list[Doc], rename: Callable[[str], str]) -> None:
    for d in docs:
        for attrs in _attr_lists(d):
            for kv in attrs:
                if isinstance(kv["key"], str):
                    kv["key"] = rename(kv["key"])


def rename_prefix(docs: list[Doc], rng: random.Random) -> None:
    """Swap one key prefix everywhere, as a producer with its own namespace would (`gen_ai.` -> `acme.genai.`)."""
    firsts = sorted({k.split(".")[0] + "." for k in _keys(docs) if "." in k})
    if firsts:
        old, new = rng.choice(firsts), rng.choice(PREFIXES)
        _rename_keys(docs, lambda k: new + k[len(old):] if k.startswith(old) else k)


def rename_segment(docs: list[Doc], rng: random.Random) -> None:
    """Rename one dotted segment wherever it occurs (`input.messages` -> `input.payload`)."""
    segments = sorted({s for k in _keys(docs) for s in k.split(".")})
    if segments:
        old, new = rng.choice(segments), rng.choice(SEGMENTS)
        _rename_keys(docs, lambda k: ".".join(new if s == old else s for s in k.split(".")))


def camel_case(docs: list[Doc], rng: random.Random) -> None:
    """camelCase every key (`gen_ai.usage.input_tokens` -> `genAi.usage.inputTokens`), or only some."""
    share = rng.choice([1.0, 0.5])
    _rename_keys(docs, lambda k: re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), k) if rng.random() < share
                 else k)


def _some(items: list[Any], rng: random.Random) -> list[Any]:
    if not items:
        return []
    return rng.sample(items, k=max(1, int(len(items) * rng.choice([0.05, 0.3, 1.0]))))


def retype_values(docs: list[Doc], rng: random.Random) -> None:
    """Give values another OTLP type: strings as ints/bools/arrays/kvlists and back, structures JSON-encoded into
    strings, JSON strings decoded into kvlists, ints as text that is not a number."""
    values = [v for d in docs for v in _any_values(d)]
    for v in _some(values, rng):
        [(kind, x)] = v.items()
        plain = _plain(v)
        choice = rng.randrange(6)
        v.clear()
        if kind == "stringValue" and choice == 0 and isinstance(x, str):
            try:  # a JSON string decoded, as a producer that sends structures would
                v.update(_otlp(json.loads(x)))
            except (ValueError, RecursionError):
                v["kvlistValue"] = {"values": [{"key": "text", "value": {"stringValue": x}}]}
        elif kind in ("arrayValue", "kvlistValue") and choice <= 2:
            v["stringValue"] = json.dumps(plain)  # a structure JSON-encoded into a string
        elif choice == 1:
            v["intValue"] = rng.choice([str(len(str(x))), "-1", "9223372036854775807", "abc", 3, 1.5])
        elif choice == 2:
            v["boolValue"] = rng.choice([True, False, "true", 0])
        elif choice == 3:
            v["arrayValue"] = {"values": [_otlp(plain), {"stringValue": "extra"}]}
        elif choice == 4:
            v["kvlistValue"] = {"values": [{"key": "value", "value": _otlp(plain)}]}
        else:
            v["stringValue"] = str(plain) if not isinstance(plain, (dict, list)) else json.dumps(plain)


def retype_fields(docs: list[Doc], rng: random.Random) -> None:
    """Span and log fields as other encoders write them: numbers for time strings, enum names, ids in upper case."""
    records = [r for d in docs for _, r in (*_spans(d), *_logs(d))]
    for r in _some(records, rng):
        field = rng.choice(["startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "kind", "traceId", "spanId",
                            "parentSpanId", "status", "name"])
        old = r.get(field)
        r[field] = rng.choice([
            int(old) if isinstance(old, str) and old.isdigit() else old,
            str(old).upper() if old is not None else None,
            "SPAN_KIND_CLIENT", "", 0, -1, None, {"code": "x"}, [old], 1.5,
        ])


def drop_attributes(docs: list[Doc], rng: random.Random) -> None:
    for d in docs:
        for attrs in _attr_lists(d):
            for kv in _some(list(attrs), rng) if rng.random() < 0.5 else []:
                attrs.remove(kv)


def drop_events(docs: list[Doc], rng: random.Random) -> None:
    for d in docs:
        for _, span in _spans(d):
            if span.get("events") and rng.random() < 0.5:
                span["events"] = [e for e in span["events"] if rng.random() < 0.5]


def drop_spans(docs: list[Doc], rng: random.Random) -> None:
    for d in docs:
        for owner, span in _spans(d):
            if rng.random() < 0.3:
                owner.remove(span)


def drop_logs(docs: list[Doc], rng: random.Random) -> None:
    for d in docs:
        for owner, rec in _logs(d):
            if rng.random() < 0.3:
                owner.remove(rec)


def drop_resource(docs: list[Doc], rng: random.Random) -> None:
    for d in _some(docs, rng):
        for r in _resources(d):
            r.pop("resource", None) if rng.random() < 0.5 else r.update(resource={"attributes": []})


def repoint_logs(docs: list[Doc], rng: random.Random) -> None:
    """Log records pointed at another span (of this trace or another), at an unknown span, or at nothing."""
    spans = [(s.get("traceId"), s.get("spanId")) for d in docs for _, s in _spans(d)]
    for d in docs:
        for _, rec in _logs(d):
            if rng.random() < 0.5:
                continue
            how = rng.randrange(4)
            if how == 0 and spans:
                rec["traceId"], rec["spanId"] = rng.choice(spans)
            elif how == 1 and spans:
                rec["spanId"] = rng.choice(spans)[1]
            elif how == 2:
                rec["traceId"], rec["spanId"] = f"{rng.getrandbits(128):032x}", f"{rng.getrandbits(64):016x}"
            else:
                for k in ("traceId", "spanId"):
                    rec.pop(k, None) if rng.random() < 0.5 else rec.update({k: ""})


def duplicate_spans(docs: list[Doc], rng: random.Random) -> None:
    """The same span sent twice (a retrying exporter), sometimes in another request."""
    for d in docs:
        for owner, span in _some(list(_spans(d)), rng):
            twin = copy.deepcopy(span)
            if rng.random() < 0.5:
                owner.append(twin)
            else:
                docs.append({"resourceSpans": [{"scopeSpans": [{"spans": [twin]}]}]})


def _strings(docs: list[Doc]) -> list[Doc]:
    return [v for d in docs for v in _any_values(d) if isinstance(v.get("stringValue"), str)]


def truncate_strings(docs: list[Doc], rng: random.Random) -> None:
    """Strings cut by a producer's length limit, mid-JSON and mid-character."""
    for v in _some(_strings(docs), rng):
        s = v["stringValue"]
        v["stringValue"] = s[:rng.randrange(len(s) + 1)] + rng.choice(["", "...", "…[truncated]"])


def lone_surrogates(docs: list[Doc], rng: random.Random) -> None:
    """A lone surrogate in a string, as JSON escapes it (\\ud800); the dump is written with ensure_ascii."""
    for v in _some(_strings(docs), rng):
        s = v["stringValue"]
        at = rng.randrange(len(s) + 1)
        v["stringValue"] = s[:at] + rng.choice(["\ud800", "\udfff", "\udc00x"]) + s[at:]


def deep_nesting(docs: list[Doc], rng: random.Random) -> None:
    """A value wrapped many levels deep in kvlists and arrays, or a JSON string nested as deep."""
    depth = rng.choice([20, 200, 900])
    for v in _some([v for d in docs for v in _any_values(d)], rng)[:3]:
        inner: Any = dict(v)
        if rng.random() < 0.5:
            text: Any = _plain(inner)
            for i in range(depth):
                text = [text] if i % 2 else {"k": text}
            v.clear()
            v["stringValue"] = json.dumps(text)
            continue
        for i in range(min(depth, 150)):  # four JSON levels each: the dump stays encodable
            inner = {"arrayValue": {"values": [inner]}} if i % 2 else {
                "kvlistValue": {"values": [{"key": "k", "value": inner}]}}
        v.clear()
        v.update(inner)


MUTATIONS: dict[str, Callable[[list[Doc], random.Random], None]] = {
    f.__name__: f for f in (rename_prefix, rename_segment, camel_case, retype_values, retype_fields, drop_attributes,
                            drop_events, drop_spans, drop_logs, drop_resource, repoint_logs, duplicate_spans,
                            truncate_strings, lone_surrogates, deep_nesting)
}
mutation_lists = st.lists(st.tuples(st.sampled_from(sorted(MUTATIONS)), st.integers(0, 2**32 - 1)),
                          min_size=1, max_size=5)


def mutate(dump: str, mutations: list[tuple[str, int]]) -> list[Doc]:
    docs = [json.loads(line) for line in _requests(dump)]
    # deep nesting once and last: nested again (or re-typed, which may nest) no encoder could write the dump
    deep = [m for m in mutations if m[0] == "deep_nesting"][:1]
    for name, seed in [m for m in mutations if m[0] != "deep_nesting"] + deep:
        MUTATIONS[name](docs, random.Random(seed))
    return docs


@given(st.sampled_from(DUMPS), mutation_lists)
def test_a_mutated_producer_dump_ends_in_sessions_or_a_clear_message(dump: str, mutations: list[tuple[str, int]]):
    count("mutated_producers")
    docs = mutate(dump, mutations)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src, out = root / "in" / "dump.otlp.jsonl", root / "out"
        src.parent.mkdir()
        # ensure_ascii: a lone surrogate goes out as the \ud800 escape an encoder in another language would write
        src.write_text("".join(json.dumps(d, ensure_ascii=True) + "\n" for d in docs), encoding="ascii")

        report = import_dumps([src], load("exporters", "scenario-dir")(out))  # the property: it returns

        said = (report.why_none or "").strip() or any(e.strip() for e in report.errors)
        assert report.written or said, (report.sessions, report.warnings[:3])
        assert all(e.strip() for e in report.errors), report.errors
        for folder in report.written:
            assert folder.resolve().is_relative_to(out.resolve()), folder
            checked = validate_file(folder / "incident.wtin.json")
            assert checked.valid, [str(p) for p in checked.problems]
        stray = [p for p in root.rglob("*") if p.is_file() and p != src and not p.is_relative_to(out)]
        assert not stray, stray
