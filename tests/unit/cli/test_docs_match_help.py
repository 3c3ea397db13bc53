"""Every `wt-otel ...` (and `pytest --wt-...`) invocation in README.md and docs/*.md names a subcommand and
options that exist (issue 30, item 10).

The commands are read from the live click tree (`wt_otel.cli.main`, every lazy command loaded), so a
command or option added or renamed anywhere is checked without touching this file; the pytest plugin's
options from its own `pytest_addoption`. Invocations are found in fenced code blocks (a command at the
start of a line or after `$`, `&&`, `;`, `|`, `(`) and in inline code spans of the prose. Synopsis
notation is understood: `[--port 8648 | --stdio]`, `fetch|diff|drift`, `...`, placeholders in capitals.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

from wt_otel import pytest_plugin
from wt_otel.cli import main

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("examples/*/README.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
ENDS = {"&", "&&", "||", ";", "|", ">", ">>", "<", "2>", "2>&1", "&>", "--", "#"}
PROGRAMS = ("wt-otel", "pytest")


@dataclass(frozen=True)
class Invocation:
    page: str
    line: int
    tokens: tuple[str, ...]  # from the program name on, up to a shell operator

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: `{' '.join(self.tokens)}`"


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose or a heredoc: whitespace is good enough
        return text.split("#", 1)[0].split()


def _invocations_in(text: str, page: str, line: int, prose: bool) -> list[Invocation]:
    tokens = _split(text)
    found = []
    for i, token in enumerate(tokens):
        program = token.removeprefix("$(").removeprefix("(").rsplit("/", 1)[-1]
        if program not in PROGRAMS:
            continue
        before = tokens[i - 1] if i else ""
        at_start = i == 0 or before in ENDS or before in ("$", "then", "do", "time", "exec") or "=" in before \
            or token.startswith(("$(", "("))
        if not at_start and not prose:
            continue
        if program == "pytest" and not any(t.startswith(("--wt-", "[--wt-")) for t in tokens[i + 1:]):
            continue
        rest: list[str] = [program]
        depth = 0
        for t in tokens[i + 1:]:
            depth += t.count("[") - t.count("]")
            if t in ENDS and not (t == "|" and depth > 0):
                break
            if t.endswith((";", "&", ")")) and not t.endswith("$)") and depth <= 0 and t not in ("(", ")"):
                rest.append(t.rstrip(";&)"))
                break
            if t.startswith((">", "2>", "<")):
                break
            rest.append(t)
        found.append(Invocation(page, line, tuple(rest)))
    return found


def invocations(path: Path) -> list[Invocation]:
    """The wt-otel (and pytest --wt-*) command lines of a Markdown page, with their line numbers."""
    page = str(path.relative_to(ROOT))
    out: list[Invocation] = []
    fenced = False
    pending, start = "", 0
    last: Invocation | None = None  # the previous line's invocation, which an indented `[--opt ...]` continues
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(raw):
            fenced, pending, last = not fenced, "", None
            continue
        if fenced:
            if last is not None and not pending and re.match(r"\s+[\[-]", raw):  # a synopsis wrapped in lines
                last = Invocation(last.page, last.line, last.tokens + tuple(_split(raw)))
                out[-1] = last
                continue
            if not pending:
                start = n
            if raw.rstrip().endswith("\\"):  # a continued command line
                pending += raw.rstrip()[:-1] + " "
                continue
            found = _invocations_in(pending + raw, page, start, prose=False)
            out += found
            last = found[-1] if found else None
            pending = ""
        else:
            for span in INLINE.findall(raw):
                out += _invocations_in(span, page, n, prose=True)
    return out


def _all_commands(group: click.Group, ctx: click.Context) -> None:
    """Load every lazy command, so `commands` below is the whole tree."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            _all_commands(command, click.Context(command, parent=ctx, info_name=name))


def _options(command: click.Command) -> dict[str, click.Parameter]:
    return {opt: p for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)} \
        | {"--help": click.Option(["--help"], is_flag=True), "-h": click.Option(["-h"], is_flag=True)}


def _takes_value(param: click.Parameter | None) -> bool:
    return isinstance(param, click.Option) and not param.is_flag and not param.count


def _option_name(token: str) -> str | None:
    """`--port` from `[--port`, `--out=F`, `--llm]`; None for anything that is not an option."""
    name = token.strip("[]()|,.`'\"").split("=", 1)[0]
    if not re.fullmatch(r"--?[A-Za-z][A-Za-z0-9-]*", name) or name in ("-", "--"):
        return None
    return name


def _placeholder(token: str) -> bool:
    """A synopsis word rather than a subcommand: ARGUMENT, [OPTIONS], ..., <x>, a path or a glob."""
    word = token.strip("[]()|,.`'\"")
    return not word or word.isupper() or word in ("...", "…") or any(c in word for c in "<>/*.$={}:")


def _choice_problems(inv: Invocation, path: list[str], name: str, param: click.Parameter, value: str) -> list[str]:
    """A value the docs give a Choice option (`--llm live|replay`) must be one of its choices."""
    if not isinstance(param.type, click.Choice):
        return []
    words = [w for w in value.strip("[]()`'\",").split("|") if w]
    bad = [w for w in words if not _placeholder(w) and w not in param.type.choices]
    return [f"{inv}: `{' '.join(path)} {name}` takes {'|'.join(map(str, param.type.choices))}, not {w!r}"
            for w in bad]


def check_wt_otel(inv: Invocation) -> list[str]:
    ctx = click.Context(main, info_name="wt-otel")
    command: click.Command = main
    path = ["wt-otel"]
    tokens = list(inv.tokens[1:])
    problems = []
    skip_value = False
    while tokens:
        token = tokens.pop(0)
        if skip_value:
            skip_value = False
            continue
        opts = _options(command)
        name = _option_name(token)
        if name is not None:
            if name not in opts:
                known = ", ".join(sorted(o for o in opts if o.startswith("--")))
                problems.append(f"{inv}: `{' '.join(path)}` has no option {name} (it has: {known})")
                continue
            param = opts[name]
            inline = token.split("=", 1)[1] if "=" in token else None
            if _takes_value(param) and inline is None and not token.rstrip().endswith("]"):
                skip_value = True
                if tokens:
                    problems += _choice_problems(inv, path, name, param, tokens[0])
            elif inline is not None:
                problems += _choice_problems(inv, path, name, param, inline)
            continue
        if isinstance(command, click.Group):
            word = token.strip("[]()`")
            alternatives = [w for w in re.split(r"[|/]" if re.fullmatch(r"[a-z|/-]+", word) else r"\|", word) if w]
            if all(_placeholder(w) for w in alternatives):
                break  # `wt-otel COMMAND ...`: nothing to resolve
            for word in alternatives:
                if command.get_command(ctx, word) is None and not _placeholder(word):
                    problems.append(f"{inv}: `{' '.join(path)}` has no subcommand {word!r} "
                                    f"(it has: {', '.join(command.list_commands(ctx))})")
            sub = command.get_command(ctx, alternatives[0])
            if sub is None:
                break
            ctx = click.Context(sub, parent=ctx, info_name=alternatives[0])
            path.append(alternatives[0] if len(alternatives) == 1 else "|".join(alternatives))
            command = sub
    return problems


def _plugin_options() -> set[str]:
    names: set[str] = set()

    class Group:
        def addoption(self, *opts: str, **kwargs: Any) -> None:
            names.update(opts)

    class Parser:
        def getgroup(self, *args: Any, **kwargs: Any) -> Group:
            return Group()

    pytest_plugin.pytest_addoption(Parser())  # type: ignore[arg-type]
    return names


def check_pytest(inv: Invocation) -> list[str]:
    known = _plugin_options()
    return [f"{inv}: the pytest plugin has no option {name} (it has: {', '.join(sorted(known))})"
            for token in inv.tokens[1:] if (name := _option_name(token)) and name.startswith("--wt-")
            and name not in known]


def test_the_pages_hold_invocations_to_check() -> None:
    found = [inv for page in PAGES for inv in invocations(page)]
    assert len(found) > 50 and {inv.tokens[0] for inv in found} == {"wt-otel", "pytest"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_invocation_in_the_docs_exists_in_the_cli(page: Path) -> None:
    _all_commands(main, click.Context(main, info_name="wt-otel"))
    problems = []
    for inv in invocations(page):
        problems += check_pytest(inv) if inv.tokens[0] == "pytest" else check_wt_otel(inv)
    assert problems == [], "docs drift from --help:\n" + "\n".join(problems)


@pytest.mark.parametrize(("text", "expected"), [
    ("wt-otel run scenarios --llm replay --no-such-flag", "has no option --no-such-flag"),
    ("wt-otel universe servee FILE", "has no subcommand 'servee'"),
    ("wt-otel surface fetch|dif|drift ...", "has no subcommand 'dif'"),
    ("wt-otel run/chek --format", "has no subcommand 'chek'"),
    ("wt-otel cassette serve F [--port 8649 | --stdio]", "`wt-otel cassette serve` has no option --stdio"),
    ("wt-otel run x [--llm live|replayed]", "`wt-otel run --llm` takes auto|replay|live|record, not 'replayed'"),
    ("wt-otel report --format=yaml", "not 'yaml'"),
])
def test_the_checker_catches_drift(text: str, expected: str) -> None:
    (inv,) = _invocations_in(text, "probe.md", 1, prose=False)
    problems = check_wt_otel(inv)
    assert any(expected in p for p in problems), problems


def test_the_checker_accepts_synopsis_notation() -> None:
    for text in ("wt-otel universe serve scenario/fixture.universe.json [--port 8648 | --stdio] [--calls-out F]",
                 "wt-otel surface fetch|diff|drift ...", "wt-otel run PATH... [--runs N] --out=results.xml",
                 "WT_X=1 wt-otel run x --llm replay && echo done", "wt-otel -v run x"):
        (inv,) = _invocations_in(text, "probe.md", 1, prose=False)
        assert check_wt_otel(inv) == [], text


def test_the_checker_knows_the_pytest_plugins_options() -> None:
    (inv,) = _invocations_in("pytest tests --wt-scenarios DIR --wt-runtime python:a:b --wt-datadir x", "probe.md", 1,
                             prose=True)
    assert [p.split(": the pytest plugin")[1][:24] for p in check_pytest(inv)] == [" has no option --wt-data"]
