"""What every contract module shares: rules, the error formatter, `Problem`.

Validation errors are the product: Wind Tunnel's users read them as the
format's documentation. So every problem is one sentence that starts with the
JSON path the user wrote (`messages[1].parts[0].id`), states the rule, shows
what was found and says how to fix it. Rules raise `PydanticCustomError`s
(type `wt_*`) whose message is the text after the path; `problems_from` is the
single place that turns a pydantic `ValidationError` into `Problem`s, and it
translates pydantic's own error types into the same voice.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    """One error or warning. `message` is the whole sentence, path first."""

    path: str
    message: str

    def __str__(self) -> str:
        return self.message


class ContractError(ValueError):
    """A document broke its contract; `problems` says where and how to fix it."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(map(str, problems)))
        self.problems = problems


# ---------------------------------------------------------------- JSON paths

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def json_path(loc: Iterable[str | int]) -> str:
    """`('messages', 1, 'parts', 0, 'id')` -> `messages[1].parts[0].id`."""
    out = ""
    for key in loc:
        if isinstance(key, int):
            out += f"[{key}]"
        elif _IDENT.match(key):
            out += f".{key}" if out else key
        else:
            out += f"[{json.dumps(key)}]"
    return out


def describe(value: Any) -> str:
    """What was found, for the `got ...` half of a message."""
    if value is MISSING:
        return "but the key is missing"
    if value is None:
        return "got null"
    if isinstance(value, bool):
        return f"got boolean {json.dumps(value)}"
    if isinstance(value, int | float):
        return f"got number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"got string {json.dumps(shown)}"
    if isinstance(value, list):
        return "got an array" if value else "got an empty array"
    if isinstance(value, dict):
        return "got an object"
    return f"got {type(value).__name__}"


# ---------------------------------------------------------------- rules


class _Missing:
    """Stands in for an absent required field so its rule, not pydantic's
    generic 'Field required', words the error ("args must be an object")."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


def fail(kind: str, message: str) -> NoReturn:
    """Raise a `wt_*` error. The text travels through ctx so braces in user
    data are never read as format placeholders."""
    raise PydanticCustomError(f"wt_{kind}", "{message}", {"message": message})


@dataclass(frozen=True)
class Rule:
    """`Annotated` metadata: a check that runs before pydantic's own, so it can
    word the error. The wrapped type still drives the JSON Schema."""

    check: Callable[[Any], Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        return core_schema.no_info_before_validator_function(self.check, handler(source))


def _fix(fix: str) -> str:
    return f" ({fix})" if fix else ""


def is_object(fix: str = "", optional: bool = False) -> Rule:
    def check(value: Any) -> Any:
        if isinstance(value, dict) or (optional and value is None):
            return value
        fail("object", f"must be an object, {describe(value)}{_fix(fix)}")

    return Rule(check)


def is_nonempty_str(fix: str = "") -> Rule:
    def check(value: Any) -> Any:
        if isinstance(value, str) and value:
            return value
        fail("nonempty", f"must be a non-empty string, {describe(value)}{_fix(fix)}")

    return Rule(check)


def is_one_of(choices: Collection[str], fix: str = "", optional: bool = False) -> Rule:
    def check(value: Any) -> Any:
        if value in choices or (optional and value is None):
            return value
        fail("one_of", f"must be one of {list(choices)}, {describe(value)}{_fix(fix)}")

    return Rule(check)


def is_version(key: str, supported: int = 1, optional: bool = False) -> Rule:
    """The format's version key: a JSON integer (never a string or boolean)."""

    def check(value: Any) -> Any:
        if optional and value in (MISSING, None):
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            fail(
                "version",
                f"must be a positive integer, {describe(value)} "
                f'(write "{key}": {supported} as a JSON number at the top level)',
            )
        if value != supported:
            fail(
                "unsupported_version",
                f"unsupported {key} version {value}: this wt-otel reads version {supported}",
            )
        return value

    return Rule(check)


def raise_at(errors: list[tuple[Loc, str]]) -> None:
    """Raise cross-field problems at their own paths (from an `after` model
    validator; pydantic prefixes the enclosing location). No-op when empty."""
    if errors:
        details = [
            InitErrorDetails(
                type=PydanticCustomError("wt_check", "{message}", {"message": m}), loc=loc, input=None
            )
            for loc, m in errors
        ]
        raise ValidationError.from_exception_data("contract", details)


@functools.cache
def _ruled_required(cls: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(key, field name) of required fields that have a Rule; computed once per model (hot path)."""
    return tuple(
        (field.alias or name, name)
        for name, field in cls.model_fields.items()
        if field.is_required() and any(isinstance(m, Rule) for m in field.metadata)
    )


class ContractModel(BaseModel):
    """Base of every contract model: unknown fields are kept (and re-dumped),
    and absent required fields are routed through their `Rule`."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _route_missing(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        absent = {name: MISSING for key, name in _ruled_required(cls) if key not in data}
        return {**data, **absent} if absent else data

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of what was read or set (defaults never set are left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# ---------------------------------------------------------------- formatter

# pydantic's own error types, said the way the rules say them.
_MUST_BE = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
}
_BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("greater than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
}
# Errors whose message is already a whole sentence naming what it is about.
_SENTENCES = {"wt_unsupported_version"}


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _sentence(path: str, err: Any) -> str:
    kind, ctx, got = err["type"], err.get("ctx") or {}, err.get("input")
    where = path or "the document"
    if kind in _SENTENCES:
        return err["msg"]
    if kind.startswith("wt_"):
        return f"{where} {err['msg']}"
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        return f"{where} is not a known field (check its spelling, or remove it)"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        field = ctx.get("discriminator", "'type'").strip("'")
        expected = re.findall(r"'([^']*)'", ctx.get("expected_tags", ""))
        tag = ctx.get("tag")
        hint = f" (did you mean {_snake(tag)!r}?)" if tag and _snake(tag) in expected else ""
        if kind == "union_tag_not_found":
            return f"{path}.{field} is required"
        return f"{path}.{field} must be one of {expected}, {describe(tag)}{hint}"
    if kind in _MUST_BE:
        return f"{where} must be {_MUST_BE[kind]}, {describe(got)}"
    if kind in _BOUNDS:
        rule, key = _BOUNDS[kind]
        return f"{where} must be {rule} {ctx.get(key)}, {describe(got)}"
    return f"{where} is invalid: {err['msg']}"


def problems_from(
    exc: ValidationError, union_tags: Collection[str] = (), model: type[BaseModel] | None = None
) -> list[Problem]:
    """Turn a pydantic `ValidationError` into `Problem`s.

    pydantic puts the chosen member of a tagged union into `loc`
    (`('messages', 1, 'parts', 0, 'tool_call', 'id')`). The user never wrote a
    `tool_call` key, so a path containing it would point nowhere in their
    file: names in `union_tags` that follow a list index are dropped.
    `model`, when given, lets an unknown top-level key suggest a known one.
    """
    problems = []
    for err in exc.errors():
        loc = tuple(_strip_tags(err["loc"], union_tags))
        if loc[-1:] == ("[key]",):  # a mapping's key, not its value, broke the rule
            path = json_path(loc[:-1])
            problems.append(Problem(path, _sentence(f"key {path}", err)))
        else:
            path = json_path(loc)
            sentence = _sentence(path, err)
            if err["type"] == "extra_forbidden" and model is not None and len(loc) == 1:
                sentence += _did_you_mean(str(loc[0]), model)
            problems.append(Problem(path, sentence))
    return problems


def _did_you_mean(key: str, model: type[BaseModel]) -> str:
    known = list(model.model_fields)
    close = difflib.get_close_matches(key, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(known)}"


def _strip_tags(loc: Loc, tags: Collection[str]) -> Iterator[str | int]:
    prev: str | int | None = None
    for key in loc:
        if not (isinstance(prev, int) and key in tags):
            yield key
        prev = key


def load(model: type[M], data: Any, union_tags: Collection[str] = ()) -> M:
    """Validate `data` as `model` or raise `ContractError` with every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ContractError(problems_from(exc, union_tags, model)) from None


def at(errors: Iterable[tuple[Loc, str]]) -> list[Problem]:
    """(loc, the rule's text) pairs as `Problem`s, in the same voice as `problems_from`."""
    problems = []
    for loc, message in errors:
        path = json_path(loc)
        problems.append(Problem(path, f"{path or 'the document'} {message}"))
    return problems


def load_whole(model: type[M], data: Any, rules: Callable[[Any], Iterable[tuple[Loc, str]]],
               union_tags: Collection[str] = ()) -> M:
    """`load`, plus the cross-field `rules` run on the raw document in the same pass: every problem at
    once, whatever else is wrong. (A pydantic `after` validator runs only when all of its model's fields
    parsed, so rules kept there surface one stage at a time: a broken field hides every rule above it.)
    `rules` must tolerate any shape: it reads what is there and skips what is not."""
    problems: list[Problem] = []
    model_value: M | None = None
    try:
        model_value = model.model_validate(data)
    except ValidationError as exc:
        problems = problems_from(exc, union_tags, model)
    problems += [p for p in at(rules(data)) if p not in problems]
    if problems or model_value is None:
        raise ContractError(problems)
    return model_value


# ---------------------------------------------------------------- lints

TRUNCATED = "[truncated]"


def truncated(value: Any, loc: Loc) -> list[Problem]:
    """Warn on every string holding the producer's '[truncated]' marker."""
    if isinstance(value, str):
        if TRUNCATED not in value:
            return []
        path = json_path(loc)
        return [
            Problem(
                path,
                f"{path} contains '{TRUNCATED}': the producer cut this value; "
                "replayed calls will not match it",
            )
        ]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in truncated(v, (*loc, str(k)))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in truncated(v, (*loc, i))]
    return []
