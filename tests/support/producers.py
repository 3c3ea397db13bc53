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

__all__ = ["FIRST_ANSWER", "CountingProvider", "Handler", "encode_spans", "to_otlp_json"]


class CountingProvider:
    """The fake OpenAI provider on a free port, answering with `answer(n)` (n: this request's number, from 1) and
    counting the requests that reach it; `close()` stops it."""

    def __init__(self, answer) -> None:
        import fake_openai  # noqa: PLC0415 - on sys.path from above

        self.requests = 0
        self.answer = answer
        self.server, port = fake_openai.start_server(decide_fn=self.decide)
        self.server.RequestHandlerClass.disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall a call
        self.url = f"http://127.0.0.1:{port}/v1"

    def decide(self, messages: list[dict], tools_offered: bool) -> dict:
        self.requests += 1
        return self.answer(self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
