"""`wt-otel conformance`: check an endpoint against Contract C, one line per check.

The checks are the spec's conformance list (0002-inject-protocol.md,
"Conformance and ratification"): inject shapes and the version echo, reset
synchronous / total / idempotent, the reset canary exactly as the spec words
it, two stateful sessions isolated, and `/wt/surface` when implemented.

State checks work the canary's way: inject a random UUID, then ask for it
back. A recalled UUID *proves* a leak; a reply without it proves nothing
(the state may sit where the agent did not look), so passing state checks say
"no leak observed", never "isolated".

    PASS name: what held          FAIL name: what broke and how to fix it
    SKIP name: why not checked    INFO name: worth knowing, not a failure
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wt_otel.contracts.inject import INJECT, PROTOCOL_VERSION, ContractViolation, TurnResult, validate_inject_response
from wt_otel.replay.runtimes import HttpInjectRuntime, clip_body, new_session_id

RECALL_PROBES = ("What did I just tell you?", "Repeat, exactly, the code I asked you to remember.")
MISMATCHED_VERSION = 999
SETTLE_S = 1.0  # how long to wait before deciding a reset was asynchronous rather than leaking


def nonce_turn(nonce: str) -> str:
    return f"Please remember this code for later: {nonce}. Reply with OK."


@dataclass(frozen=True)
class Check:
    status: str  # PASS | FAIL | SKIP | INFO
    name: str
    detail: str = ""

    def line(self) -> str:
        detail = " ".join(self.detail.split())
        return f"{self.status} {self.name}: {detail}" if detail else f"{self.status} {self.name}"


@dataclass
class ConformanceReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def conforming(self) -> bool:
        return not any(c.status == "FAIL" for c in self.checks)


class _Unreachable(Exception):
    """No point in further checks: every one would fail the same way."""


def _leaks(nonce: str, result: TurnResult) -> bool:
    """The nonce anywhere the agent answered: reply, error, or the arguments of a tool call."""
    calls = json.dumps([c.to_dict() for c in result.tool_calls], ensure_ascii=False)
    return nonce in result.reply or nonce in (result.error or "") or nonce in calls


class Conformance:
    """One conformance run against one endpoint; `run()` returns the report."""

    def __init__(self, runtime: HttpInjectRuntime, emit: Callable[[str], Any] = print,
                 settle_s: float = SETTLE_S) -> None:
        self.rt = runtime
        self.emit = emit
        self.settle_s = settle_s
        self.report = ConformanceReport()
        self.reset_ok = True
        self.inject_ok = True
        self.reset_async = False

    def add(self, status: str, name: str, detail: str = "") -> None:
        check = Check(status, name, detail)
        self.report.checks.append(check)
        self.emit(check.line())

    def run(self) -> ConformanceReport:
        self.add("INFO", "endpoint", f"{self.rt.base} (Contract C version {PROTOCOL_VERSION}, timeout_s "
                                     f"{self.rt.timeout_s:g} + {self.rt.grace_s:g} s grace, no retries)")
        checks: list[tuple[str, Callable[[], None]]] = [
            ("reset.response", self.reset_response),
            ("inject.response", self.inject_response),
            ("inject.version_mismatch", self.version_mismatch),
            ("reset.synchronous", self.reset_synchronous),
            ("reset.total", self.reset_total),
            ("reset.canary", self.reset_canary),
            ("sessions.isolated", self.sessions_isolated),
            ("surface", self.surface),
        ]
        try:
            for name, check in checks:
                self._guarded(name, check)
        except _Unreachable:
            self.add("SKIP", "remaining checks", "the endpoint is unreachable")
        else:
            with contextlib.suppress(ContractViolation):
                self.rt.reset()  # leave the endpoint as clean as we found it; not a check
        failed = sum(c.status == "FAIL" for c in self.report.checks)
        self.add("INFO", "result", "conforming" if not failed else f"NOT conforming: {failed} check(s) failed")
        return self.report

    def _guarded(self, name: str, check: Callable[[], None]) -> None:
        """A contract violation inside a check fails that check; an unreachable endpoint ends the run."""
        try:
            check()
        except ContractViolation as exc:
            if exc.rule == "unreachable":
                self.add("FAIL", "endpoint", str(exc))
                raise _Unreachable from exc
            self.add("FAIL", name, str(exc))

    def _ready(self, name: str, reset: bool = True) -> bool:
        """State checks judge recall: they need working injects (and reset) or every one fails the same way."""
        if not self.inject_ok:
            self.add("SKIP", name, "needs conforming /wt/inject responses (see inject.*)")
            return False
        if reset and not self.reset_ok:
            self.add("SKIP", name, "needs a working /wt/reset (see reset.response)")
            return False
        return True

    def _recall(self, session_id: str, nonce: str, probes: tuple[str, ...] = RECALL_PROBES) -> str | None:
        """The first probe whose answer contains the nonce, or None."""
        for probe in probes:
            if _leaks(nonce, self.rt.inject(session_id, probe)):
                return probe
        return None

    # ------------------------------------------------------------ checks

    def reset_response(self) -> None:
        try:
            self.rt.reset()
        except ContractViolation as exc:
            if exc.rule == "unreachable":
                raise
            self.reset_ok = False
            self.add("FAIL", "reset.response", str(exc))
            self.add("SKIP", "reset.idempotent", "needs a working /wt/reset")
            return
        self.add("PASS", "reset.response", f"200 with the version echo {{\"wt_inject\": {PROTOCOL_VERSION}}}")
        try:
            self.rt.reset()
        except ContractViolation as exc:
            if exc.rule == "unreachable":
                raise
            self.add("FAIL", "reset.idempotent", f"a second reset on fresh state failed: {exc}")
            return
        self.add("PASS", "reset.idempotent", "a second reset on fresh state answered 200 too")

    def inject_response(self) -> None:
        payload = {"wt_inject": PROTOCOL_VERSION, "session_id": new_session_id(), "timeout_s": self.rt.timeout_s,
                   "text": "Hello! This is a Contract C conformance check; please reply briefly."}
        self.inject_ok = False  # until this response validates
        status, body = self.rt.post(INJECT, payload)
        if status != 200:
            self.add("FAIL", "inject.response", f"HTTP {status}, expected 200 with a response envelope (agent "
                                                f"failures are 200 with \"error\" set): {clip_body(body)}")
            return
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            self.add("FAIL", "inject.response", f"the body is not UTF-8 JSON ({exc}): {clip_body(body)}")
            return
        _, shape_problems = validate_inject_response(data, None)  # the shape alone
        _, all_problems = validate_inject_response(data, PROTOCOL_VERSION)
        echo = [str(p) for p in all_problems if p.path == "wt_inject"]
        shape = [str(p) for p in shape_problems if p.path != "wt_inject"]
        if echo:
            self.add("FAIL", "inject.version_echo", "; ".join(echo))
        else:
            self.add("PASS", "inject.version_echo", f"wt_inject {PROTOCOL_VERSION} echoed")
        if shape:
            self.add("FAIL", "inject.shape", "; ".join(shape))
            return
        self.add("PASS", "inject.shape", f"reply ({len(data['reply'])} chars), tool_calls present "
                                         f"({len(data['tool_calls'])}), object arguments, error rules")
        self.inject_ok = not echo
        if data.get("error"):
            self.add("INFO", "inject.error", f"the greeting got an agent-level error {data['error']!r}: the recall "
                                             "checks below need replies to mean anything")

    def version_mismatch(self) -> None:
        """Optional behaviour: the spec pins the echo, not what an endpoint does with a version it does not speak."""
        name = "inject.version_mismatch"
        payload = {"wt_inject": MISMATCHED_VERSION, "session_id": new_session_id(), "text": "Hello.",
                   "timeout_s": self.rt.timeout_s}
        status, body = self.rt.post(INJECT, payload)
        if status != 200:
            self.add("PASS", name, f"rejected wt_inject {MISMATCHED_VERSION} with HTTP {status}")
            return
        try:
            echo = json.loads(body.decode("utf-8")).get("wt_inject")
        except (UnicodeDecodeError, ValueError, AttributeError):
            echo = None
        if echo == PROTOCOL_VERSION:
            self.add("PASS", name, f"answered wt_inject {MISMATCHED_VERSION} with its own version "
                                   f"{PROTOCOL_VERSION}: a newer driver sees the mismatch")
        elif echo == MISMATCHED_VERSION:
            self.add("INFO", name, f"accepted wt_inject {MISMATCHED_VERSION} and echoed it back: allowed, but a "
                                   "newer driver cannot tell this endpoint is older (reject versions you do not "
                                   "speak with HTTP 400, or echo the version you speak)")
        else:
            self.add("FAIL", name, f"answered 200 without a wt_inject echo (got {echo!r}): every response carries "
                                   "the protocol version")

    def reset_synchronous(self) -> None:
        name = "reset.synchronous"
        if not self._ready(name):
            return
        session, nonce = new_session_id(), str(uuid.uuid4())
        self.rt.inject(session, nonce_turn(nonce))
        self.rt.reset()
        probe = self._recall(session, nonce, RECALL_PROBES[:1])
        if probe is None:
            self.add("PASS", name, "the session was empty as soon as /wt/reset answered 200 (no leak observed)")
            return
        time.sleep(self.settle_s)
        if self._recall(session, nonce, RECALL_PROBES[1:]) is None:
            self.reset_async = True
            self.add("FAIL", name, f"/wt/reset answered 200 before the state was gone: the session still recalled "
                                   f"the nonce right after it, but not {self.settle_s:g} s later. The 200 is a "
                                   "completion signal: await every store (transcripts, caches, indexes) before "
                                   "answering")
        else:
            self.add("FAIL", name, "the session still recalled the nonce after /wt/reset answered 200 (and "
                                   f"{self.settle_s:g} s later): reset must destroy all bench-visible state before "
                                   "answering")

    def reset_total(self) -> None:
        name = "reset.total"
        if not self._ready(name):
            return
        sessions = {new_session_id(): str(uuid.uuid4()) for _ in range(2)}
        for session, nonce in sessions.items():
            self.rt.inject(session, nonce_turn(nonce))
        self.rt.reset()
        if self.reset_async:
            time.sleep(self.settle_s)  # judge totality alone; the asynchrony already failed reset.synchronous
        kept = [s for s, nonce in sessions.items() if self._recall(s, nonce, RECALL_PROBES[1:])]
        if kept:
            self.add("FAIL", name, f"{len(kept)} of 2 sessions still recalled their nonce after one /wt/reset: "
                                   "reset destroys the state of every session (there is no scope), derived state "
                                   "included")
        else:
            self.add("PASS", name, "both sessions were empty after one reset (no leak observed)")

    def reset_canary(self) -> None:
        """The spec's canary, verbatim: nonce in one session, reset, a new session, two recall probes."""
        name = "reset.canary"
        if not self._ready(name):
            return
        nonce = str(uuid.uuid4())
        self.rt.inject(new_session_id(), nonce_turn(nonce))
        self.rt.reset()
        probe = self._recall(new_session_id(), nonce)
        if probe is not None:
            self.add("FAIL", name, f"leak proven: after /wt/reset a new session answered {probe!r} with the nonce "
                                   f"{nonce}; some state (a transcript, cache or search index) survived the reset")
        else:
            self.add("PASS", name, "no leak observed (not proof of isolation)")

    def sessions_isolated(self) -> None:
        """Two back-to-back stateful sessions, no reset between them."""
        name = "sessions.isolated"
        if not self._ready(name, reset=False):
            return
        if self.reset_ok:
            self.rt.reset()
        nonce = str(uuid.uuid4())
        self.rt.inject(new_session_id(), nonce_turn(nonce))
        probe = self._recall(new_session_id(), nonce)
        if probe is not None:
            self.add("FAIL", name, f"leak proven: session B answered {probe!r} with the nonce injected into session "
                                   "A: key conversation state by session_id (derive a distinct per-session identity "
                                   "from it)")
        else:
            self.add("PASS", name, "no cross-session leak observed (not proof of isolation)")

    def surface(self) -> None:
        probe = self.rt.surface()
        if probe.status == "unavailable":
            self.add("SKIP", "surface", f"not implemented (conforming): {probe.detail}")
        elif probe.status == "invalid":
            self.add("FAIL", "surface", f"implemented but invalid: {probe.detail}")
        else:
            s = probe.surface
            assert s is not None
            self.add("PASS", "surface", f"reported {len(s.system_instructions)} system instruction part(s), "
                                        f"{len(s.tool_definitions)} tool definition(s), {len(s.extra_segments)} "
                                        "extra segment(s)")


def run_conformance(url: str | None = None, timeout_s: float | None = None, emit: Callable[[str], Any] = print,
                    settle_s: float = SETTLE_S) -> ConformanceReport:
    """Check the endpoint at `url` (default $WT_INJECT_URL, then :8647). Raises `RuntimeSpecError` on bad settings."""
    return Conformance(HttpInjectRuntime(url, timeout_s), emit, settle_s).run()
