"""The producer fixtures' shared code (tests/fixtures/producers/_common), for the tests.

Those modules are plain scripts, not a package: the fixture generators run them in each producer's own
venv. This is the one place that puts their directory on `sys.path`; tests import them from here.
"""

from __future__ import annotations

import sys

from tests.support.paths import COMMON

if str(COMMON) not in sys.path:
    sys.path.insert(0, str(COMMON))

from fake_openai import FIRST_ANSWER, Handler  # noqa: E402
from otlp_dump import encode_spans, to_otlp_json  # noqa: E402

__all__ = ["FIRST_ANSWER", "Handler", "encode_spans", "to_otlp_json"]
