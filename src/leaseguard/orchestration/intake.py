"""Intake: what stops new claims while a drain or an action waits, given back on every exit;
resume() undoes exactly what pause() did, nothing an operator paused by hand."""

import itertools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from leaseguard.adapters import pauses
from leaseguard.adapters.db import Connection, connect
from leaseguard.adapters.runtime import Runner
from leaseguard.core.errors import IntakeLost, IntakeNotResumed, LeaseguardError, LookupFailed

log = logging.getLogger("leaseguard.drain")
CronConnect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]  # pg_cron's database


@dataclass(frozen=True)
class IntakeAccess:
    """Where and as whom pg_cron jobs are held; `owner`, `own_holds`: this run's, no leftovers."""

    database: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    owner: str | None = None
    own_holds: tuple[str, ...] = ()

    def leftovers(self, conn: Connection, connect: Callable[[], Connection]) -> tuple[str, ...]:
        """Warnings for holds left recorded, read on `conn` unless in another database or role."""
        if self.database is None and self.user is None:
            found = pauses.leftover_warnings(conn, exclude_by=self.owner, own=self.own_holds)
        else:  # the jobs in another database, or seen by their owner alone
            found = pauses.scan_leftovers(connect, exclude_by=self.owner, own=self.own_holds)
        return tuple(found)


@dataclass(eq=False)
class CronJobsPause:
    """Hold named pg_cron jobs (runs already going waited for); resume retried for `retry_s`."""

    connect: CronConnect
    job_names: Sequence[str]
    retry_s: float
    by: str = "a leaseguard drain"
    action: str = "drain"
    resume_hint: str = pauses.RESUME_HINT
    quiet_timeout_s: float = pauses.DEFAULT_QUIET_TIMEOUT_S
    stop: threading.Event | None = None  # a drain's: a signal ends the wait for quiet
    holder: int = field(default_factory=os.getpid)  # the process the hold lasts for
    hold: pauses.Hold | None = None
    resumed: tuple[str, ...] = field(default=(), init=False)  # what the last release gave back

    def paused_intake(self) -> list[str]:
        return [f"pg_cron:{name}" for name in (self.hold.jobs if self.hold else ())]

    def pause(self) -> None:
        with self.connect() as conn:
            self.hold = pauses.hold_jobs(conn, self.job_names, self.by, self.action, self.holder)
        for name in self.hold.switched:
            log.info("intake paused pg_cron job=%s by=%s", name, self.by)
        for name in set(self.hold.jobs) - set(self.hold.switched):
            log.info("intake held pg_cron job=%s (already held by another run)", name)
        for name in self.hold.not_held:
            log.warning(
                f"pg_cron job {name} was already inactive with no leaseguard hold (an operator's "
                "pause): not held by this run, so it will not be resumed by it"
            )
        pauses.wait_quiet(self.connect, self.hold, timeout_s=self.quiet_timeout_s, stop=self.stop)

    def verify(self) -> None:
        """A held job switched back on (or re-created) since the hold: the action must not run."""
        if self.hold is None or not self.hold.jobids:
            return
        with self.connect() as conn:
            lost = pauses.lost_jobs(conn, self.hold)
        if lost:
            raise IntakeLost(
                f"intake no longer held: pg_cron job(s) {', '.join(lost)} active again "
                "(switched back on, or deleted and re-created, by something other than this "
                "run while it held them); a claim may have been taken since the verdict, so "
                "the action did not run. Find what re-activated them, then run again"
            )

    def resume(self) -> None:
        if self.hold is None or not self.hold.jobs:
            self.hold = None
            return
        give_up_at, delay = time.monotonic() + self.retry_s, 0.5
        for attempt in itertools.count(1):
            try:
                with self.connect() as conn:
                    resumed, still_held = pauses.release_hold(conn, self.hold)
                break
            except LeaseguardError as exc:
                if time.monotonic() + delay > give_up_at:
                    message = (
                        f"INTAKE STILL PAUSED: cannot resume pg_cron job(s) "
                        f"{', '.join(self.hold.jobs)} after {attempt} attempt(s) over "
                        f"{self.retry_s:g}s ({exc.kind}: {exc}); the hold is recorded in "
                        f"cron.job; give it back with {self.resume_hint}"
                    )
                    log.error("%s", message)
                    raise IntakeNotResumed(message) from None
                log.warning(
                    f"intake resume failed attempt={attempt} error={exc.kind}; retrying in "
                    f"{delay:.1f}s (until {self.retry_s:.0f}s after the first attempt)"
                )
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        self.resumed = resumed
        for name in resumed:
            log.info("intake resumed pg_cron job=%s", name)
        for name, holders in still_held.items():
            why = "(given back by its last holder)"
            log.info("intake still held pg_cron job=%s by=%s %s", name, "; ".join(holders), why)
        self.hold = None


@dataclass(eq=False)
class CommandPause:
    runner: Runner
    pause_argv: Sequence[str]
    resume_argv: Sequence[str]
    paused: bool = False  # True: given back by resume() (set for a pause another task made)

    def paused_intake(self) -> list[str]:
        return [f"command:{self.runner.label}"] if self.paused else []

    def pause(self) -> None:
        # Before it runs: a pause command that fails (or times out) half way may have stopped
        # part of the intake, so its resume command runs on every exit path all the same.
        self.paused = True
        if (code := self.runner.run(list(self.pause_argv)).exit_code) != 0:
            raise LookupFailed(f"host {self.runner.label}: intake pause command exited {code}")
        log.info("intake pause command ran host=%s", self.runner.label)

    def verify(self) -> None:
        pass  # a command's pause cannot be read back

    def resume(self) -> None:
        if not self.paused:
            return
        if (code := self.runner.run(list(self.resume_argv)).exit_code) != 0:
            raise IntakeNotResumed(  # named so no front says "resumed"
                f"INTAKE STILL PAUSED: the resume command exited {code} on host "
                f"{self.runner.label}; run it by hand"
            )
        log.info("intake resume command ran host=%s", self.runner.label)
        self.paused = False


Part = CronJobsPause | CommandPause  # each: pause, verify (still held), resume, paused_intake


class Intakes:
    """Several intake pauses as one (`held`: already held), resumed in reverse, each attempted."""

    def __init__(self, parts: Sequence[Part], *, held: bool = False) -> None:
        self.parts = list(parts)
        self.active: list[Part] = list(parts) if held else []

    def paused_intake(self) -> list[str]:
        return [name for part in self.active for name in part.paused_intake()]

    def verify(self) -> None:
        for part in self.active:
            part.verify()

    def pause(self) -> None:
        for part in self.parts:
            self.active.append(part)  # first: a part interrupted half way is still given back
            part.pause()

    def resume(self) -> None:
        failure: LeaseguardError | None = None
        for part in reversed(self.active.copy()):
            try:
                part.resume()
                self.active.remove(part)
            except LeaseguardError as exc:  # still paused: it stays listed (status, metrics)
                failure = failure or exc
                log.error("intake resume failed error=%s reason=%s", exc.kind, exc)
        if failure is not None:
            raise failure


def verify_holds(connect: CronConnect, holds: Sequence[Mapping[str, Any] | None]) -> None:
    """Fail if a pg_cron job of a caller's hold (intake_hold's `hold`) is active again."""
    for cron_hold in (hold["cron"] for hold in holds if hold and hold.get("cron")):
        CronJobsPause(connect, (), retry_s=0, hold=pauses.Hold.from_dict(cron_hold)).verify()


def intake_line(held: tuple[str, ...] | None) -> str:
    if held is None:
        return (
            "intake: not held (no intake configured: nothing stops new claims between the "
            "verdict and the action)"
        )
    return f"intake: held ({', '.join(held) or 'nothing left active to pause'})"


def intake_hold(
    state: str,
    *,
    cron_path: Callable[[], AbstractContextManager[str]],
    runner: Runner,
    pause_cron_jobs: Sequence[str],
    pause_command: Sequence[str],
    resume_command: Sequence[str],
    hold: Mapping[str, Any] | None,
    action: str,
    cron_database: str | None,
    connect_timeout_s: int,
    resume_retry_s: float,
    quiet_timeout_s: float,
    resume_hint: str,
) -> dict[str, Any]:
    """ "held": take the hold (the result's ``hold``); "released": let go of exactly `hold`."""

    @contextmanager
    def cron_connection() -> Iterator[psycopg.Connection[Any]]:
        with (
            cron_path() as conninfo,
            connect(conninfo, connect_timeout_s, writable=True, dbname=cron_database) as conn,
        ):
            yield conn

    playbook = os.getppid()  # the hold lasts while ansible-playbook (this worker's parent) runs
    by = pauses.drain_identity(f"ansible-playbook {action}", playbook)
    cron = CronJobsPause(
        cron_connection, pause_cron_jobs, resume_retry_s, by, action, resume_hint, quiet_timeout_s
    )
    cron.holder = playbook
    command = CommandPause(runner, pause_command, resume_command)
    if state != "held":
        hold = hold or {}
        cron.hold = pauses.Hold.from_dict(hold["cron"]) if hold.get("cron") else None
        command.paused = bool(hold.get("command") and resume_command)
        intake = Intakes([cron, command], held=True)
        given_back = intake.paused_intake()
        intake.resume()  # every part attempted, in reverse; the first failure raised
        return {
            "changed": bool(given_back),
            "released": given_back,
            "resumed": list(cron.resumed),
            "msg": "intake given back",
        }
    parts = [part for part, on in ((cron, pause_cron_jobs), (command, pause_command)) if on]
    if not parts:
        return {"changed": False, "hold": None, "msg": intake_line(None)}
    intake = Intakes(parts)
    try:
        intake.pause()
    except BaseException:
        intake.resume()  # what was taken before the failure; then the failure itself
        raise
    what, held = intake.paused_intake(), cron.hold.as_dict() if cron.hold else None
    return {
        "changed": bool(what),
        "hold": {"cron": held, "command": bool(pause_command), "what": what},
        "paused": list(cron.hold.switched) if cron.hold else [],
        "msg": intake_line(tuple(what)),
    }


def resume_pauses(
    conninfo: str,
    access: IntakeAccess,
    *,
    jobs: Sequence[str] | None = None,
    connect_timeout_s: int = 10,
    check_mode: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """What was recorded, resumed, vanished, kept (a live holder's, unless `force`)."""
    who: dict[str, Any] = dict(dbname=access.database, user=access.user, password=access.password)
    with connect(conninfo, connect_timeout_s, writable=True, **who) as conn:
        if check_mode:  # what the run would give back, and keep (or fail, as the run would)
            found, keeps = pauses.resumable(conn, jobs, force=force)
            would_keep = [{**record.as_dict(), "reason": why} for record, why in keeps]
            return {"records": [r.as_dict() for r in found], "resumed": [], "kept": would_keep}
        return pauses.resume_recorded(conn, jobs, force=force)


def resume_lines(outcome: dict[str, Any]) -> str:
    """One timeline line per recorded job: what `resume` did with it."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kept = outcome.get("kept", [])
    if not outcome["records"] and not kept:
        return (
            f"{stamp} leaseguard resume recorded=0 (no hold recorded that role "
            f"{outcome.get('role')} can see in database {outcome.get('database')}; pg_cron shows "
            "each role only its own jobs: run as the intake jobs' owner, --cron-user)"
        )
    lines = []
    advice = ": its action may still be running; once it is gone, give it back with --force"
    for record in [*outcome["records"], *kept]:  # only a kept record has a reason
        job, states = record["job"], ("resumed", "already_active", "missing", "replaced")
        state = next((k for k in states if job in outcome[k]), "still_held")
        reason = f" reason={json.dumps(record['reason'] + advice)}" if "reason" in record else ""
        lines.append(
            f"{stamp} leaseguard resume job={job} state={'kept' if reason else state} "
            f"paused_at={record['paused_at']} by={record['by'].replace(' ', '_')}{reason}"
        )
    return "\n".join(lines)
