"""User hooks named `module:attr` in a scenario, a config or a flag (synthesize, state probe).

Loading is the only place user code enters by name, so it is strict: the
spec must be `module:attr` with identifiers only (no paths, no expressions),
the module is imported (never exec'd from text), the attribute must be a
callable that is not a class, and every failure is a `HookError` saying which
hook, what was wrong and how to fix it. A hook that raises while running is
the caller's to catch (a synthesize hook's failure is that call's failure).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from typing import Any

_SPEC = re.compile(r"(?P<module>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):(?P<attr>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)\Z")


class HookError(ValueError):
    """A hook cannot be loaded: a bad spec, a missing module or attribute, not a callable."""


def load_hook(spec: str, what: str, *, search_cwd: bool = True, extra_path: str | None = None) -> Callable[..., Any]:
    """The callable `module:attr` names. `what` says which hook it is, for the error ("synthesize hook").

    `extra_path` (a scenario's folder) and, with `search_cwd`, the current directory are importable,
    as for `python -m`. Raises `HookError`.
    """
    match = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if match is None:
        raise HookError(f"{what} {spec!r}: must be MODULE:ATTR with Python identifiers (e.g. my_hooks:synthesize); "
                        "file paths and expressions are not accepted")
    module_name, attr = match["module"], match["attr"]
    for folder in (extra_path, os.getcwd() if search_cwd else None):
        if folder and folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise HookError(f"{what} {spec!r}: cannot import {module_name!r}: {exc} (is it on PYTHONPATH? the current "
                        "directory is searched)") from exc
    except Exception as exc:  # the module itself raised at import time
        raise HookError(f"{what} {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise HookError(f"{what} {spec!r}: {module_name} has no attribute {attr!r}") from None
    if isinstance(obj, type) or not callable(obj):
        kind = "a class" if isinstance(obj, type) else type(obj).__name__
        raise HookError(f"{what} {spec!r} is {kind}, not a callable: point at a function")
    return obj
