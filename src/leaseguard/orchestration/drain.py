"""Drain: hold intake, wait until no live lease remains, give intake back on every exit path.
The deadline is at most the longest lease seen at the start: past it, rows are the reaper's."""

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, TextIO

from leaseguard.core import errors
from leaseguard.core.verdict import Decision, Verdict, failure_result, timeline_line
from leaseguard.orchestration.intake import Intakes, intake_line

log = logging.getLogger("leaseguard.drain")


@dataclass
class DrainCounters:
    polls: int = 0
    idle_polls: int = 0
    live_count_changes: int = 0
    leases_ended: int = 0
    claims_appeared: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        return {**{n: getattr(self, n) for n in COUNTER_NAMES}, "errors": dict(self.errors)}


COUNTER_NAMES = tuple(f.name for f in fields(DrainCounters) if f.name != "errors")


@dataclass(frozen=True)
class DrainResult:
    """Where a drain stands or ended; error None: drained, or deadline reached."""

    verdict: Verdict | None
    counters: DrainCounters
    elapsed_s: float
    deadline_s: float
    error: errors.LeaseguardError | None = None
    intake: tuple[str, ...] | None = None
    action: "ActionOutcome | None" = None

    @property
    def drained(self) -> bool:
        return self.error is None and self.verdict is not None and not self.verdict.counts.live

    @property
    def exit_status(self) -> int:
        if self.error is not None:
            return errors.EXIT_FAILED
        if self.action is not None:
            return self.action.exit_status
        return errors.EXIT_PROCEED if self.drained else errors.EXIT_DEFER

    @property
    def decision(self) -> Decision:
        if self.drained:
            return Decision.PROCEED
        return Decision.FAILED if self.error is not None else Decision.DEFER

    def as_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value,
            "drained": self.drained,
            "elapsed_s": round(self.elapsed_s, 3),
            "deadline_s": round(self.deadline_s, 3),
            "counters": self.counters.snapshot(),
            "verdict": self.verdict.as_dict() if self.verdict else None,
            "error": {"type": self.error.kind, "message": str(self.error)} if self.error else None,
            "intake": {"held": self.intake is not None, "what": list(self.intake or ())},
            "action": asdict(self.action) if self.action else None,
        }


@dataclass(frozen=True)
class ActionOutcome:
    exit_status: int
    description: str


Action = Callable[[DrainResult], ActionOutcome]  # run once drained, before intake is given back


def hms(seconds: float) -> str:  # H:MM:SS
    seconds = max(int(seconds), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class TerminalProgress:
    """One self-overwriting line: bar of the deadline used, live count, longest lease."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.drawn = stream, False

    def update(self, verdict: Verdict, elapsed_s: float, deadline_s: float) -> None:
        filled = int((min(elapsed_s / deadline_s, 1.0) if deadline_s > 0 else 1.0) * 24)
        longest = verdict.live[0].remaining_s if verdict.live else 0.0
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (24 - filled)}] host={verdict.host or '-'} "
            f"live={verdict.counts.live} longest_lease={hms(longest or 0)} "
            f"elapsed={hms(elapsed_s)}/{hms(deadline_s)}"
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class Drainer:
    """The drain loop over any `judge` (a session's, or a fake in unit tests)."""

    judge: Callable[[], Verdict]
    poll_s: float
    deadline_s: float | None = None
    progress: TerminalProgress | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] | None = None  # None: wait on `stop`, which a signal ends
    counters: DrainCounters = field(default_factory=DrainCounters)
    observer: Any = None  # the status board's: after every poll, and at the end
    stop: threading.Event = field(default_factory=threading.Event)
    label: str = "-"  # the host (or the fleet) in lines logged before any verdict
    started: float | None = None  # a fleet's start: a host begun late keeps the fleet's deadline

    def run(self, intake: Intakes | None = None, act: Action | None = None) -> DrainResult:
        """Hold intake from before the first verdict until `act` (run if drained) returned."""
        result: DrainResult | None = None
        try:
            result = self._drain(intake, act)
            return result
        finally:
            if self.observer is not None:
                self.observer.finished(result, stopped=self.stop.is_set())

    def _drain(self, intake: Intakes | None, act: Action | None) -> DrainResult:
        if self.stop.is_set():  # stopped before anything was paused
            return DrainResult(None, self.counters, 0.0, 0.0, self._interrupted())
        started, held = self.clock() if self.started is None else self.started, None

        def state(verdict: Verdict | None, deadline: float, error: Any = None) -> DrainResult:
            elapsed = self.clock() - started
            return DrainResult(verdict, self.counters, elapsed, deadline, error, held)

        def observed(verdict: Verdict | None, deadline: float) -> None:
            if self.observer is not None:
                self.observer.after_poll(state(verdict, deadline))

        try:
            if intake is not None:
                intake.pause()
                held = tuple(intake.paused_intake())
                if self.stop.is_set():  # a signal while waiting for intake to be quiet
                    raise self._interrupted()
            try:
                verdict = self._poll()
            except errors.LeaseguardError:
                observed(None, 0.0)
                raise
            late_s = 0.0 if self.started is None else self.clock() - started
            ends = verdict.wait_upper_bound_s + late_s
            deadline = ends if self.deadline_s is None else min(ends, self.deadline_s)
            observed(verdict, deadline)
            log.info(
                f"drain host={verdict.host or '-'} start live={verdict.counts.live} "
                f"deadline_s={deadline:.0f} {intake_line(held)}"
            )
            # Polls failing for a tenth of the deadline (3 polls at least) end it, not a blip.
            budget, failing_since = max(2 * self.poll_s, 0.1 * deadline), None
            while verdict.counts.live and (elapsed := self.clock() - started) < deadline:
                if self.progress is not None:
                    self.progress.update(verdict, elapsed, deadline)
                wait = min(self.poll_s, deadline - elapsed)
                (self.stop.wait if self.sleep is None else self.sleep)(wait)
                if self.stop.is_set():
                    return state(verdict, deadline, self._interrupted())
                try:
                    verdict = self._next(verdict)
                    failing_since = None
                except errors.LeaseguardError as exc:
                    now = self.clock()
                    failing_since = now if failing_since is None else failing_since
                    if now - failing_since >= budget:
                        return state(verdict, deadline, exc)
                finally:
                    observed(verdict, deadline)
            result = state(verdict, deadline)
            log.info(
                f"drain host={verdict.host or '-'} "
                f"{'drained' if result.drained else 'deadline reached'} "
                f"live={verdict.counts.live} elapsed_s={result.elapsed_s:.1f}"
            )
            if self.stop.is_set():  # a signal during the last poll
                return replace(result, error=self._interrupted())
            if act is not None and result.drained:
                if intake is not None:  # held all along, up to now: else the action waits
                    intake.verify()
                result = replace(result, action=act(result))
            return result
        except errors.LeaseguardError as exc:  # the pause, first poll or action failed; a signal
            return state(None, 0.0, exc)
        finally:
            if intake is not None:
                intake.resume()
            if self.progress is not None:
                self.progress.close()
            counters = self.counters.snapshot().items()
            log.info("drain counters %s", " ".join(f"{k}={v}" for k, v in counters))

    def _interrupted(self) -> errors.DrainInterrupted:
        return errors.DrainInterrupted(f"{self.label}: drain interrupted by a signal")

    def _poll(self) -> Verdict:
        self.counters.polls += 1
        try:
            return self.judge()
        except errors.LeaseguardError as exc:
            self.counters.errors[exc.kind] += 1
            log.warning("drain poll failed host=%s error=%s reason=%s", self.label, exc.kind, exc)
            raise
        except Exception as exc:
            # Not one of ours: its text may carry a DSN or a password; only the class name.
            kind = type(exc).__name__
            self.counters.errors[kind] += 1
            log.warning("drain poll failed reason=drain_poll_failed exc_type=%s", kind)
            raise errors.PollFailed(f"drain poll failed unexpectedly ({kind})") from None

    def _next(self, before: Verdict) -> Verdict:
        after = self._poll()
        was, now = {c.id for c in before.live}, {c.id for c in after.live}
        ended, appeared = was - now, now - was
        if before.counts.live == after.counts.live and not ended and not appeared:
            self.counters.idle_polls += 1
            log.debug("drain poll idle live=%d", after.counts.live)
            return after
        self.counters.live_count_changes += before.counts.live != after.counts.live
        self.counters.leases_ended += len(ended)
        self.counters.claims_appeared += len(appeared)
        change = f"live {before.counts.live} -> {after.counts.live}"
        gone, new = (",".join(sorted(ids)[:10]) or "-" for ids in (ended, appeared))
        log.info(f"drain host={after.host or '-'} {change} ended={gone} appeared={new}")
        return after


def failure_output(error: Exception, host: str, *, as_json: bool, fab: bool) -> str:
    """Fail closed: the failure's line (Fabric's with its reason) or JSON (the CLI's dated)."""
    now = datetime.now(UTC)
    if as_json:
        return json.dumps(failure_result(error, host, None if fab else now))
    line = timeline_line(now, host, Decision.FAILED, f"error={type(error).__name__}")
    return f"{line} reason={json.dumps(str(error))}" if fab else line


def print_drain(
    result: DrainResult, host: str, say: Callable[[str], None], *, as_json: bool, fab: bool
) -> None:
    """Line or JSON on stdout, the rest said; a failed drain: its failure, never a stale verdict."""
    verdict, error, done = result.verdict, result.error, result.action
    said = [f"drain failed: {error}"] if error is not None and not fab else []
    if as_json:
        out = result.as_dict()
        if verdict is not None and error is None:  # the keys `check --json` prints, at the top
            out = {**verdict.as_dict(), **out}
        print(json.dumps({"host": host} | out | {"host": host} if fab else out))  # -H name wins
    else:
        if error is not None:
            print(failure_output(error, host, as_json=False, fab=fab))
        elif verdict is not None:
            print(verdict.timeline())
        action = [f"{done.description}; {intake_line(result.intake)}"] if done else []
        warned = [f"warning: {w}" for w in (verdict.warnings if verdict else ())]
        said = warned + action if fab else action + said + warned
    for line in said:
        say(line)
