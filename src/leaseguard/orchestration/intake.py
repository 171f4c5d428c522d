"""Intake: what stops new claims while a drain waits, and gives them back on every exit path.

A pg_cron job deactivated and recorded in cron.job (`CronJobsPause`), a command run on the
host (`CommandPause`), or several of them as one (`Intakes`). resume() undoes exactly what
pause() did, nothing an operator had paused by hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg

from leaseguard.adapters.pauses import (
    DEFAULT_QUIET_TIMEOUT_S,
    RESUME_HINT,
    Hold,
    hold_jobs,
    release_hold,
    wait_quiet,
)
from leaseguard.adapters.runtime import Runner
from leaseguard.core.errors import IntakeNotResumed, LeaseguardError, LookupFailed

log = logging.getLogger("leaseguard.drain")

# A resume that fails is retried for this long (PostgreSQL restarting, a tunnel being
# re-opened): long enough for a restart or a failover, short enough to be noticed.
DEFAULT_RESUME_RETRY_S = 60.0


class Intake(Protocol):
    """Stops new claims during the drain; resume() must undo exactly what pause() did."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def paused_intake(self) -> list[str]: ...


class CronJobsPause:
    """Hold named pg_cron jobs for an action, and let go of exactly this hold after it.

    A name that matches no job (or one this role cannot see) fails the hold before anything
    is switched: a mistyped name would leave intake running while the drain waits for it to
    stop. Holds are counted (`leaseguard.adapters.pauses`): a job comes back only when its
    last holder lets go, and each hold is recorded in cron.job in the same transaction, so a
    run killed before its release is named by the next run. After the pause, runs of the
    jobs already in progress are waited for: a pause stops new runs, not a running claim
    loop. The release is retried with backoff for `retry_s`, each attempt over a fresh
    path (tunnel included, through `connect`); if it still fails, the error names the held
    jobs and the command that gives them back.
    """

    def __init__(
        self,
        connect: Callable[[], AbstractContextManager[psycopg.Connection[Any]]],
        job_names: Sequence[str],
        *,
        by: str = "a leaseguard drain",
        action: str = "drain",
        retry_s: float = DEFAULT_RESUME_RETRY_S,
        resume_hint: str = RESUME_HINT,
        quiet_timeout_s: float = DEFAULT_QUIET_TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connect = connect
        self.job_names = list(job_names)
        self.by = by
        self.action = action
        self.retry_s = retry_s
        self.resume_hint = resume_hint
        self.quiet_timeout_s = quiet_timeout_s
        self.sleep = sleep
        self.clock = clock
        self.hold: Hold | None = None
        self.resumed: tuple[str, ...] = ()  # what the last release reactivated

    @property
    def paused(self) -> list[str]:
        return list(self.hold.jobs) if self.hold else []

    def paused_intake(self) -> list[str]:
        return [f"pg_cron:{name}" for name in self.paused]

    def pause(self) -> None:
        with self.connect() as conn:
            self.hold = hold_jobs(conn, self.job_names, self.by, self.action)
        for name in self.hold.switched:
            log.info("intake paused pg_cron job=%s by=%s", name, self.by)
        for name in set(self.hold.jobs) - set(self.hold.switched):
            log.info("intake held pg_cron job=%s (already held by another run)", name)
        for name in self.hold.not_held:
            log.warning(
                "pg_cron job %s was already inactive with no leaseguard hold (an operator's "
                "pause): not held by this run, so it will not be resumed by it",
                name,
            )
        wait_quiet(self.connect, self.hold, timeout_s=self.quiet_timeout_s)

    def adopt(self, hold: Hold) -> None:
        """Let go later of a hold another task took (the Ansible front's release task)."""
        self.hold = hold

    def resume(self) -> None:
        if self.hold is None or not self.hold.jobs:
            self.hold = None
            return
        give_up_at = self.clock() + self.retry_s
        delay = 0.5
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.connect() as conn:
                    released = release_hold(conn, self.hold)
                break
            except LeaseguardError as exc:
                if self.clock() + delay > give_up_at:
                    self._give_up(attempt, exc)
                log.warning(
                    "intake resume failed attempt=%d error=%s; retrying in %.1fs (until %.0fs "
                    "after the first attempt)",
                    attempt,
                    exc.kind,
                    delay,
                    self.retry_s,
                )
                self.sleep(delay)
                delay = min(delay * 2, 5.0)
        self.resumed = released.resumed
        for name in released.resumed:
            log.info("intake resumed pg_cron job=%s", name)
        for name, holders in released.still_held.items():
            log.info(
                "intake still held pg_cron job=%s by=%s (given back by its last holder)",
                name,
                "; ".join(holders),
            )
        self.hold = None

    def _give_up(self, attempts: int, exc: LeaseguardError) -> None:
        jobs = ", ".join(self.paused)
        message = (
            f"INTAKE STILL PAUSED: cannot resume pg_cron job(s) {jobs} after {attempts} "
            f"attempt(s) over {self.retry_s:g}s ({exc.kind}: {exc}); the hold is recorded "
            f"in cron.job; give it back with {self.resume_hint}"
        )
        log.error("%s", message)
        raise IntakeNotResumed(message) from None


class CommandPause:
    """Run a configured pause command on the host before waiting, and its resume after."""

    def __init__(self, runner: Runner, pause: Sequence[str], resume: Sequence[str]) -> None:
        self.runner = runner
        self.pause_argv = list(pause)
        self.resume_argv = list(resume)
        self.paused = False

    def paused_intake(self) -> list[str]:
        return [f"command:{self.runner.label}"] if self.paused else []

    def pause(self) -> None:
        self._run(self.pause_argv, "pause")
        self.paused = True

    def adopt(self) -> None:
        """Give back later a pause another task made (the Ansible front's release task)."""
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self._run(self.resume_argv, "resume")
            self.paused = False

    def _run(self, argv: list[str], what: str) -> None:
        result = self.runner.run(argv)
        if result.exit_code != 0:
            raise LookupFailed(
                f"host {self.runner.label}: intake {what} command exited {result.exit_code}"
            )
        log.info("intake %s command ran host=%s", what, self.runner.label)


class Intakes:
    """Several intake pauses as one: resumed in reverse order, each attempted."""

    def __init__(self, parts: Sequence[Intake], *, held: bool = False) -> None:
        """`held`: the parts already hold (adopted from another task); resume() gives back."""
        self.parts = list(parts)
        self.active: list[Intake] = list(parts) if held else []

    def paused_intake(self) -> list[str]:
        return [name for part in self.active for name in getattr(part, "paused_intake", list)()]

    def pause(self) -> None:
        for part in self.parts:
            # Listed first: a part interrupted half way (held, then a signal while waiting
            # for intake to be quiet) must still be given back; resume() of a part that
            # holds nothing does nothing.
            self.active.append(part)
            part.pause()

    def resume(self) -> None:
        failures: list[LeaseguardError] = []
        while self.active:
            part = self.active.pop()
            try:
                part.resume()
            except LeaseguardError as exc:
                failures.append(exc)
                log.error("intake resume failed error=%s reason=%s", exc.kind, exc)
        if failures:
            raise failures[0]
