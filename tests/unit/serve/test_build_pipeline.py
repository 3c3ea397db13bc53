"""`build_pipeline()`: the stage order is data, and a third-party stage joins by entry point and config.

A small plug-in package is installed on the fly (tests/support/plugins.py) with a session stage
`tagger` (its own config model) and one broken stage; the configs here name them in
`pipeline.stages`, for `wt-otel serve`'s pipeline and for the in-app SDK processor alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from tests.support.plugins import install
from wt_otel.exporters.datadir import read_index
from wt_otel.model.spans import SpanRecord
from wt_otel.processors.sdk import WtOtelSpanProcessor
from wt_otel.serve.config import DEFAULT_STAGES, ConfigError, load_serve_config
from wt_otel.serve.server import ServeStartError, build_pipeline

ROOT = Path(__file__).resolve().parents[3]

SOURCE = '''
from pydantic import BaseModel, ConfigDict
from wt_otel.components import StageType

SEEN = []

class TaggerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str = "tagged"
    times: int = 1

class Tagger:
    def __init__(self, config):
        self.config = config
        self.closed = False
    def on_session(self, done):
        SEEN.append((done.session.key, done.session.flagged, done.written is None))
        done.session.warnings.append(f"{self.config.tag} x{self.config.times}")
    def close(self):
        self.closed = True

STAGE = StageType("tagger", "session", lambda config, ctx, _next: Tagger(config), TaggerConfig)

class NoOnSession:
    def close(self): ...

BROKEN = StageType("broken", "session", lambda config, ctx, _next: NoOnSession())
'''


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = install(tmp_path / "site", "wt_test_stages", SOURCE,
                   {"wt_otel.stages": {"tagger": "wt_test_stages:STAGE", "broken": "wt_test_stages:BROKEN"}},
                   dist="wt_otel_test_stages")
    monkeypatch.syspath_prepend(str(root))
    import wt_test_stages

    wt_test_stages.SEEN.clear()
    yield wt_test_stages
    sys.modules.pop("wt_test_stages", None)


def chat_span(trace: str, **attrs) -> SpanRecord:
    msgs = [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    out = [{"role": "assistant", "parts": [{"type": "text", "content": "hello"}], "finish_reason": "stop"}]
    return SpanRecord(trace_id=trace, span_id=trace[:16], name="chat gpt-x", start_ns=1, end_ns=2,
                      attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x",
                                  "gen_ai.input.messages": json.dumps(msgs), "gen_ai.output.messages": json.dumps(out),
                                  **attrs})


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.yaml"
    path.write_text(f"data_dir: {tmp_path / 'data'}\n{text}")
    return path


CUSTOM = """
pipeline:
  stages: [genai-filter, assembler, flagger, tagger, datadir]
  settings:
    tagger: {tag: vip, times: 2}
"""


def test_the_default_order_is_the_previous_wiring(tmp_path: Path):
    assert DEFAULT_STAGES == ["genai-filter", "assembler", "flagger", "redactor", "datadir", "auto-replay"]
    built = build_pipeline(load_serve_config(None, {"data_dir": str(tmp_path / "d")}), quiet=True)
    try:
        assert list(built.stages) == ["genai-filter", "assembler", "flagger", "redactor", "datadir"]  # replay off
        assert built.head is built.stages["genai-filter"] and built.store is not None
    finally:
        built.stop()


def test_a_config_names_a_custom_stage_order_with_a_third_party_stage(plugins, tmp_path: Path):
    config = load_serve_config(config_file(tmp_path, CUSTOM))
    lines: list[str] = []
    built = build_pipeline(config, emit=lines.append)
    assert list(built.stages) == ["genai-filter", "assembler", "flagger", "tagger", "datadir"]  # no redactor
    tagger = built.stages["tagger"]
    assert (tagger.config.tag, tagger.config.times) == ("vip", 2)
    built.head.consume([chat_span("a" * 32, **{"wt.incident": "INC-1"}), chat_span("b" * 32)], now=0.0)
    built.stop()
    assert sorted(plugins.SEEN) == [("a" * 32, True, True), ("b" * 32, False, True)]  # after flagger, before datadir
    assert tagger.closed
    entries = read_index(tmp_path / "data").latest()
    assert len(entries) == 2 and len(lines) == 2
    env = json.loads((tmp_path / "data" / entries["a" * 32]["path"] / "incident.wtin.json").read_text())
    assert env["source"]["ref"] == "INC-1"


def test_the_sdk_processor_builds_the_same_configured_pipeline(plugins, tmp_path: Path):
    config = load_serve_config(config_file(tmp_path, CUSTOM))
    processor = WtOtelSpanProcessor(config=config, tick_interval=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with provider.get_tracer("t").start_as_current_span("chat gpt-x", attributes=chat_span("c" * 32).attributes):
        pass
    provider.shutdown()
    assert [flagged for _, flagged, _ in plugins.SEEN] == [False]
    assert list(processor.stages.stages)[3] == "tagger"


@pytest.mark.parametrize("text, message", [
    ("pipeline: {stages: [genai-filter, assembler, nope]}", "pipeline.stages: no stage named 'nope' (installed:"),
    ("pipeline: {stages: [flagger, assembler, datadir]}", "flagger out of place: records stages go before"),
    ("pipeline: {stages: [genai-filter, datadir]}", "name exactly one assembler stage (got 0"),
    ("pipeline: {stages: [assembler, tagger], settings: {tagger: {tag: 1, colour: red}}}",
     "pipeline.settings.tagger.tag: Input should be a valid string; pipeline.settings.tagger.colour: Extra inputs"),
    ("replay: {outcome_scorers: [os.system]}", "replay.outcome_scorers: Value error, unknown outcome scorer(s)"),
], ids=["unknown", "order", "no-assembler", "bad-settings", "scorer-whitelist"])
def test_a_config_that_cannot_be_built_is_refused_when_loaded(plugins, tmp_path: Path, text: str, message: str):
    with pytest.raises(ConfigError) as err:
        load_serve_config(config_file(tmp_path, text))
    assert message in str(err.value)


def test_serve_refuses_a_bad_stage_order_with_exit_2(plugins, tmp_path: Path):
    cfg = config_file(tmp_path, "pipeline: {stages: [assembler, nope]}")
    done = subprocess.run([sys.executable, "-m", "wt_otel.cli", "serve", "--config", str(cfg), "--grpc-endpoint",
                           "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0"], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": f"{plugins.__file__.rsplit('/', 1)[0]}:{ROOT}",
                                           "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and "no stage named 'nope'" in done.stderr, done.stderr


def test_a_stage_without_on_session_is_refused_by_name_and_nothing_stays_open(plugins, tmp_path: Path):
    config = load_serve_config(config_file(tmp_path, "pipeline: {stages: [assembler, datadir, broken]}"))
    with pytest.raises(ServeStartError) as err:
        build_pipeline(config)
    assert err.value.exit_code == 2 and "'broken'" in str(err.value) and "lacks on_session" in str(err.value)
    build_pipeline(config.model_copy(update={"pipeline": config.pipeline.model_copy(
        update={"stages": ["assembler", "datadir"]})})).stop()  # the data dir's lock was released


def test_the_sdk_processor_stays_light_in_an_app(tmp_path: Path):
    """Planning the default stages loads auto-replay's StageType, not the replay machinery (mcp, uvicorn)."""
    code = ("import sys; from wt_otel.processors.sdk import WtOtelSpanProcessor; "
            f"p = WtOtelSpanProcessor({str(tmp_path / 'd')!r}); p.shutdown(); "
            "print(sorted(m for m in ('mcp', 'uvicorn', 'wt_otel.replay.runner') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_serve_imports_neither_scorers_nor_plug_ins():
    code = ("import sys, wt_otel.serve.config, wt_otel.serve.server; "
            "print([m for m in sys.modules if m == 'wt_otel.scorers' or m.startswith(('wt_otel.processors', "
            "'wt_otel.exporters', 'wt_otel.replay'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
