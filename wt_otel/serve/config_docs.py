"""The reference table of serve's config keys, generated from the pydantic models (`docs/serve-config.md`).

The doc's key tables sit between two markers and are regenerated from
`ServeConfig`, so a key added to a model without documentation, or a changed
default, fails `tests/unit/serve/test_config_docs.py` until the doc is rebuilt:

    python -m wt_otel.serve.config_docs docs/serve-config.md     # rewrite the generated part in place
"""

from __future__ import annotations

import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from wt_otel.serve.config import ServeConfig

BEGIN = "<!-- BEGIN GENERATED: python -m wt_otel.serve.config_docs docs/serve-config.md -->"
END = "<!-- END GENERATED -->"


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in args)
    if origin in (list, tuple, set):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map {_type_name(args[0])} → {_type_name(args[1])}" if args else "map"
    if annotation is type(None):
        return "null"
    if annotation is Path:
        return "path"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation.__name__
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        return "see below"
    if isinstance(value, Path):
        value = str(value)
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _doc(model: type[BaseModel]) -> str:
    text = inspect.cleandoc(model.__dict__.get("__doc__") or "")  # its own, not _Strict's
    return " ".join(text.split("\n\n")[0].split())


def _section(model: type[BaseModel], prefix: str, out: list[str]) -> None:
    nested: list[tuple[str, type[BaseModel]]] = []
    rows: list[str] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = _model_of(field.annotation)
        if sub is not None and isinstance(field.get_default(call_default_factory=True), BaseModel):
            nested.append((key, sub))
            continue
        if sub is not None:  # a list of models: its fields are documented as KEY[].field
            nested.append((f"{key}[]", sub))
        description = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{key}` | {_type_name(field.annotation)} | {_default(field)} | {description} |")
    title = prefix.rstrip(".") or "(top level)"
    out += [f"### `{title}`", ""]
    if _doc(model):
        out += [_doc(model), ""]
    if rows:
        out += ["| key | type | default | what |", "| --- | --- | --- | --- |", *rows, ""]
    for key, sub in nested:
        _section(sub, f"{key}.", out)


def render() -> str:
    """The generated part of docs/serve-config.md: one table per section, every key of ServeConfig."""
    out: list[str] = []
    _section(ServeConfig, "", out)
    rules = [rule.model_dump(exclude_defaults=True) for rule in ServeConfig().flagger.rules]
    out += ["### Default `flagger.rules`", "",
            "Used when the file names no rules (see [flag-rules.md](flag-rules.md)):", "", "```yaml",
            yaml.safe_dump({"flagger": {"rules": rules}}, sort_keys=False, width=100).rstrip(), "```"]
    return "\n".join(out).rstrip() + "\n"


def splice(document: str) -> str:
    """`document` with the text between the markers replaced by `render()`."""
    head, sep, rest = document.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the document needs the markers {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n\n{render()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m wt_otel.serve.config_docs docs/serve-config.md", file=sys.stderr)
        return 2
    path = Path(argv[0])
    path.write_text(splice(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
