"""The file rotel loads (`--otlp-with-trace-processor` / `--otlp-with-logs-processor`): wt-otel's rotel hooks.

rotel takes a file path, not a module name, and runs it in its embedded interpreter (Debian's
libpython3.11), which knows nothing of the venv. `rotel.sh` puts the venv's site-packages on
PYTHONPATH; PYTHONPATH entries are not site dirs, so their `.pth` files (where an editable
install keeps its import hook) are not run. `site.addsitedir` runs them, then the real code
is imported from `wt_otel.processors.rotel`. Loading the same module for both hooks also lets
the log hook see the GenAI trace ids the span hook remembered.
"""

import os
import site

for _entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    if _entry.rstrip("/").endswith("site-packages"):
        site.addsitedir(_entry)

from wt_otel.processors.rotel import process_logs, process_spans  # noqa: E402

__all__ = ["process_logs", "process_spans"]
