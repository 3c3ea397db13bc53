"""A third-party plug-in package made on the fly: a module plus a dist-info with entry points.

`install(tmp_path, module_source, {"wt_otel.stages": {"name": "module:attr"}})` writes both
into `tmp_path`, which the caller puts on `sys.path` (or PYTHONPATH for a subprocess):
`importlib.metadata` then finds the entry points exactly as it finds a pip-installed package's.
"""

from __future__ import annotations

import textwrap
from pathlib import Path


def install(root: Path, module: str, source: str, groups: dict[str, dict[str, str]],
            dist: str = "wt_otel_test_plugins") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = []
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in entries.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return root
