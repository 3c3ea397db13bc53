"""The incident flagger and the redactor, on sessions built from records."""

from __future__ import annotations

import json

import pytest

from tests.support.livehelpers import chat, exec_tool, tid, weather_session
from tests.support.spans import assistant, user
from wt_otel.exporters.envelope import envelope
from wt_otel.exporters.universe import universe
from wt_otel.ingest.sessions import attach_logs, build_session
from wt_otel.model.spans import STATUS_ERROR, Event
from wt_otel.processors.flagger import IncidentFlagger
from wt_otel.processors.redactor import Redactor, luhn_ok
from wt_otel.serve.config import FlaggerConfig, FlagRule, RedactionPattern, RedactorConfig, load_serve_config
from wt_otel.serve.metrics import Metrics


def built(spans):
    spans = attach_logs(spans)
    return build_session(spans), spans


def test_incident_attribute_flags_with_the_incident_id_as_ref():
    spans = weather_session(tid(1))
    spans[-1].attributes["wt.incident"] = "INC-42"
    session, spans = built(spans)
    metrics = Metrics()
    IncidentFlagger(metrics=metrics).process(session, spans)
    assert session.flagged and session.flag_ref == "INC-42"
    assert session.flag_reason.startswith("incident-attribute: wt.incident=")
    assert metrics.get("wt_otel_flags_raised_total", rule="incident-attribute") == 1


def test_ref_attribute_supplies_the_ref_from_another_span():
    spans = weather_session(tid(1))
    spans[0].attributes["wt.flag"] = True
    spans[-1].attributes["wt.incident.id"] = "PD-7"
    session, spans = built(spans)
    IncidentFlagger().process(session, spans)
    assert session.flag_ref == "PD-7"


@pytest.mark.parametrize("key,value,flagged", [
    ("user.feedback", "thumbs_down", True), ("feedback.score", -1, True), ("gen_ai.feedback.rating", "-0.5", True),
    ("user.feedback", "positive", False), ("feedback.score", 1, False), ("user.feedback", True, False),
])
def test_negative_user_feedback(key, value, flagged):
    spans = weather_session(tid(1))
    spans[-1].attributes[key] = value
    session, spans = built(spans)
    IncidentFlagger().process(session, spans)
    assert session.flagged is flagged
    if flagged:
        assert session.flag_ref == tid(1)  # no incident id: the trace id


def test_span_error_is_off_by_default_and_can_be_enabled():
    spans = weather_session(tid(1))
    spans[1].status_code, spans[1].status_message = STATUS_ERROR, "tool timed out"
    session, spans = built(spans)
    IncidentFlagger().process(session, spans)
    assert not session.flagged
    config = FlaggerConfig(rules=[FlagRule(name="errors", kind="status_error")])
    IncidentFlagger(config).process(session, spans)
    assert session.flagged and "tool timed out" in session.flag_reason


def test_event_and_regex_rules_and_disabling_the_default():
    spans = weather_session(tid(1))
    spans[0].events.append(Event(name="guardrail.tripped", attributes={"ticket": "T-9"}))
    spans[-1].attributes["wt.incident"] = "INC-1"
    session, spans = built(spans)
    config = FlaggerConfig(rules=[
        FlagRule(name="model", keys=["gen_ai.request.model"], match="regex", regex="^gpt-y"),
        FlagRule(name="guardrail", kind="event", event_name="guardrail.*", ref_attribute="ticket"),
    ])
    IncidentFlagger(config).process(session, spans)
    assert session.flag_reason == "guardrail: event='guardrail.tripped'" and session.flag_ref == "T-9"


def test_rule_config_errors_name_the_rule():
    with pytest.raises(ValueError, match="rule 'x': an attribute rule needs `keys`"):
        FlagRule(name="x")


def test_serve_config_file_and_overrides(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("data_dir: /srv/wt\nassembler: {idle_timeout: 5}\nredactor: {enabled: true}\n"
                   "flagger:\n  rules:\n    - {name: err, kind: status_error}\n")
    config = load_serve_config(cfg, {"assembler.idle_timeout": 0.5, "receivers.grpc_endpoint": "0.0.0.0:0",
                                     "data_dir": None})
    assert config.assembler.idle_timeout == 0.5 and str(config.data_dir) == "/srv/wt"
    assert config.receivers.grpc_endpoint == "0.0.0.0:0" and config.redactor.enabled
    assert [r.name for r in config.flagger.rules] == ["err"]
    cfg.write_text("assembler: {idle_timout: 5}\n")
    with pytest.raises(ValueError, match="assembler.idle_timout"):
        load_serve_config(cfg)


# --------------------------------------------------------------------------- redactor


SECRETS = {
    "email": "write to jane.doe+ops@example.co.uk now",
    "api_key": "key sk-proj-abcDEF1234567890abcdef here",
    "bearer": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
    "card": "card 4111 1111 1111 1111 exp 12/29",
}


@pytest.mark.parametrize("name", list(SECRETS))
def test_each_builtin_pattern(name):
    r = Redactor(RedactorConfig(enabled=True, builtins=[name]))
    out = r.redact_text(SECRETS[name])
    assert f"[REDACTED:{name}]" in out
    assert r._count == 1


def test_bearer_keeps_the_scheme_and_card_needs_luhn():
    r = Redactor(RedactorConfig(enabled=True))
    assert r.redact_text("Bearer abcdefgh12345678") == "Bearer [REDACTED:bearer]"
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert r.redact_text("order 4111 1111 1111 1112") == "order 4111 1111 1111 1112"


def test_redactor_scrubs_the_session_and_marks_envelope_and_universe():
    spans = [
        chat(tid(1), [user("I am jane@example.com, key sk-abcdefghijklmnop1234")], [assistant("ok", calls=[
            ("c1", "lookup", {"email": "jane@example.com", "password": "hunter2"})])]),
        exec_tool(tid(1), "lookup", {"email": "jane@example.com", "password": "hunter2"},
                  {"card": "4111111111111111"}, "c1"),
    ]
    session, spans = built(spans)
    config = RedactorConfig(enabled=True, attribute_keys=["password"],
                            patterns=[RedactionPattern(name="ticket", regex=r"TCK-\d+")])
    Redactor(config).process(session, spans)
    env, uni = envelope(session), universe(session)
    text = json.dumps([env, uni, [c.input_messages for c in session.llm_calls]])
    for secret in ("jane@example.com", "sk-abcdefghijklmnop1234", "hunter2", "4111111111111111"):
        assert secret not in text
    assert env["redaction"] == uni["redaction"]
    assert env["redaction"]["applied"] and "ticket" in env["redaction"]["patterns"]
    assert env["redaction"]["replacements"] >= 6 and env["redaction"]["attribute_keys"] == ["password"]
    assert env["messages"][1]["parts"][1]["name"] == "lookup"  # structure untouched


def test_redactor_off_by_default_changes_nothing():
    session, spans = built([chat(tid(1), [user("jane@example.com")], [assistant("ok")])])
    Redactor().process(session, spans)
    assert session.redaction is None and "redaction" not in envelope(session)
    assert session.user_turns == ["jane@example.com"]
