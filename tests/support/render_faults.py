"""A render-worker target for fault tests: a session whose key names a fault triggers it in the worker.

`poison` kills the worker process outright (as a segfault or the OOM killer would), `broken` raises, `hang`
never returns, `slow` takes two seconds; every other session is written by the real `write_job`.
"""

from __future__ import annotations

import os
import time

from wt_otel.exporters.render_pool import RenderJob
from wt_otel.exporters.render_pool import write_job as real_write_job


def write_job(job: RenderJob) -> list[str]:
    key = job.session.key if job.session is not None else str((job.meta or {}).get("key"))
    if "poison" in key:
        os._exit(3)
    if "broken" in key:
        raise RuntimeError(f"cannot render {key}")
    if "hang" in key:
        time.sleep(3600)
    if "slow" in key:
        time.sleep(2)
    return real_write_job(job)
