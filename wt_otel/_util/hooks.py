"""User hooks named `module:attr` in a scenario, a config or a flag (synthesize, state probe).

Loading is the only place user code enters by name, so it is strict: the
spec must be `module:attr` with identifiers only (no paths, no expressions),
the module is imported (never exec'd from text), the attribute must be a
callable that is not a class, and every failure is a `HookError` saying which
hook, what was wrong and how to fix it. A hook that raises while running is
the caller's to catch (a synthesize hook's failure is that call's failure).

Also here: `crash_point`, the fault-injection seam the kill-loop tests use to stop
the process (as kill -9 would) at a named step of a durable write.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

_SPEC = re.compile(r"(?P<module>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):(?P<attr>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)\Z")


CRASH_AT = "WT_OTEL_CRASH_AT"  # STEP or STEP:N: `os._exit(137)` the Nth time STEP is reached (tests only)
_reached: dict[str, int] = {}


def crash_point(step: str) -> None:
    """Stop the process at once, as kill -9 would (no cleanup, no flush), when `WT_OTEL_CRASH_AT` names
    this step (and this is its Nth arrival). Read per call, so a test can set it in a forked child; unset,
    it costs one environment lookup."""
    at = os.environ.get(CRASH_AT)
    if not at:
        return
    name, _, nth = at.partition(":")
    if name != step:
        return
    _reached[step] = _reached.get(step, 0) + 1
    if _reached[step] >= (int(nth) if nth.isdigit() else 1):
        os._exit(137)


class HookError(ValueError):
    """A hook cannot be loaded: a bad spec, a missing module or attribute, not a callable."""


def load_hook(spec: str, what: str, *, search_cwd: bool = True, extra_path: str | None = None) -> Callable[..., Any]:
    """The callable `module:attr` names. `what` says which hook it is, for the error ("synthesize hook").

    A module file in `extra_path` (a scenario's folder) is imported by its path, under a name unique to it;
    otherwise the module is imported by name (with `search_cwd`, the current directory is importable, as
    for `python -m`). Raises `HookError`.
    """
    match = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if match is None:
        raise HookError(f"{what} {spec!r}: must be MODULE:ATTR with Python identifiers (e.g. my_hooks:synthesize); "
                        "file paths and expressions are not accepted")
    module_name, attr = match["module"], match["attr"]
    local = Path(extra_path, *module_name.split(".")).with_suffix(".py") if extra_path else None
    if search_cwd and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj: Any = _by_path(local) if local is not None and local.is_file() else importlib.import_module(module_name)
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


def _by_path(path: Path) -> ModuleType:
    """A hook module beside a scenario, imported by its path under a name unique to that path: two scenarios'
    `hooks.py` never shadow each other (importing by module name would reuse whichever loaded first)."""
    name = "wt_otel_hook_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
