"""Choosing which scenarios a sweep (`wt-otel run`) or an offline check (`wt-otel check`) covers.

Four selectors, each repeatable: `--scenario` (the id), `--tag` (e.g.
`origin:incident-412`), `--pack`, `--owner`. Every value is a shell-style glob
(`lookup_*`; a plain name is a glob matching itself), case-sensitive. They
compose as AND across flags and OR within a repeated flag, so
`--pack billing --tag dim:recovery --tag dim:refusal` is "billing scenarios
tagged either way".

Why warn and why exit 2: a selector that matches nothing at all is almost
always a typo (`--owner team-bilings`), and a CI job that silently runs zero
scenarios is green forever. So each value that matches no candidate is a
warning, and an empty selection is a usage error (`EmptySelection`, exit 2).

The function is generic over what is being selected (`select(items, key=...)`)
so `check` can select suites or traces with the same semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import click

from wt_otel.replay.packs import PackCache

if TYPE_CHECKING:
    from wt_otel.replay.scenarios import LoadedScenario

T = TypeVar("T")


class EmptySelection(ValueError):
    """Nothing matched the selectors (a usage error: exit 2)."""


@dataclass(frozen=True)
class Candidate:
    """What selection looks at in one item: its id, tags, pack and owner (None: unknown/none)."""

    id: str
    tags: tuple[str, ...] = ()
    pack: str | None = None
    owner: str | None = None


@dataclass(frozen=True)
class Selection:
    """The selectors of one invocation; all empty selects everything."""

    scenarios: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    packs: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.scenarios or self.tags or self.packs or self.owners)

    def to_dict(self) -> dict[str, list[str]]:
        """As recorded in the results document (only the flags that were given)."""
        out = {"scenario": list(self.scenarios), "tag": list(self.tags), "pack": list(self.packs),
               "owner": list(self.owners)}
        return {k: v for k, v in out.items() if v}

    def describe(self) -> str:
        return " ".join(f"--{k} {v!r}" for k, values in self.to_dict().items() for v in values) or "(everything)"


def _any(patterns: Iterable[str], values: Iterable[str | None]) -> bool:
    vals = [v for v in values if v is not None]
    return any(fnmatchcase(v, p) for p in patterns for v in vals)


def _axes(selection: Selection) -> list[tuple[str, tuple[str, ...], Callable[[Candidate], list[str | None]]]]:
    return [
        ("scenario", selection.scenarios, lambda c: [c.id]),
        ("tag", selection.tags, lambda c: list(c.tags)),
        ("pack", selection.packs, lambda c: [c.pack]),
        ("owner", selection.owners, lambda c: [c.owner]),
    ]


def matches(candidate: Candidate, selection: Selection) -> bool:
    """AND across the given flags, OR within each."""
    return all(not patterns or _any(patterns, values(candidate)) for _, patterns, values in _axes(selection))


@dataclass
class Selected(Generic[T]):
    items: list[T]
    warnings: list[str] = field(default_factory=list)


def select(items: Sequence[T], selection: Selection, key: Callable[[T], Candidate]) -> Selected[T]:
    """The items matching `selection`, in their order, with a warning per selector value that matches
    no item at all. Raises `EmptySelection` when items exist but none is selected (or none exist)."""
    candidates = [key(item) for item in items]
    warnings = []
    for flag, patterns, values in _axes(selection):
        for pattern in patterns:
            if not any(_any([pattern], values(c)) for c in candidates):
                known = sorted({v for c in candidates for v in values(c) if v is not None})
                hint = f" (known: {', '.join(known[:10])}{', ...' if len(known) > 10 else ''})" if known else ""
                warnings.append(f"--{flag} {pattern!r} matches no scenario{hint}")
    chosen = [item for item, c in zip(items, candidates, strict=True) if matches(c, selection)]
    if not chosen:
        raise EmptySelection(f"no scenario selected by {selection.describe()} among {len(items)} found")
    return Selected(chosen, warnings)


def select_scenarios(scenarios: Sequence[LoadedScenario], selection: Selection,
                     packs: PackCache | None = None) -> Selected[LoadedScenario]:
    """`selection` applied to loaded scenarios (their effective pack and owner included).

    Raises `PackError` for an invalid `pack.yaml` and `EmptySelection` when nothing is left.
    """
    packs = packs or PackCache()

    def key(loaded: LoadedScenario) -> Candidate:
        m = packs.membership(loaded.path, loaded.scenario, strict=True)
        return Candidate(loaded.id, tuple(m.tags), m.pack, m.owner)

    if selection.empty:
        for loaded in scenarios:  # still check every pack.yaml: a broken one is a usage error either way
            key(loaded)
        if not scenarios:
            return select(scenarios, selection, key)
        return Selected(list(scenarios))
    return select(scenarios, selection, key)


def selection_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The four click options, for `run` and `check` alike (keyword args scenario_globs, tags, packs, owners)."""
    options = [
        click.option("--scenario", "scenario_globs", multiple=True, metavar="GLOB",
                     help="Only scenarios whose id matches (e.g. 'lookup_*'); repeatable (OR)."),
        click.option("--tag", "tags", multiple=True, metavar="TAG",
                     help="Only scenarios with this tag (e.g. origin:incident-412, a glob); repeatable (OR)."),
        click.option("--pack", "packs", multiple=True, metavar="NAME", help="Only this pack; repeatable (OR)."),
        click.option("--owner", "owners", multiple=True, metavar="OWNER", help="Only this owner; repeatable (OR)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def from_options(scenario_globs: Sequence[str] = (), tags: Sequence[str] = (), packs: Sequence[str] = (),
                 owners: Sequence[str] = ()) -> Selection:
    return Selection(tuple(scenario_globs), tuple(tags), tuple(packs), tuple(owners))
