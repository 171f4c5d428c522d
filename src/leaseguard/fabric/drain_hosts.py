"""What `fab drain` runs: each host drained on its own, or the fleet drained as one."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from dataclasses import dataclass, replace
from typing import Any

from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.adapters.clock import offset_from_here
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.errors import (
    EXIT_FAILED,
    EXIT_PROCEED,
    EXIT_USAGE,
    ConfigError,
    LeaseguardError,
)
from leaseguard.core.verdict import failure_result
from leaseguard.fabric.drain_task import DrainFlags
from leaseguard.fabric.fleet import (
    exit_with,
    failure_line,
    fleet_hosts,
    for_each_host,
    say,
    worst_status,
)
from leaseguard.fabric.settings import FabricSettings, connection_to, settings_or_exit
from leaseguard.orchestration.drain import Action, ActionOutcome, DrainResult
from leaseguard.orchestration.drain_options import DrainOptions, drain_options
from leaseguard.orchestration.drain_run import (
    configure_logging,
    drain_host,
    first_that_connects,
    signals_set,
    status_board,
)
from leaseguard.orchestration.drain_status import StatusBoard
from leaseguard.orchestration.progress import progress_for
from leaseguard.orchestration.session import GuardSession, fleet_session
from leaseguard.orchestration.ssh_session import ssh_session

RESUME_HINT = "`fab -H <any host of the drain> resume` (same fabric.yaml)"

# A host's (or the fleet's) exit status and, with --json, its object in the printed list.
Report = tuple[int, dict[str, Any] | None]


def drain_hosts(c: Context, flags: DrainFlags) -> None:
    """`fab drain` (leaseguard.fabric.drain_task): a drain per host, or one for the fleet."""
    settings = settings_or_exit(c)
    options = _drain_overrides(settings.drain, flags)
    options = _observed(options, flags.status_file, flags.metrics_file)
    hosts = fleet_hosts(c)
    configure_logging()
    progress = progress_for(sys.stderr) if len(hosts) == 1 or options.pause_cron_jobs else None
    board = _board_or_exit(options)  # one snapshot over every host
    run = _DrainRun(
        c, settings, options, progress, flags.json_, threading.Event(), board, flags.run
    )
    with signals_set(run.stop, say):
        if options.pause_cron_jobs:
            reports = _drain_fleet(hosts, run)
        else:
            reports = for_each_host(hosts, lambda host: _drain_one(host, run))
    if flags.json_:  # one complete object per line (per host, or the fleet's), never interleaved
        for _, obj in reports:
            if obj is not None:
                print(json.dumps(obj))
    if run.stop.is_set():
        say("drain interrupted; intake was resumed")
        raise Exit(code=EXIT_FAILED)
    exit_with(worst_status([status for status, _ in reports]))


def _drain_overrides(base: DrainOptions, flags: DrainFlags) -> DrainOptions:
    merged = {k: getattr(base, k) for k in DrainOptions.__dataclass_fields__}
    if flags.deadline_s is not None:
        merged["deadline_s"] = flags.deadline_s
    if flags.poll_s is not None:
        merged["poll_s"] = flags.poll_s
    if flags.pause_cron_job:
        merged["pause_cron_jobs"] = list(flags.pause_cron_job)
    if flags.resume_retry_s is not None:
        merged["resume_retry_s"] = flags.resume_retry_s
    try:
        return drain_options(merged)
    except ConfigError as exc:
        raise Exit(f"leaseguard: {exc}", code=EXIT_USAGE) from None


def _observed(options: DrainOptions, status_file: Any, metrics_file: Any) -> DrainOptions:
    """--status-file / --metrics-file win over the `drain:` section's keys."""
    return replace(
        options,
        status_file=status_file or options.status_file,
        metrics_file=metrics_file or options.metrics_file,
    )


def _board_or_exit(options: DrainOptions) -> StatusBoard:
    try:
        return status_board(options)
    except ConfigError as exc:
        raise Exit(f"leaseguard: {exc}", code=EXIT_USAGE) from None


@dataclass(frozen=True)
class _DrainRun:
    """What every host's drain of one `fab drain` shares."""

    c: Context
    settings: FabricSettings
    options: DrainOptions
    progress: Any
    json_output: bool
    stop: threading.Event
    board: StatusBoard | None = None
    command: str | None = None  # --run: run on the hosts once drained, intake still held


def _drain_one(host: str, run: _DrainRun) -> Report:
    settings = run.settings
    connection = connection_to(host, run.c, settings)
    try:
        with ssh_session(
            connection, settings.contract, settings.conninfo, settings.address, judge_at_once=True
        ) as s:
            result = drain_host(
                s,
                run.options,
                run.progress,
                run.board,
                front="fab drain",
                resume_hint=RESUME_HINT,
                stop=run.stop,
                act=_command_on({host: s.runner}, run.command) if run.command else None,
                action=f"command on {host}" if run.command else "drain",
            )
    except LeaseguardError as exc:
        return _failed(host, exc, run.json_output)
    finally:
        connection.close()
    return _report_drain(host, result, run.json_output)


def _drain_fleet(hosts: list[str], run: _DrainRun) -> list[Report]:
    """Every host's facts looked up (in parallel), then one drain judged by the fleet rule."""
    settings = run.settings
    with contextlib.ExitStack() as stack:
        opened = for_each_host(hosts, lambda host: _open_session(host, run.c, settings))
        for _, result in opened:
            if isinstance(result, _Opened):
                stack.enter_context(result.stack)
        failed = [(host, r) for host, r in opened if isinstance(r, LeaseguardError)]
        if failed:
            reports = [_failed(host, error, run.json_output) for host, error in failed]
            say("no intake was paused: every host's facts are needed to judge the fleet")
            return reports
        sessions = {host: r.session for host, r in opened}
        for s in sessions.values():  # any host's path may carry the intake's hold
            s.cron_user, s.cron_password = run.options.cron_user, run.options.cron_password
        runners = {host: s.runner for host, s in sessions.items()}
        # The judgment runs through one host's tunnel (the database is shared); each host's
        # start time is compared in the database clock through its measured offset.
        first = sessions[min(sessions)]
        try:
            fleet = stack.enter_context(
                fleet_session(
                    settings.contract,
                    first.conninfo,
                    {host: s.facts for host, s in sessions.items()},
                    runner=first.runner,
                    link=first.link,
                    host_offsets={host: r.clock for host, r in opened if r.clock is not None},
                )
            )
            result = drain_host(
                fleet,
                run.options,
                run.progress,
                run.board,
                front=f"fab drain ({','.join(hosts)})",
                resume_hint=RESUME_HINT,
                stop=run.stop,
                runners=[s.runner for s in sessions.values()],
                connect=first_that_connects([s.connect_writable for s in sessions.values()]),
                act=_command_on(runners, run.command) if run.command else None,
                action=f"command on {','.join(hosts)}" if run.command else "drain",
            )
        except LeaseguardError as exc:
            return [_failed("fleet", exc, run.json_output)]
    return [_report_drain("fleet", result, run.json_output)]


@dataclass
class _Opened:
    """A host's session, its clock minus ours, and the stack that closes it (and its SSH
    connection)."""

    session: GuardSession
    stack: contextlib.ExitStack
    clock: ClockOffset | None


def _open_session(host: str, c: Context, settings: FabricSettings) -> tuple[str, Any]:
    """(host, _Opened) or (host, the LeaseguardError that kept it from opening)."""
    stack = contextlib.ExitStack()
    try:
        connection = connection_to(host, c, settings)
        stack.callback(connection.close)
        session = stack.enter_context(
            ssh_session(connection, settings.contract, settings.conninfo, settings.address)
        )
        # Measured here, in parallel with the other hosts, only when a start time matters.
        started = session.facts.runtime_started_at is not None
        clock = (session.host_minus_here or offset_from_here(session.runner)) if started else None
    except LeaseguardError as exc:
        stack.close()
        return host, exc
    except BaseException:
        stack.close()
        raise
    return host, _Opened(session, stack, clock)


def _command_on(runners: dict[str, Any], command: str) -> Action:
    """--run: `command` on every host at once, intake still held; the first failure's status."""

    def act(result: DrainResult) -> ActionOutcome:
        hosts = sorted(runners)
        say(f"intake held: running the command on {', '.join(hosts)}")
        ran = for_each_host(hosts, lambda h: _run(runners[h], command))
        statuses = dict(zip(hosts, ran, strict=True))
        failed = {host: status for host, status in statuses.items() if status != 0}
        if not failed:
            return ActionOutcome(EXIT_PROCEED, f"command exited 0 on {', '.join(hosts)}")
        named = ", ".join(f"{host} exited {status}" for host, status in failed.items())
        return ActionOutcome(next(iter(failed.values())), f"command failed: {named}")

    return act


def _run(runner: Any, command: str) -> int:
    """One host's command over its SSH connection; its output printed under the host's name."""
    try:
        ran = runner.connection.run(command, hide=True, warn=True, in_stream=False)
    except Exception as exc:  # paramiko's and the socket's own errors: the class only
        say(f"{runner.label}: the command could not run over SSH ({type(exc).__name__})")
        return EXIT_FAILED
    with _OUTPUT:
        for line in (str(ran.stdout) + str(ran.stderr)).splitlines():
            print(f"[{runner.label}] {line}", file=sys.stderr)
    return int(ran.exited)


_OUTPUT = threading.Lock()  # one host's lines together


def _failed(host: str, error: LeaseguardError, json_output: bool) -> Report:
    """A host whose drain could not run: its failure line, or its object with --json."""
    if json_output:
        return EXIT_FAILED, failure_result(error, host)
    print(failure_line(host, error))
    return EXIT_FAILED, None


def _report_drain(host: str, result: DrainResult, json_output: bool) -> Report:
    """The drain's result; a failed drain prints only its failure, never a stale verdict."""
    if json_output:
        return result.exit_status, {"host": host, **result.as_dict()}
    if result.error is None and result.verdict is not None:
        print(result.verdict.timeline())
    if result.error is not None:
        print(failure_line(host, result.error))
    if result.verdict is not None:
        for warning in result.verdict.warnings:
            say(f"warning: {warning}")
    if result.action is not None and not json_output:
        say(f"{result.action.description}; {result.intake_line}")
    return result.exit_status, None
