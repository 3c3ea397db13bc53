"""`wt-otel conformance`: check an endpoint against Contract C, one line per check.

The checks are the spec's conformance list (0002-inject-protocol.md,
"Conformance and ratification"): inject shapes and the version echo, reset
synchronous / total / idempotent, the reset canary exactly as the spec words
it, two stateful sessions isolated, and `/wt/surface` when implemented.

Beyond the wire, the spec's conformance list asks for the failure paths and the
runtime checklist, so the suite also sends a turn with a short `timeout_s`
(`inject.timeout_s`: an in-contract error envelope must come back in time; an
endpoint that ignores its deadline fails), and, given a scenario (`--scenario
DIR`, served like `wt-otel run` serves it), makes its tools answer past that
deadline, makes its model fail (`inject.error_path`: the cassette answers every
request with an error; the endpoint must answer 200 with `error` set, never a
made-up reply), and runs it through the universe (`runtime.must_call`). The
reset canary is paired with a state probe (`--state-probe MODULE:ATTR`, called
with the nonce after the reset; it returns where the nonce still sits, empty
when the stores are clean).

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
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wt_otel.contracts.cassette import load_cassette
from wt_otel.contracts.inject import INJECT, PROTOCOL_VERSION, ContractViolation, TurnResult, validate_inject_response
from wt_otel.contracts.perturbation import Perturbation
from wt_otel.replay.cassette import CassetteReplay
from wt_otel.replay.runtimes import HttpInjectRuntime, clip_body, new_session_id
from wt_otel.replay.scenarios import LoadedScenario

DEADLINE_S = 2.0  # timeout_s of the deadline check: short, so an endpoint that ignores it shows quickly
StateProbe = Callable[[str], Any]

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
                 settle_s: float = SETTLE_S, *, deadline_s: float = DEADLINE_S,
                 scenario: LoadedScenario | None = None, state_probe: StateProbe | None = None,
                 universe_port: int | None = None, llm_port: int | None = None) -> None:
        self.rt = runtime
        self.emit = emit
        self.settle_s = settle_s
        self.deadline_s = deadline_s
        self.scenario = scenario
        self.state_probe = state_probe
        self.universe_port, self.llm_port = universe_port, llm_port
        self.servers: Any = None  # the scenario's universe (and cassette) while the checks run
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
            ("inject.timeout_s", self.deadline),
            ("inject.error_path", self.error_path),
            ("runtime.must_call", self.must_call),
        ]
        if self.scenario is not None:  # served for the whole run: every reset tells the agent these URLs
            from wt_otel.replay.runner import ServeFailed, replay_urls

            try:
                self.servers = self._servers()
                self.servers.start()
            except ServeFailed as exc:  # a port given with --universe-port/--llm-port is taken
                self.servers = None
                self.add("FAIL", "scenario", f"{self.scenario.path}: {exc}")
                self.add("INFO", "result", "NOT conforming: the scenario's fixtures could not be served")
                return self.report
            self.rt.replay_urls.update(replay_urls(self.servers))
            self.add("INFO", "scenario", f"{self.scenario.path}: universe at {self.servers.universe_url}"
                                         + (f", cassette at {self.servers.llm_url}" if self.servers.llm_url else "")
                                         + " (sent in every /wt/reset as universe_url, llm_base_url)")
        try:
            for name, check in checks:
                self._guarded(name, check)
        except _Unreachable:
            self.add("SKIP", "remaining checks", "the endpoint is unreachable")
        else:
            with contextlib.suppress(ContractViolation):
                self.rt.reset()  # leave the endpoint as clean as we found it; not a check
        finally:
            self._stop_servers()
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
        self._state_probe(nonce)
        probe = self._recall(new_session_id(), nonce)
        if probe is not None:
            self.add("FAIL", name, f"leak proven: after /wt/reset a new session answered {probe!r} with the nonce "
                                   f"{nonce}; some state (a transcript, cache or search index) survived the reset")
        else:
            self.add("PASS", name, "no leak observed (not proof of isolation)")

    def _state_probe(self, nonce: str) -> None:
        """The spec's pairing: after the canary's reset, inspect the stores directly for the nonce."""
        name = "reset.state_probe"
        if self.state_probe is None:
            self.add("SKIP", name, "no --state-probe MODULE:ATTR given (for a stateful backend, pair the canary "
                                   "with a probe that looks for the nonce in the stores themselves)")
            return
        try:
            found = self.state_probe(nonce)
        except Exception as exc:
            self.add("FAIL", name, f"the state probe raised {type(exc).__name__}: {exc}")
            return
        if found:
            where = ", ".join(map(str, found)) if isinstance(found, list | tuple | set) else str(found)
            self.add("FAIL", name, f"leak proven: after /wt/reset the state probe still found the nonce in: {where}")
        else:
            self.add("PASS", name, "the state probe found no trace of the nonce in the stores after /wt/reset")

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


    # ------------------------------------------------------------ failure paths and the runtime checklist

    def _servers(self) -> Any:
        """The scenario's universe (and cassette) served as `wt-otel run` serves them."""
        from wt_otel.replay.runner import RunOptions, ScenarioServers

        loaded = self.scenario
        assert loaded is not None
        options = RunOptions(runtime=self.rt, llm="replay" if loaded.cassette is not None else "live",
                             universe_port=self.universe_port, llm_port=self.llm_port, emit=lambda line: None)
        return ScenarioServers(loaded, options)

    def _stop_servers(self) -> None:
        if self.servers is not None:
            self.servers.stop()
            self.servers = None
            self.rt.replay_urls.clear()  # nothing listens there any more

    def deadline(self) -> None:
        """A short timeout_s must come back as an in-contract answer before timeout_s + grace: an endpoint that
        ignores its deadline leaves the driver's transport to time out, which the spec forbids."""
        name = "inject.timeout_s"
        if not self._ready(name, reset=False):
            return
        short = HttpInjectRuntime(self.rt.base, self.deadline_s, grace_s=self.rt.grace_s, version=self.rt.version)
        text = "Hello! Please reply briefly."
        engine = self.servers.universe.engine if self.servers is not None else None
        if engine is not None and self.scenario is not None and self.scenario.scenario is not None:
            text = self.scenario.scenario.user_turns[0]
            engine.perturbation = Perturbation(kind="slow", tool="*", delay_s=self.deadline_s + self.rt.grace_s + 1)
            self.servers.rewind()
        try:
            started = time.perf_counter()
            try:
                result = short.inject(new_session_id(), text)
            except ContractViolation as exc:
                if exc.rule == "timeout":
                    self.add("FAIL", name, f"ignores timeout_s: sent timeout_s {self.deadline_s:g} and got no response "
                                           f"within {short.transport_timeout_s:g} s (+ the {self.rt.grace_s:g} s "
                                           "grace). Enforce timeout_s and answer 200 with an error envelope when it "
                                           "expires")
                else:
                    self.add("FAIL", name, f"a turn under a short deadline broke the contract: {exc}")
                return
            elapsed = time.perf_counter() - started
            held = engine is not None and bool(engine.call_log())
        finally:
            if engine is not None:
                engine.perturbation = None
        if result.error:
            self.add("PASS", name, f"timeout_s {self.deadline_s:g}: an agent-level error envelope came back in "
                                   f"{elapsed:.1f} s ({result.error!r})")
        elif elapsed > self.deadline_s:
            self.add("FAIL", name, f"answered {elapsed:.1f} s after a timeout_s of {self.deadline_s:g} s without an "
                                   "error: the endpoint ignores its deadline (when it expires, answer with \"error\" "
                                   "set instead of finishing the turn)")
        elif held:
            self.add("FAIL", name, f"the scenario's tools were held past the {self.deadline_s:g} s deadline, yet a "
                                   "reply came in time without an error: a reply made without the tools' answers")
        else:
            self.add("INFO", name, f"answered within timeout_s {self.deadline_s:g} s, so its expiry was not provoked "
                                   "(give --scenario DIR: its tools are then held past the deadline)")

    def error_path(self) -> None:
        """The agent's own failure (its model errors) must be a 200 envelope with `error` set."""
        name = "inject.error_path"
        cassette = self.servers.cassette if self.servers is not None else None
        if cassette is None or self.scenario is None or self.scenario.cassette is None:
            self.add("SKIP", name, "needs --scenario DIR with an llm.cassette.json, and the agent's model pointed at "
                                   "the cassette URL (the cassette then answers every request with an error)")
            return
        if not self._ready(name):
            return
        assert self.scenario.scenario is not None
        normal = cassette.replay
        cassette.replay = CassetteReplay(failing_cassette(self.scenario.cassette.to_dict()), normal.match)
        try:
            self.rt.reset()
            result = self.rt.inject(new_session_id(), self.scenario.scenario.user_turns[0])
            asked = len(cassette.call_log())
        finally:
            cassette.replay = normal
        if not asked:
            self.add("FAIL", name, f"the agent never asked the model at {self.servers.llm_url}: point its model at "
                                   "the cassette URL (the error path could not be provoked)")
        elif result.error:
            self.add("PASS", name, f"the model failed and the endpoint answered 200 with error {result.error!r}")
        else:
            self.add("FAIL", name, "the model failed, yet the endpoint answered a reply without error: an agent-level "
                                   "failure is 200 with \"error\" set (and the calls made before it), never a made-up "
                                   f"reply (got {result.reply[:80]!r})")

    def must_call(self) -> None:
        """The runtime checklist: a must_call scenario passes through the served universe."""
        name = "runtime.must_call"
        loaded = self.scenario
        if loaded is None or loaded.scenario is None:
            self.add("SKIP", name, "needs --scenario DIR: a scenario with must_call and its universe, the agent "
                                   "pointed at the universe URL")
            return
        if not loaded.scenario.must_call:
            self.add("SKIP", name, f"{loaded.path}: the scenario declares no must_call")
            return
        from wt_otel.replay.runner import RunOptions, Sweep

        self._stop_servers()  # the sweep serves the scenario itself (and sends the URLs with each reset)
        with tempfile.TemporaryDirectory(prefix="wt-conformance-") as runs_dir:
            options = RunOptions(runtime=self.rt, runs_dir=Path(runs_dir), runs=1, ledger=False,
                                 llm="replay" if loaded.cassette is not None else "live",
                                 universe_port=self.universe_port, llm_port=self.llm_port, emit=lambda line: None)
            sweep = Sweep(options).run([loaded])
        record = sweep.record.scenarios[0] if sweep.record else None
        score = record.scores[0] if record and record.scores else None
        trajectory = score.layers.get("trajectory") if score else None
        if record is None or score is None or trajectory is None or record.verdict in ("ERROR", "INVALID"):
            detail = record.detail if record else "no run"
            self.add("FAIL", name, f"the scenario did not run cleanly: {record.verdict if record else 'ERROR'}: "
                                   f"{detail}")
        elif trajectory.passed:
            self.add("PASS", name, f"{', '.join(loaded.scenario.must_call)} called through the served universe")
        else:
            self.add("FAIL", name, trajectory.detail)


def failing_cassette(data: dict[str, Any]) -> Any:
    """The cassette with every recorded call turned into a server error: the model fails whatever is asked."""
    for entry in data.get("traces", {}).values():
        calls = entry.get("calls") or [entry]
        for call in calls:
            call["response_timeline"] = []
            call["exception_boundary"] = {"occurred": True, "error_type": "InternalServerError",
                                          "message": "wt-otel conformance: the model fails on purpose"}
    return load_cassette(data)


def run_conformance(url: str | None = None, timeout_s: float | None = None, emit: Callable[[str], Any] = print,
                    settle_s: float = SETTLE_S, *, deadline_s: float = DEADLINE_S,
                    scenario: LoadedScenario | None = None, state_probe: StateProbe | None = None,
                    universe_port: int | None = None, llm_port: int | None = None,
                    grace_s: float | None = None) -> ConformanceReport:
    """Check the endpoint at `url` (default $WT_INJECT_URL, then :8647). Raises `RuntimeSpecError` on bad settings."""
    runtime = HttpInjectRuntime(url, timeout_s) if grace_s is None else HttpInjectRuntime(url, timeout_s,
                                                                                          grace_s=grace_s)
    return Conformance(runtime, emit, settle_s, deadline_s=deadline_s, scenario=scenario, state_probe=state_probe,
                       universe_port=universe_port, llm_port=llm_port).run()
