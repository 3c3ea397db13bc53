"""Property-based fuzzing (issue 13): hostile values through the OTLP decoders (protobuf and JSON), the dialects
and session builder, every writer, admission, and the replay server's request checks.

The properties are the issue's promises: bad input is refused with the decoder's own error (never another
exception), a session is always written (or quarantined, never lost), what is written parses back, and every
value that had to be changed is named in a warning. `pytest` runs the fast profile; `pytest -m fuzz`
(`make test-fuzz`) the long one.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.support.fuzzing import (
    count,
    hostile_sessions,
    hostile_values,
    json_values,
    otlp_json_documents,
    record_lists,
)
from tests.support.hostile import genai_session, tid, to_request
from wt_otel._util import safejson
from wt_otel._util.fsutil import safe_slug
from wt_otel.exporters.datadir import DataDirStore
from wt_otel.exporters.scenario_dir import render
from wt_otel.ingest.otlp import OtlpJsonError, spans_from_json, spans_from_request
from wt_otel.ingest.sessions import build_session
from wt_otel.replay.cassette_server import _shape_problem
from wt_otel.serve.budget import AdmissionControl, BudgetConfig
from wt_otel.serve.receivers.common import Encoding, MalformedRequest, Signal, decode

pytestmark = pytest.mark.fuzz


@given(hostile_values)
def test_safejson_encodes_anything_and_names_what_it_changed(value):
    count("safejson")
    notes: list[str] = []
    data = safejson.dumps({"v": value}, where="f.json", notes=notes)
    back = json.loads(data)  # always parses
    if notes:
        assert all(n.startswith("f.json: ") and "kept as text" in n for n in notes)
    else:
        assert back == json.loads(json.dumps({"v": value}))  # unchanged when nothing was noted


@given(st.binary(max_size=2048))
def test_protobuf_decoder_refuses_garbage_with_its_own_error(body):
    count("otlp_protobuf_bytes")
    try:
        decoded = decode(Signal.TRACES, body, Encoding.PROTOBUF)
    except MalformedRequest:
        return
    assert decoded.received == decoded.rejected + len(decoded.records)


@given(record_lists)
def test_protobuf_requests_with_hostile_attributes_decode(records):
    count("otlp_protobuf_requests")
    spans = [r for r in records if hasattr(r, "start_ns")]
    for span in spans:  # what protobuf itself cannot carry (int beyond int64, surrogates) no SDK can send
        span.attributes = {_pb_safe(k): _pb_safe(v) for k, v in span.attributes.items()}
        span.name = _pb_safe(span.name)
    assume(spans)
    request = to_request(spans)
    body = request.SerializeToString()
    spans = list(spans_from_request(ExportTraceServiceRequest.FromString(body)))
    assert len(spans) == sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def _pb_safe(value):
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return str(value)
    if isinstance(value, str | dict | list):  # dicts and lists travel as their text (support.hostile._any)
        try:
            text = str(value)
        except RecursionError:
            text = "<deep>"
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


@given(otlp_json_documents())
def test_otlp_json_decoder_refuses_bad_documents_with_its_own_error(doc):
    count("otlp_json")
    try:
        body = json.dumps(doc).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        assume(False)
    with contextlib.suppress(MalformedRequest):  # anything else fails the property
        decode(Signal.TRACES, body, Encoding.JSON)
    if isinstance(doc, dict):
        with contextlib.suppress(OtlpJsonError):
            list(spans_from_json(doc))


@given(st.one_of(record_lists, hostile_sessions()))
def test_session_builder_and_every_writer_take_hostile_records(records):
    count("session_and_writers")
    session = build_session(records, key="k")
    if session is None:
        return
    count("session_and_writers:built")
    files = render(session, "slug")
    for name, data in files.items():
        assert isinstance(data, bytes), name
        if name.endswith(".json"):
            json.loads(data)  # every JSON file parses back
        else:
            data.decode("utf-8")  # valid UTF-8 text


@given(st.one_of(record_lists, hostile_sessions()))
def test_the_store_writes_or_quarantines_never_loses(tmp_path_factory, records):
    count("datadir_store")
    session = build_session(records, key="k")
    if session is None:
        return
    count("datadir_store:built")
    root = tmp_path_factory.mktemp("dd")
    with DataDirStore(root) as store:
        written = store.write(session, records)
        if written is None:
            assert list((root / "quarantine").iterdir()), "neither written nor quarantined"
        else:
            json.loads((written.path / "incident.wtin.json").read_bytes())
    with DataDirStore(root) as again:  # and the data dir it leaves behind opens cleanly
        assert not [n for n in again.recovery if "torn" in n]


@given(record_lists, st.one_of(st.none(), st.text(max_size=20)))
def test_admission_decides_on_anything(records, client):
    count("admission")
    control = AdmissionControl(BudgetConfig(max_bytes=200_000, max_records=10, max_sessions_per_client=2))
    decision = control.check(records, 0, 0, client)
    assert decision.verdict.value in ("admit", "full", "too_large")


@given(json_values)
def test_cassette_request_checks_say_what_is_wrong_or_accept(body):
    count("cassette_request")
    problem = _shape_problem(body)
    assert problem is None or isinstance(problem, str)


@given(st.text(max_size=200))
def test_slugs_are_always_safe(text):
    count("slug")
    slug = safe_slug(text)
    assert slug and "/" not in slug and not slug.startswith(".") and len(slug) <= 48


# -- regression tests for what the fuzzer found (each a fixed example, so it runs in every profile)

def test_found_huge_int_in_tool_arguments_is_kept_as_text():
    session = build_session(genai_session(tid(1), args='{"n": 123456789012345678901234567890}'), key="k")
    env = json.loads(render(session, "s")["incident.wtin.json"])
    assert env["witnessed_calls"][0]["args"] == {"n": "123456789012345678901234567890"}


def test_found_nan_in_an_attribute_is_not_silently_nulled():
    notes: list[str] = []
    assert json.loads(safejson.dumps({"x": float("nan")}, notes=notes)) == {"x": "nan"} and notes


def test_found_a_list_where_text_content_belongs_is_kept_as_its_json():
    """Long profile, first run: `{"type": "text", "content": [null]}` in gen_ai.input.messages crashed the
    session builder (AttributeError in parts.signature): in serve the session was lost."""
    spans = genai_session(tid(1))
    # on a model call's span: an agent span's view that contradicts its model calls is not concatenated
    # to the transcript (issue 10), so there it would be dropped, not kept
    spans[0].attributes["gen_ai.input.messages"] = json.dumps(
        [{"role": "user", "parts": [{"type": "text", "content": [None]}]}])
    session = build_session(spans, key="k")
    assert session is not None
    assert any(p.get("content") == "[null]" for m in session.messages for p in m["parts"])
    render(session, "s")


def test_found_surrogates_in_yaml_and_deep_records_in_quarantine(tmp_path, monkeypatch):
    """Long profile, first run: a lone surrogate that reached scenario.yaml made the YAML emitter throw
    (UnicodeEncodeError); quarantining the session then overflowed the stack on a deeply nested attribute
    (dataclasses.asdict), so store.write raised and the session was lost."""
    from tests.support.fuzzing import deep
    from wt_otel.exporters import datadir as datadir_mod
    from wt_otel.exporters.scenario import _yaml

    assert "\\udc80" in _yaml({"name": "a\udc80b"})
    spans = genai_session(tid(1))
    spans[0].attributes["app.deep"] = deep(1500)
    session = build_session(spans, key="k")
    monkeypatch.setattr(datadir_mod, "render", lambda *a, **k: (_ for _ in ()).throw(TypeError("boom")))
    with DataDirStore(tmp_path) as store:
        assert store.write(session, spans) is None
    [q] = (tmp_path / "quarantine").iterdir()
    assert len((q / "records.ndjson").read_text().splitlines()) == len(spans)
