"""What `fab drain` runs: each host drained on its own, or the fleet drained as one."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.core.errors import (
    EXIT_FAILED,
    EXIT_PROCEED,
    EXIT_USAGE,
    ConfigError,
    LeaseguardError,
)
from leaseguard.core.verdict import failure_result
from leaseguard.fabric.fleet import exit_with_worst, failure_line, fleet_hosts, for_each_host, say
from leaseguard.fabric.hosts import by_database, judging_session, not_judged, opened_hosts
from leaseguard.fabric.settings import FabricSettings, settings_or_exit
from leaseguard.orchestration.drain import (
    Action,
    ActionOutcome,
    DrainCounters,
    DrainResult,
    progress_for,
)
from leaseguard.orchestration.drain_options import DrainOptions, drain_options
from leaseguard.orchestration.drain_run import (
    configure_logging,
    drain_each,
    drain_host,
    first_that_connects,
    shared_failures,
    signals_set,
    status_board,
)
from leaseguard.orchestration.drain_status import StatusBoard

T = TypeVar("T")
RESUME_HINT = "`fab -H <any host of the drain> resume` (same fabric.yaml)"

# A host's (or the fleet's) exit status and its lines (True: to stdout, the timeline or the
# --json object; False: to stderr), printed once every drain ended, never interleaved.
Report = tuple[int, list[tuple[bool, str]]]


def drain_hosts(
    c: Context,
    *,
    deadline_s: float | None,
    poll_s: float | None,
    pause_cron_job: list[str] | None,
    resume_retry_s: float | None,
    json_: bool,
    status_file: str | None,
    metrics_file: str | None,
    run: str | None,
) -> None:
    """`fab drain`: each host drained by its own facts, or the fleet drained as one; either
    way judged by one query per poll over one connection. A flag given wins over `drain:`."""
    settings = settings_or_exit(c)
    given = {
        "deadline_s": deadline_s,
        "poll_s": poll_s,
        "resume_retry_s": resume_retry_s,
        "pause_cron_jobs": list(pause_cron_job or ()) or None,
        "status_file": status_file or None,
        "metrics_file": metrics_file or None,
    }
    merged = {**asdict(settings.drain), **{k: v for k, v in given.items() if v is not None}}
    options = _or_usage_exit(drain_options, merged)
    hosts = fleet_hosts(c)
    configure_logging()
    progress = progress_for(sys.stderr) if len(hosts) == 1 or options.pause_cron_jobs else None
    board = _or_usage_exit(status_board, options)  # one snapshot over every host
    drain_run = _DrainRun(c, settings, options, progress, json_, threading.Event(), board, run)
    with signals_set(drain_run.stop, say):
        drain = _drain_fleet if options.pause_cron_jobs else _drain_each
        reports = drain(hosts, drain_run)
    for _, lines in reports:
        for to_stdout, line in lines:
            print(line) if to_stdout else say(line)
    if drain_run.stop.is_set():
        say("drain interrupted; intake was resumed")
        raise Exit(code=EXIT_FAILED)
    exit_with_worst([status for status, _ in reports])


def _or_usage_exit(read: Callable[[Any], T], value: Any) -> T:
    try:
        return read(value)
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


def _drain_each(hosts: list[str], run: _DrainRun) -> list[Report]:
    """Every host's own drain (its facts, its intake), all polled by ONE query per poll per
    database."""
    results: dict[str, DrainResult | LeaseguardError] = {}
    with opened_hosts(list(dict.fromkeys(hosts)), run.c, run.settings) as opened:
        groups = by_database(opened, run.settings) if opened.sessions else []
        results.update(opened.failed)

        def drain(group: list[str]) -> dict[str, DrainResult | LeaseguardError]:
            try:
                intake = run.options.intake("fab drain")
                with judging_session(opened, run.settings, hosts=group, intake=intake) as shared:
                    drained = drain_each(
                        shared,
                        run.options,
                        run.board,
                        stop=run.stop,
                        own=opened.sessions,
                        act=lambda own: _command_on({own.host: own.runner}, run.command),
                        progress=run.progress,
                        front="fab drain",
                        resume_hint=RESUME_HINT,
                    )
            except LeaseguardError as exc:  # a host without a timeout
                return dict(not_judged(group, exc))
            # The fleet's one poll failed: its cause said once, each host not judged by it.
            for named in shared_failures(drained).values():
                cause = drained[named[0]].error
                assert cause is not None
                for host, error in not_judged(named, cause).items():
                    drained[host] = replace(drained[host], error=error)
            return dict(drained)

        by_first = {group[0]: group for group in groups}
        if by_first:  # else no host opened (and a pool needs a worker)
            for drained in for_each_host(list(by_first), lambda first: drain(by_first[first])):
                results.update(drained)
    return [_report(host, results[host], run.json_output) for host in hosts]


def _drain_fleet(hosts: list[str], run: _DrainRun) -> list[Report]:
    """Every host's facts looked up (in parallel), then one drain judged by the fleet rule."""
    with opened_hosts(list(dict.fromkeys(hosts)), run.c, run.settings) as opened:
        if opened.failed:
            reports = [_report(h, e, run.json_output) for h, e in sorted(opened.failed.items())]
            say("no intake was paused: every host's facts are needed to judge the fleet")
            return reports
        sessions = opened.sessions
        runners = {host: s.runner for host, s in sessions.items()}
        try:
            front = f"fab drain ({','.join(hosts)})"
            intake = run.options.intake(front)
            with judging_session(opened, run.settings, fleet_rule=True, intake=intake) as fleet:
                result = drain_host(
                    fleet,
                    run.options,
                    run.progress,
                    run.board,
                    front=front,
                    resume_hint=RESUME_HINT,
                    stop=run.stop,
                    runners=list(runners.values()),
                    connect=first_that_connects(
                        [sessions[h].connect_writable for h in sorted(sessions)]
                    ),
                    act=_command_on(runners, run.command),
                    action=f"command on {','.join(hosts)}" if run.command else "drain",
                )
        except LeaseguardError as exc:
            return [_report("fleet", exc, run.json_output)]
    return [_report("fleet", result, run.json_output)]


def _command_on(runners: dict[str, Any], command: str | None) -> Action | None:
    """--run: `command` on every host at once, intake still held; the first failure's status."""
    if not command:
        return None

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


def _report(host: str, result: DrainResult | LeaseguardError, json_output: bool) -> Report:
    """The drain's result, or why it could not run; a failed drain reports only its failure,
    never a stale verdict."""
    if isinstance(result, LeaseguardError):
        if json_output:
            return EXIT_FAILED, [(True, json.dumps(failure_result(result, host)))]
        result = DrainResult(None, DrainCounters(), 0.0, 0.0, result)
    if json_output:
        return result.exit_status, [(True, json.dumps({"host": host, **result.as_dict()}))]
    lines: list[tuple[bool, str]] = []
    if result.error is None and result.verdict is not None:
        lines.append((True, result.verdict.timeline()))
    if result.error is not None:
        lines.append((True, failure_line(host, result.error)))
    if result.verdict is not None:
        lines.extend((False, f"warning: {warning}") for warning in result.verdict.warnings)
    if result.action is not None:
        lines.append((False, f"{result.action.description}; {result.intake_line}"))
    return result.exit_status, lines
