"""What `fab drain` runs: each host drained on its own, or the fleet drained as one."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import asdict, replace
from typing import Any

from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.adapters.pauses import drain_identity
from leaseguard.core.errors import EXIT_FAILED, EXIT_PROCEED, EXIT_USAGE, ConfigError
from leaseguard.core.errors import LeaseguardError as Failure
from leaseguard.core.verdict import failure_result
from leaseguard.fabric import hosts as fleet
from leaseguard.fabric.tasks import fleet_hosts, settings_or_exit
from leaseguard.orchestration import drain_run
from leaseguard.orchestration.drain import Action, ActionOutcome, DrainCounters, DrainResult
from leaseguard.orchestration.drain import progress_for as terminal_progress
from leaseguard.orchestration.drain_options import drain_options
from leaseguard.orchestration.session import GuardSession

RESUME_HINT = "`fab -H <any host of the drain> resume` (same fabric.yaml)"
# A host's (or the fleet's) exit status and its lines (True: to stdout), printed once every
# drain ended, never interleaved.
Report = tuple[int, list[tuple[bool, str]]]


def drain_hosts(c: Context, given: dict[str, Any], json_: bool, run: str | None) -> None:
    """`fab drain`: each host by its own facts or, with pg_cron jobs to pause, the fleet as one;
    either way one query per poll over one connection. A flag given wins over `drain:`."""
    settings = settings_or_exit(c)
    merged = {**asdict(settings.drain), **{k: v for k, v in given.items() if v is not None}}
    try:
        options = drain_options(merged)
        hosts = fleet_hosts(c)
        drain_run.configure_logging()
        board = drain_run.status_board(options)  # one snapshot over every host
    except ConfigError as exc:
        raise Exit(f"leaseguard: {exc}", code=EXIT_USAGE) from None
    progress = terminal_progress(sys.stderr) if len(hosts) == 1 or options.pause_cron_jobs else None
    common: dict[str, Any] = {"progress": progress, "resume_hint": RESUME_HINT}
    stop = threading.Event()

    def each(opened: fleet.Opened) -> list[Report]:
        """Every host's own drain (its facts, its intake), all on ONE query per poll."""

        def drain(shared: GuardSession, group: list[str]) -> dict[str, DrainResult]:
            shared.pause_owner = drain_identity("fab drain")
            drained = drain_run.drain_each(
                shared,
                options,
                board,
                stop=stop,
                own=opened[0],
                act=lambda own: _command_on({own.host: own.runner}, run),
                front="fab drain",
                **common,
            )
            # The fleet's one poll failed: its cause said once, each host not judged by it.
            for named in drain_run.shared_failures(drained).values():
                cause = drained[named[0]].error
                assert cause is not None
                for host, error in fleet.not_judged(named, cause).items():
                    drained[host] = replace(drained[host], error=error)
            return drained

        results = fleet.per_database(opened, settings, drain)
        return [_report(host, results[host], json_) for host in hosts]

    def as_one(opened: fleet.Opened) -> list[Report]:
        """Every host's facts looked up, then one drain judged by the fleet rule."""
        sessions, failed = opened
        if failed:
            fleet.say("no intake was paused: every host's facts are needed to judge the fleet")
            return [_report(host, error, json_) for host, error in sorted(failed.items())]
        for s in sessions.values():  # any host's path may carry the intake's hold
            s.cron_user, s.cron_password = options.cron_user, options.cron_password
        runners = {host: s.runner for host, s in sessions.items()}
        try:
            with fleet.judging_session(sessions, settings, fleet_rule=True) as session:
                result: DrainResult | Failure = drain_run.drain_host(
                    session,
                    options,
                    board=board,
                    front=f"fab drain ({','.join(hosts)})",
                    stop=stop,
                    runners=list(runners.values()),
                    connect=drain_run.first_that_connects(
                        [sessions[h].connect_writable for h in sorted(sessions)]
                    ),
                    act=_command_on(runners, run),
                    action=f"command on {','.join(hosts)}" if run else "drain",
                    **common,
                )
        except Failure as exc:
            result = exc
        return [_report("fleet", result, json_)]

    with drain_run.signals_set(stop, fleet.say), fleet.opened_hosts(hosts, c, settings) as opened:
        reports = as_one(opened) if options.pause_cron_jobs else each(opened)
    for _, lines in reports:
        for to_stdout, line in lines:
            print(line) if to_stdout else fleet.say(line)
    if stop.is_set():
        fleet.say("drain interrupted; intake was resumed")
        raise Exit(code=EXIT_FAILED)
    fleet.exit_with_worst([status for status, _ in reports])


def _command_on(runners: dict[str, Any], command: str | None) -> Action | None:
    """--run: `command` on every host at once, intake still held; the first failure's status."""
    if not command:
        return None

    def act(result: DrainResult) -> ActionOutcome:
        hosts = sorted(runners)
        fleet.say(f"intake held: running the command on {', '.join(hosts)}")
        ran = fleet.for_each_host(hosts, lambda h: _run(runners[h], command))
        failed = {host: status for host, status in zip(hosts, ran, strict=True) if status != 0}
        if not failed:
            return ActionOutcome(EXIT_PROCEED, f"command exited 0 on {', '.join(hosts)}")
        named = ", ".join(f"{host} exited {status}" for host, status in failed.items())
        return ActionOutcome(next(iter(failed.values())), f"command failed: {named}")

    return act


_OUTPUT = threading.Lock()  # one host's lines together


def _run(runner: Any, command: str) -> int:
    """One host's command over its SSH connection; its output printed under the host's name."""
    try:
        ran = runner.connection.run(command, hide=True, warn=True, in_stream=False)
    except Exception as exc:  # paramiko's and the socket's own errors: the class only
        fleet.say(f"{runner.label}: the command could not run over SSH ({type(exc).__name__})")
        return EXIT_FAILED
    with _OUTPUT:
        for line in (str(ran.stdout) + str(ran.stderr)).splitlines():
            print(f"[{runner.label}] {line}", file=sys.stderr)
    return int(ran.exited)


def _report(host: str, result: DrainResult | Failure, json_output: bool) -> Report:
    """The drain's result, or why it could not run; a failed drain reports only its failure."""
    if isinstance(result, Failure):
        if json_output:
            return EXIT_FAILED, [(True, json.dumps(failure_result(result, host)))]
        result = DrainResult(None, DrainCounters(), 0.0, 0.0, result)
    if json_output:
        return result.exit_status, [(True, json.dumps({"host": host, **result.as_dict()}))]
    lines: list[tuple[bool, str]] = []
    if result.error is not None:
        lines.append((True, fleet.failure_line(host, result.error)))
    elif result.verdict is not None:
        lines.append((True, result.verdict.timeline()))
    if result.verdict is not None:
        lines.extend((False, f"warning: {warning}") for warning in result.verdict.warnings)
    if result.action is not None:
        lines.append((False, f"{result.action.description}; {result.intake_line}"))
    return result.exit_status, lines
