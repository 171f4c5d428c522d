"""What the Fabric tasks run: the -H hosts opened in parallel, one query per poll per database."""

import contextlib
import json
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from fabric import Connection
from invoke.context import Context
from invoke.exceptions import Exit

from leaseguard.adapters.ssh import FabricRunner, tunnelled
from leaseguard.core import errors
from leaseguard.core.config_values import each_hosts_own
from leaseguard.core.errors import ConfigError, IntakeNotResumed, LeaseguardError
from leaseguard.core.verdict import Verdict, failure_result
from leaseguard.fabric.tasks import FabricSettings, Opening, as_usage_error, connecting, fleet_hosts
from leaseguard.orchestration import drain_run
from leaseguard.orchestration.drain import (
    Action,
    ActionOutcome,
    DrainCounters,
    DrainResult,
    TerminalProgress,
    failure_output,
    print_drain,
)
from leaseguard.orchestration.intake import resume_lines, resume_pauses
from leaseguard.orchestration.session import GuardSession, IntakeAccess
from leaseguard.orchestration.ssh_session import host_session

T = TypeVar("T")
Sessions = dict[str, GuardSession]
Failed = dict[str, LeaseguardError]
Opened = tuple[Sessions, Failed]  # the hosts that opened, and those that failed with why
Work = Callable[[GuardSession], Mapping[str, T]]  # one database's hosts judged: each one's outcome
Outcome = tuple[str, DrainResult | LeaseguardError]  # reported once every drain ended
_OUTPUT = threading.Lock()  # one host's lines together
RESUME_HINT = "`fab -H <any host of the drain> resume` (same fabric.yaml)"
MIXED_DATABASES = (
    "the hosts reach different databases at their own loopback ({}): a drain pausing pg_cron "
    "jobs judges and holds one database; run fab drain once per database, or set db_host to "
    "the shared database's address; nothing was paused"
)


def say(message: str) -> None:
    print(f"leaseguard: {message}", file=sys.stderr, flush=True)


def exit_with_worst(statuses: list[int]) -> None:
    """Usage, else failed, else a --run command's own failing status (a command that ran and
    failed is never reported as "defer: nothing done"), else defer, else proceed."""
    ok = (errors.EXIT_PROCEED, errors.EXIT_DEFER)
    order = [errors.EXIT_USAGE, errors.EXIT_FAILED, *(s for s in statuses if s not in ok)]
    worst = next((s for s in [*order, errors.EXIT_DEFER] if s in statuses), errors.EXIT_PROCEED)
    if worst != errors.EXIT_PROCEED:
        raise Exit(code=worst)


def guard_hosts(settings: FabricSettings, hosts: list[str], opening: Opening, json_: bool) -> None:
    """`fab guard`: every host's verdict (or failure), in -H order, and the worst status."""
    with opened_hosts(opening, settings) as opened:
        judged = per_database(opened, settings, GuardSession.judge_each, settings.drain.intake())
    outcomes = [(host, judged[host]) for host in hosts]  # a host named twice: twice
    if json_:
        dicts = [
            r.as_dict() if isinstance(r, Verdict) else failure_result(r, h) for h, r in outcomes
        ]
        print(json.dumps(dicts))
    for host, result in [] if json_ else outcomes:
        if isinstance(result, LeaseguardError):
            print(failure_output(result, host, as_json=False, fab=True))
            continue
        print(result.timeline())
        for warning in result.warnings:
            say(f"warning: {warning}")
    exit_with_worst([result.exit_status for _, result in outcomes])


def resume_through(
    host: str, connection: Connection, settings: FabricSettings, json_: bool, **given: Any
) -> None:
    """`fab resume`: the recorded pauses (`given`: jobs, force) given back through the host."""
    try:
        with tunnelled(connection, settings.conninfo, settings.address) as (conninfo, _):
            bound_s, access = settings.contract.connect_timeout_s, settings.drain.intake()
            outcome = resume_pauses(conninfo, access, connect_timeout_s=bound_s, **given)
    except LeaseguardError as exc:
        print(failure_output(exc, host, as_json=json_, fab=True))
        raise Exit(code=errors.EXIT_FAILED) from None
    print(json.dumps(outcome) if json_ else resume_lines(outcome))
    if outcome["kept"]:
        raise Exit(code=errors.EXIT_DEFER)


@contextlib.contextmanager
def opened_hosts(connections: Opening, settings: FabricSettings) -> Iterator[Opened]:
    """Each host's session, in parallel, closed at the end; one alone connects at its lookups."""
    hosts, alone = list(connections), len(connections) == 1

    def open_one(host: str) -> tuple[GuardSession, contextlib.ExitStack] | LeaseguardError:
        try:  # the lookups and the tunnel share the host's connection (`connecting` closes it)
            connection = connections[host].result()
            path = tunnelled(connection, settings.conninfo, settings.address, probe=False)
            opened = host_session(settings.contract, FabricRunner(connection), path, connect=alone)
            stack = contextlib.ExitStack()  # its close, handed to the caller's stack
            return stack.enter_context(opened), stack
        except LeaseguardError as exc:
            return exc

    sessions, failed = Sessions(), Failed()
    with contextlib.ExitStack() as stack:
        for host, result in zip(hosts, drain_run.map_waking(open_one, hosts), strict=True):
            if isinstance(result, LeaseguardError):
                failed[host] = result
            else:
                sessions[host] = result[0]
                stack.enter_context(result[1])
        yield sessions, failed


def per_database(
    opened: Opened, settings: FabricSettings, work: Work[T], intake: IntakeAccess
) -> dict[str, T | LeaseguardError]:
    """`work(session)` for each database's hosts, in parallel: each host's outcome."""
    sessions, failed = opened
    groups = _by_database(sessions, failed, settings) if sessions else []
    outcomes: dict[str, T | LeaseguardError] = dict(failed)

    def judge(hosts: list[str]) -> Mapping[str, T | LeaseguardError]:
        try:
            with judging_session({h: sessions[h] for h in hosts}, settings, intake) as session:
                return work(session)
        except LeaseguardError as exc:
            return not_judged(hosts, exc)

    for done in drain_run.map_waking(judge, groups):
        outcomes.update(done)
    return outcomes


def _by_database(sessions: Sessions, failed: Failed, settings: FabricSettings) -> list[list[str]]:
    """The hosts grouped by database (at each host's own loopback each may have its own); one
    whose database is not identified moves to failed."""
    hosts = sorted(sessions)
    if not each_hosts_own(settings.address.host) or len(hosts) == 1:
        return [hosts]

    def identity(host: str) -> tuple[object, ...] | LeaseguardError:
        try:
            return sessions[host].database_identity()
        except LeaseguardError as exc:
            return exc

    groups: dict[object, list[str]] = {}
    for host, found in zip(hosts, drain_run.map_waking(identity, hosts), strict=True):
        if isinstance(found, LeaseguardError):
            failed[host] = found
            del sessions[host]
        else:
            groups.setdefault(found, []).append(host)
    return list(groups.values())


def judging_session(
    sessions: Sessions, settings: FabricSettings, intake: IntakeAccess, *, fleet_rule: bool = False
) -> contextlib.closing[GuardSession]:
    """One session judging these hosts, each by its own facts or as one fleet."""
    chosen = dict(sorted(sessions.items()))
    through, *others = chosen.values()
    early = through.handover()  # one host alone connected already
    try:
        session = GuardSession(
            settings.contract,
            through.conninfo,
            {host: s.facts for host, s in chosen.items()},
            through.runner,
            through.link,
            each=not fleet_rule,
            host_offsets={h: s.host_minus_here for h, s in chosen.items() if s.host_minus_here},
            # Every other host's tunnel, tried in turn by polls and intake holds alike: one host's
            # dead tunnel must not strand intake.
            fallbacks=[(s.conninfo, s.link) for s in others if s.link is not None],
            host_labels={host: s.host for host, s in chosen.items()},
            intake=intake,
            conn=early,
        )
    except BaseException:  # the connection it would own is closed, not left to the GC
        if early is not None:
            early.close()
        raise
    return contextlib.closing(session)


def not_judged(hosts: list[str], cause: LeaseguardError) -> dict[str, LeaseguardError]:
    """The fleet's one judgment failed: its cause said once, each host not judged by it."""
    if len(hosts) == 1:
        return {hosts[0]: cause}
    say(f"the fleet's judgment failed ({cause.kind}): {cause}")
    return {
        host: type(cause)(
            f"host {host} was not judged: the fleet's judgment failed ({cause.kind}), "
            "its cause named once above"
        )
        for host in hosts
    }


def drain_hosts(c: Context, settings: FabricSettings, json_: bool, run: str | None) -> None:
    """`fab drain`: each host on its own or, with pg_cron jobs to pause, the fleet as one."""
    options, hosts = settings.drain, fleet_hosts(c)
    drain_run.configure_logging()
    with as_usage_error():
        board = options.board()  # one snapshot over every host
    shown = sys.stderr.isatty() and (len(hosts) == 1 or bool(options.pause_cron_jobs))
    progress = TerminalProgress(sys.stderr) if shown else None
    stop = threading.Event()
    common: dict[str, Any] = {"board": board, "stop": stop, "progress": progress}
    common["resume_hint"] = RESUME_HINT

    def each(shared: GuardSession) -> dict[str, DrainResult]:
        """Every host's own drain (its facts, its intake), all on ONE query per poll."""
        drained = drain_run.drain_each(
            shared,
            options,
            own=opened[0],
            act=lambda own: _command_on({own.host: own.runner}, run),
            front="fab drain",
            **common,
        )
        for cause, named in drain_run.shared_failures(drained).items():
            for host, error in not_judged(named, cause).items():
                drained[host] = replace(drained[host], error=error)
        return drained

    def as_one(sessions: Sessions, failed: Failed) -> list[Outcome]:
        """Every host's facts looked up, then one drain judged by the fleet rule."""
        databases = _by_database(sessions, failed, settings) if not failed else []
        if failed:
            say("no intake was paused: every host's facts are needed to judge the fleet")
            return sorted(failed.items())
        if len(databases) > 1:  # judged on the first host's alone, the others' claims unseen
            named = "; ".join(", ".join(group) for group in databases)
            return [("fleet", ConfigError(MIXED_DATABASES.format(named)))]
        runners = {host: s.runner for host, s in sessions.items()}
        try:
            front = f"fab drain ({','.join(hosts)})"
            intake = options.intake(front)
            with judging_session(sessions, settings, intake, fleet_rule=True) as session:
                result: DrainResult | LeaseguardError = drain_run.drain_host(
                    session,
                    options,
                    front=front,
                    runners=list(runners.values()),
                    act=_command_on(runners, run),
                    action=f"command on {','.join(hosts)}" if run else "drain",
                    **common,
                )
        except LeaseguardError as exc:
            result = exc
        return [("fleet", result)]

    with (
        drain_run.signals_set(stop, say),
        connecting(hosts, c, settings) as connections,
        opened_hosts(connections, settings) as opened,
    ):
        if options.pause_cron_jobs:
            outcomes = as_one(*opened)
        else:
            drained = per_database(opened, settings, each, options.intake("fab drain"))
            outcomes = [(host, drained[host]) for host in hosts]
    statuses = []
    for host, result in outcomes:
        if isinstance(result, LeaseguardError):  # never drained: failed on the board too
            board.not_drained(host, result, stopped=stop.is_set())
            if json_:
                statuses.append(errors.EXIT_FAILED)
                print(failure_output(result, host, as_json=True, fab=True))
                continue
            result = DrainResult(None, DrainCounters(), 0.0, 0.0, result)
        statuses.append(result.exit_status)
        print_drain(result, host, say, as_json=json_, fab=True)
    if stop.is_set():
        causes = [r.error if isinstance(r, DrainResult) else r for _, r in outcomes]
        paused = any(isinstance(cause, IntakeNotResumed) for cause in causes)
        said = "INTAKE STILL PAUSED (see above)" if paused else "intake was resumed"
        say(f"drain interrupted; {said}")
        raise Exit(code=errors.EXIT_FAILED)
    exit_with_worst(statuses)


def _command_on(runners: dict[str, Any], command: str | None) -> Action | None:
    """--run: `command` on every host at once, intake still held; the first failure's status."""
    if not command:
        return None

    def run(runner: Any) -> int:
        try:
            ran = runner.connection.run(command, hide=True, warn=True, in_stream=False)
        except Exception as exc:  # paramiko's and the socket's own errors: the class only
            say(f"{runner.label}: the command could not run over SSH ({type(exc).__name__})")
            return errors.EXIT_FAILED
        with _OUTPUT:
            for line in (str(ran.stdout) + str(ran.stderr)).splitlines():
                print(f"[{runner.label}] {line}", file=sys.stderr)
        return int(ran.exited)

    def act(result: DrainResult) -> ActionOutcome:
        hosts = sorted(runners)
        held = "intake held" if result.intake is not None else "intake NOT held"
        say(f"{held}: running the command on {', '.join(hosts)}")
        ran = drain_run.map_waking(run, [runners[h] for h in hosts])
        failed = {host: status for host, status in zip(hosts, ran, strict=True) if status != 0}
        if not failed:
            return ActionOutcome(errors.EXIT_PROCEED, f"command exited 0 on {', '.join(hosts)}")
        # No exit status (-1: the command was killed by a signal, or its channel closed): failed.
        named = ", ".join(
            f"{host} exited {status}" if status >= 0 else f"{host} ended without an exit status"
            for host, status in failed.items()
        )
        first = next(iter(failed.values()))
        return ActionOutcome(first if first > 0 else errors.EXIT_FAILED, f"command failed: {named}")

    return act
