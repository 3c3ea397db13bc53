"""Plug-ins by name: the core finds processors and exporters through entry points.

`processors/` and `exporters/` import the core, never the reverse; the CLI
asks for a component by its type name (as a collector builds a pipeline from
its config), so a third-party package can ship its own by declaring an entry
point in the `wt_otel.exporters` or `wt_otel.processors` group.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any


class UnknownComponent(LookupError):
    pass


def load(group: str, name: str) -> Any:
    """The object registered as `name` in entry-point group `wt_otel.<group>`."""
    found = entry_points(group=f"wt_otel.{group}", name=name)
    for ep in found:
        return ep.load()
    known = sorted(ep.name for ep in entry_points(group=f"wt_otel.{group}"))
    raise UnknownComponent(f"no {group[:-1]} named {name!r} (installed: {', '.join(known) or 'none'}); "
                           "is wt-otel installed (pip install -e .)?")
