"""The incident flagger stage: serve's session stage that applies the one flag rule.

The rule itself (`FlagRule`, the defaults, the matching) lives in `wt_otel.ingest.flags`, so
`wt-otel import` and `wt-otel serve` decide "incident?" the same way. This stage adds what a
long-running pipeline needs: it is the authority over the flag `build_session` derived (it
recomputes it from the `flagger:` section, so a user who disables the flagger gets no
flags from it) and it counts `wt_otel_flags_raised_total` once per session, not per revision.
"""

from __future__ import annotations

from collections import OrderedDict

from wt_otel.components import CompletedSession, StageContext, StageType
from wt_otel.ingest.flags import FlaggerConfig, FlagRule, FlagRules
from wt_otel.model.session import Session
from wt_otel.model.spans import SpanRecord
from wt_otel.serve.metrics import Metrics


class IncidentFlagger:
    """Evaluates the rules on a completed session; `process(session, spans)` sets the flag fields."""

    def __init__(self, config: FlaggerConfig | None = None, metrics: Metrics | None = None) -> None:
        self.config = config or FlaggerConfig()
        self.metrics = metrics or Metrics()
        self.rules = FlagRules(self.config)
        self._counted: OrderedDict[str, None] = OrderedDict()  # revisions of one session count once

    def evaluate(self, spans: list[SpanRecord]) -> tuple[FlagRule, str, object] | None:
        flag = self.rules.evaluate(spans)
        return (flag.rule, flag.what, flag.value) if flag else None

    def process(self, session: Session, spans: list[SpanRecord]) -> Session:
        flag = self.rules.apply(session, spans)
        if flag is not None and session.key not in self._counted:
            self._counted[session.key] = None
            if len(self._counted) > 100_000:
                self._counted.popitem(last=False)
            self.metrics.inc("wt_otel_flags_raised_total", rule=flag.rule.name)
        return session

    def on_session(self, done: CompletedSession) -> None:
        self.process(done.session, done.spans)

    def close(self) -> None:
        pass


def _create(config: FlaggerConfig, ctx: StageContext, _next: None) -> IncidentFlagger:
    return IncidentFlagger(config, ctx.metrics)


STAGE = StageType("flagger", "session", _create, FlaggerConfig,
                  description="mark incidents by the one flag rule (wt_otel.ingest.flags)")
