"""serve's config (issue 12): `${env:VAR}` expansion, the reference doc checked against the model, the schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from wt_otel.cli import main
from wt_otel.serve.config import ConfigError, ServeConfig, load_serve_config
from wt_otel.serve.config_docs import BEGIN, END, render, splice

DOC = Path(__file__).resolve().parents[3] / "docs" / "serve-config.md"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "serve.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_env_references_expand_with_defaults_and_types(tmp_path: Path) -> None:
    """Was: `endpoint '${env:WT_HTTP}': port 'WT_HTTP}' is not a number`."""
    path = write(tmp_path, "receivers:\n  http_endpoint: ${env:WT_HTTP}\n  grpc_endpoint: ${env:WT_GRPC:-127.0.0.1:0}\n"
                           "assembler: {idle_timeout: '${env:WT_IDLE:-12.5}'}\n"
                           "replay: {results: {otlp_headers: {authorization: 'Bearer ${env:TOKEN}'}}}\n"
                           "data_dir: /srv/$$literal\n")
    config = load_serve_config(path, env={"WT_HTTP": "0.0.0.0:9999", "TOKEN": "t0k"})
    assert config.receivers.http_endpoint == "0.0.0.0:9999"
    assert config.receivers.grpc_endpoint == "127.0.0.1:0"
    assert config.assembler.idle_timeout == 12.5
    assert config.replay.results.otlp_headers == {"authorization": "Bearer t0k"}
    assert str(config.data_dir) == "/srv/$literal"


def test_a_variables_value_is_text_never_yaml_structure(tmp_path: Path) -> None:
    path = write(tmp_path, "data_dir: ${env:D}\n")
    assert str(load_serve_config(path, env={"D": "x\nreplay: {enabled: true}"}).data_dir).startswith("x\nreplay")


@pytest.mark.parametrize(("text", "says"), [
    ("receivers: {http_endpoint: '${env:WT_HTTP}'}\n",
     r"receivers.http_endpoint: environment variable WT_HTTP is not set"),
    ("data_dir: ${HOME}\n", r"data_dir: '\$\{HOME\}' is not a reference wt-otel expands"),
])
def test_unset_or_unknown_references_are_errors_naming_file_key_and_variable(tmp_path: Path, text: str,
                                                                            says: str) -> None:
    with pytest.raises(ConfigError, match=says) as info:
        load_serve_config(write(tmp_path, text), env={})
    assert str(info.value).startswith(str(tmp_path / "serve.yaml"))


def test_the_reference_doc_is_what_the_model_generates() -> None:
    """Every key of ServeConfig, with its default, is in docs/serve-config.md (regenerate: see config_docs)."""
    text = DOC.read_text(encoding="utf-8")
    assert splice(text) == text, "stale: python -m wt_otel.serve.config_docs docs/serve-config.md"
    generated = text[text.index(BEGIN):text.index(END)]
    assert "`receivers.grpc_endpoint` | str \\| null | `\"127.0.0.1:14317\"`" in generated
    assert "`flagger.rules[].match`" in generated and "`replay.results.otlp_endpoint`" in generated


def test_the_generated_tables_cover_every_leaf_key() -> None:
    def leaves(model: type, prefix: str = "") -> set[str]:
        out = set()
        for name, field in model.model_fields.items():
            default = field.get_default(call_default_factory=True) if not field.is_required() else None
            if isinstance(default, BaseModel):
                out |= leaves(type(default), f"{prefix}{name}.")
            else:
                out.add(f"{prefix}{name}")
        return out

    rendered = render()
    missing = [key for key in leaves(ServeConfig) if f"| `{key}` |" not in rendered]
    assert not missing


def test_schema_serve_config_validates_the_docs_example_and_refuses_a_typo() -> None:
    res = CliRunner().invoke(main, ["schema", "serve-config"])
    assert res.exit_code == 0, res.output
    schema = json.loads(res.output)
    jsonschema.validate({"receivers": {"grpc_endpoint": "127.0.0.1:14317"}, "replay": {"enabled": True}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"receiver": {}}, schema)
