"""Fabric tasks `guard` and `drain`: a thin front over the core.

`fab -H app1,app2 guard` checks all hosts in parallel and exits once, with the worst
status (1 if any check failed, else 75 if any host defers, else 0). Fabric itself would
run a task once per host, serially; the small executor below hands our tasks the whole
host list instead, and is installed through this collection's own config.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from fabric import Config, Connection, Executor, task
from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit, ParseError

from leaseguard.adapters.clock import offset_from_here
from leaseguard.adapters.ssh import DatabaseAddress, SshOptions, make_connection
from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.contract import CRON_BUDGETS_SECTION, Contract, load_contract
from leaseguard.core.dsn import tunnel_far_end
from leaseguard.core.errors import (
    EXIT_DEFER,
    EXIT_FAILED,
    EXIT_PROCEED,
    EXIT_USAGE,
    ConfigError,
    LeaseguardError,
)
from leaseguard.core.verdict import Verdict, failure_timeline
from leaseguard.orchestration.drain import DrainResult
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
from leaseguard.orchestration.ssh_session import ssh_session, tunnelled_conninfo

FLEET_HOSTS_KEY = "leaseguard_fleet_hosts"
# The keys of the `connection:` section (docs/configuration.md lists each one).
CONNECTION_KEYS = frozenset(
    {"dsn", "db_host", "db_port", "known_hosts", "accept_unknown_host_keys", "gateway"}
)
MAX_PARALLEL_HOSTS = 32
T = TypeVar("T")


class FleetExecutor(Executor):  # type: ignore[misc]
    """Runs tasks marked `fleet` once with every -H host, other tasks as Fabric does."""

    def expand_calls(self, calls: list[Any], apply_hosts: bool = True) -> list[Any]:
        expanded: list[Any] = []
        host_str = self.core[0].args.hosts.value if apply_hosts else None
        for call in calls:
            body = getattr(getattr(call, "task", call), "body", None)
            if getattr(body, "leaseguard_fleet", False):
                hosts = host_str.split(",") if host_str else []
                self.config[FLEET_HOSTS_KEY] = hosts
                expanded.append(call)
            else:
                expanded.extend(super().expand_calls([call], apply_hosts=apply_hosts))
        return expanded


def fleet(body: Callable[..., Any]) -> Callable[..., Any]:
    body.leaseguard_fleet = True  # type: ignore[attr-defined]
    return body


@dataclass(frozen=True)
class FabricSettings:
    """The `leaseguard:` section of Fabric config, validated."""

    contract: Contract
    conninfo: str
    address: DatabaseAddress
    ssh: SshOptions
    drain: DrainOptions


def settings_from_config(config: Any) -> FabricSettings:
    """Contract keys at the top of `leaseguard:`; `connection:` and `drain:` beside them."""
    section = _plain(config.get("leaseguard", {}) or {})
    connection = dict(section.pop("connection", {}) or {})
    unknown = sorted(set(connection) - CONNECTION_KEYS)
    if unknown:
        names = ", ".join(f"connection.{k}" for k in unknown)
        raise ConfigError(f"unknown config key(s): {names}")
    drain = section.pop("drain", {}) or {}
    section.pop(CRON_BUDGETS_SECTION, None)  # pg_cron budgets: read by `leaseguard budgets`
    dsn = connection.pop("dsn", None) or os.environ.get("LEASEGUARD_DSN", "")
    db_host, db_port = connection.pop("db_host", None), connection.pop("db_port", None)
    address = DatabaseAddress(
        *tunnel_far_end(
            dsn,
            None if db_host is None else str(db_host),
            None if db_port is None else _port(db_port),
        )
    )
    contract = load_contract(section)
    ssh = SshOptions(
        known_hosts=connection.pop("known_hosts", None),
        accept_unknown_host_keys=bool(connection.pop("accept_unknown_host_keys", False)),
        gateway=connection.pop("gateway", None),
        # One connect budget for the whole path: the SSH hop and the database behind it.
        connect_timeout_s=contract.connect_timeout_s,
    )
    return FabricSettings(contract, dsn, address, ssh, drain_options(drain))


def _port(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError("connection.db_port must be a port number") from None


def _plain(value: Any) -> Any:
    """invoke's DataProxy -> plain dicts/lists, so validation sees ordinary types."""
    if hasattr(value, "keys"):
        return {str(k): _plain(value[k]) for k in value.keys()}  # noqa: SIM118
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _hosts(c: Context) -> list[str]:
    if isinstance(c, Connection):  # run by a plain Fabric executor: one host per call
        return [c.original_host]
    hosts = list(c.config.get(FLEET_HOSTS_KEY) or [])
    if not hosts:
        raise Exit("leaseguard: give the hosts to check with -H host1,host2", code=EXIT_USAGE)
    for host in hosts:
        if not host.rpartition("@")[2].partition(":")[0]:  # "root@", ":22", ""
            raise Exit(f"leaseguard: -H {host!r} names no host", code=EXIT_USAGE)
    return hosts


def _for_each_host(hosts: list[str], work: Callable[[str], T]) -> list[T]:
    with ThreadPoolExecutor(max_workers=min(len(hosts), MAX_PARALLEL_HOSTS)) as pool:
        return list(pool.map(work, hosts))


def _connection(host: str, c: Context, settings: FabricSettings) -> Connection:
    config = c.config if isinstance(c.config, Config) else None
    return make_connection(host, settings.ssh, config)


def _settings_or_exit(c: Context) -> FabricSettings:
    try:
        return settings_from_config(c.config)
    except ConfigError as exc:
        raise Exit(f"leaseguard: {exc}", code=EXIT_USAGE) from None


# --- guard --------------------------------------------------------------------------------


@task(
    help={"json_": "print a JSON list (one object per host) instead of timeline lines"},
)
@fleet
def guard(c: Context, json_: bool = False) -> None:
    """Judge every host's live leases in parallel: exit 0 proceed, 75 defer, 1 failed."""
    settings = _settings_or_exit(c)
    outcomes = _for_each_host(_hosts(c), lambda host: _guard_one(host, c, settings))
    if json_:
        print(json.dumps([_outcome_dict(o) for o in outcomes]))
    else:
        for outcome in outcomes:
            print(_outcome_line(outcome))
            if isinstance(outcome[1], Verdict):
                for warning in outcome[1].warnings:
                    print(f"leaseguard: warning: {warning}", file=sys.stderr)
    _exit_with(_worst([_outcome_status(o) for o in outcomes]))


Outcome = tuple[str, Verdict | LeaseguardError]


def _guard_one(host: str, c: Context, settings: FabricSettings) -> Outcome:
    connection = _connection(host, c, settings)
    try:
        with ssh_session(connection, settings.contract, settings.conninfo, settings.address) as s:
            s.cron_database = settings.drain.cron_database
            return host, s.judge()
    except LeaseguardError as exc:
        return host, exc
    finally:
        connection.close()


def _outcome_status(outcome: Outcome) -> int:
    """The verdict's status, or the error's: 1 failed, 2 usage (e.g. a status an enum lacks)."""
    return outcome[1].exit_status


def _outcome_line(outcome: Outcome) -> str:
    host, result = outcome
    if isinstance(result, Verdict):
        return result.timeline()
    return f"{failure_timeline(datetime.now(UTC), host, result)} reason={json.dumps(str(result))}"


def _outcome_dict(outcome: Outcome) -> dict[str, Any]:
    host, result = outcome
    if isinstance(result, Verdict):
        return result.as_dict()
    return {
        "decision": "failed",
        "host": host,
        "error": {"type": result.kind, "message": str(result)},
    }


def _worst(statuses: list[int]) -> int:
    if EXIT_USAGE in statuses:
        return EXIT_USAGE
    if EXIT_FAILED in statuses:
        return EXIT_FAILED
    if EXIT_DEFER in statuses:
        return EXIT_DEFER
    return EXIT_PROCEED


def _exit_with(status: int) -> None:
    if status != EXIT_PROCEED:
        raise Exit(code=status)


# --- drain --------------------------------------------------------------------------------

RESUME_HINT = "`fab -H <any host of the drain> resume` (same fabric.yaml)"


@task(
    help={
        "deadline_s": "give up after N seconds (default and maximum: the longest remaining "
        "lease seen at the start)",
        "poll_s": "seconds between polls (default 5)",
        "pause_cron_job": "pg_cron job to deactivate during the drain and reactivate after "
        "(repeatable); shared intake: paused once for all hosts, resumed after the last",
        "resume_retry_s": "retry a failed resume for up to N seconds (default 60)",
        "json_": "print the drain result as JSON",
        "status_file": "rewrite a JSON snapshot of the drain (every host) here after every "
        "poll; read it with `leaseguard status PATH`",
        "metrics_file": "rewrite Prometheus text metrics here after every poll",
    },
    iterable=["pause_cron_job"],
)
@fleet
def drain(
    c: Context,
    deadline_s: float | None = None,
    poll_s: float | None = None,
    pause_cron_job: list[str] | None = None,
    resume_retry_s: float | None = None,
    json_: bool = False,
    status_file: str | None = None,
    metrics_file: str | None = None,
) -> None:
    """Pause intake, wait until no live lease remains (lease-bounded), resume intake.

    With pg_cron jobs to pause (shared intake), the fleet is drained as one: intake is
    paused once, the wait judges every host's facts with the fleet rule, and intake is
    resumed once, after the wait, on every exit path (Ctrl-C and SIGTERM included).
    """
    settings = _settings_or_exit(c)
    options = _drain_overrides(settings.drain, deadline_s, poll_s, pause_cron_job, resume_retry_s)
    options = _observed(options, status_file, metrics_file)
    hosts = _hosts(c)
    configure_logging()
    progress = progress_for(sys.stderr) if len(hosts) == 1 or options.pause_cron_jobs else None
    board = _board_or_exit(options)  # one snapshot over every host
    stop = threading.Event()
    with signals_set(stop, _say):
        if options.pause_cron_jobs:
            statuses = [_drain_fleet(hosts, c, settings, options, progress, json_, stop, board)]
        else:
            statuses = _for_each_host(
                hosts,
                lambda host: _drain_one(host, c, settings, options, progress, json_, stop, board),
            )
    if stop.is_set():
        _say("drain interrupted; intake was resumed")
        raise Exit(code=EXIT_FAILED)
    _exit_with(_worst(statuses))


def _say(message: str) -> None:
    print(f"leaseguard: {message}", file=sys.stderr, flush=True)


def _drain_overrides(
    base: DrainOptions, deadline_s: Any, poll_s: Any, jobs: list[str] | None, retry_s: Any
) -> DrainOptions:
    merged = {k: getattr(base, k) for k in DrainOptions.__dataclass_fields__}
    if deadline_s is not None:
        merged["deadline_s"] = deadline_s
    if poll_s is not None:
        merged["poll_s"] = poll_s
    if jobs:
        merged["pause_cron_jobs"] = list(jobs)
    if retry_s is not None:
        merged["resume_retry_s"] = retry_s
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


def _drain_one(
    host: str,
    c: Context,
    settings: FabricSettings,
    options: DrainOptions,
    progress: Any,
    json_output: bool,
    stop: threading.Event,
    board: StatusBoard | None = None,
) -> int:
    connection = _connection(host, c, settings)
    try:
        with ssh_session(connection, settings.contract, settings.conninfo, settings.address) as s:
            result = drain_host(
                s,
                options,
                progress,
                board,
                front="fab drain",
                resume_hint=RESUME_HINT,
                stop=stop,
            )
    except LeaseguardError as exc:
        print(_outcome_line((host, exc)))
        return EXIT_FAILED
    finally:
        connection.close()
    return _report_drain(host, result, json_output)


def _drain_fleet(
    hosts: list[str],
    c: Context,
    settings: FabricSettings,
    options: DrainOptions,
    progress: Any,
    json_output: bool,
    stop: threading.Event,
    board: StatusBoard | None = None,
) -> int:
    """Every host's facts looked up (in parallel), then one drain judged by the fleet rule."""
    with contextlib.ExitStack() as stack:
        opened = _for_each_host(hosts, lambda host: _open_session(host, c, settings))
        for _, result in opened:
            if isinstance(result, _Opened):
                stack.enter_context(result.stack)
        failed = [(host, r) for host, r in opened if isinstance(r, LeaseguardError)]
        if failed:
            for outcome in failed:
                print(_outcome_line(outcome))
            _say("no intake was paused: every host's facts are needed to judge the fleet")
            return EXIT_FAILED
        sessions = {host: r.session for host, r in opened}
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
                options,
                progress,
                board,
                front=f"fab drain ({','.join(hosts)})",
                resume_hint=RESUME_HINT,
                stop=stop,
                runners=[s.runner for s in sessions.values()],
                connect=first_that_connects([s.connect_writable for s in sessions.values()]),
            )
        except LeaseguardError as exc:
            print(_outcome_line(("fleet", exc)))
            return EXIT_FAILED
    return _report_drain("fleet", result, json_output)


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
        connection = _connection(host, c, settings)
        stack.callback(connection.close)
        session = stack.enter_context(
            ssh_session(connection, settings.contract, settings.conninfo, settings.address)
        )
        # Measured here, in parallel with the other hosts, only when a start time matters.
        started = session.facts.runtime_started_at is not None
        clock = offset_from_here(session.runner) if started else None
    except LeaseguardError as exc:
        stack.close()
        return host, exc
    except BaseException:
        stack.close()
        raise
    return host, _Opened(session, stack, clock)


def _report_drain(host: str, result: DrainResult, json_output: bool) -> int:
    """The drain's result; a failed drain prints only its failure, never a stale verdict."""
    if json_output:
        print(json.dumps(result.as_dict()))
    elif result.error is None and result.verdict is not None:
        print(result.verdict.timeline())
    if result.error is not None:
        print(_outcome_line((host, result.error)))
    if result.verdict is not None and not json_output:
        for warning in result.verdict.warnings:
            _say(f"warning: {warning}")
    return result.exit_status


# --- resume -------------------------------------------------------------------------------


@task(
    help={
        "job": "only this recorded job (repeatable; default: every recorded job)",
        "json_": "print what was resumed as JSON",
    },
    iterable=["job"],
)
@fleet
def resume(c: Context, job: list[str] | None = None, json_: bool = False) -> None:
    """Give back the intake pauses a drain recorded and never resumed (through the first host).

    Jobs an operator disabled without a drain have no record and are never touched.
    """
    from leaseguard.adapters.resume import resume_lines, resume_pauses  # pulls in the budgets code

    settings = _settings_or_exit(c)
    host = _hosts(c)[0]
    connection = _connection(host, c, settings)
    try:
        with tunnelled_conninfo(connection, settings.conninfo, settings.address) as conninfo:
            outcome = resume_pauses(
                conninfo,
                cron_database=settings.drain.cron_database,
                jobs=list(job or []) or None,
                connect_timeout_s=settings.contract.connect_timeout_s,
            )
    except LeaseguardError as exc:
        print(_outcome_line((host, exc)))
        raise Exit(code=EXIT_FAILED) from None
    finally:
        connection.close()
    print(json.dumps(outcome) if json_ else resume_lines(outcome))


def collection() -> Collection:
    """The task collection a fabfile exposes: `ns = collection()`.

    Also hands the running `fab` program the fleet executor. A collection's own config is
    merged only after the executor is chosen, so `tasks.executor_class` there would come
    too late; a user's fabric.yaml may still set it explicitly.
    """
    _use_fleet_executor()
    return Collection(guard, drain, resume)


def _use_fleet_executor() -> None:
    import fabric.main

    program = getattr(fabric.main, "program", None)
    if program is None:
        return
    if program.executor_class is Executor:
        program.executor_class = FleetExecutor
    _usage_errors_exit_2(program)


def _usage_errors_exit_2(program: Any) -> None:
    """A flag or task invoke cannot parse (`guard --bogus`, `--bogus guard`, a task name, a
    task flag's missing value) exits 2.

    invoke exits 1 on a ParseError, which reads as "the check failed". Its first pass over
    the command line takes only the flags it knows and leaves everything else, unknown flags
    before the task name included, to parse_tasks, which runs after the fabfile loads; so
    wrapping the running program's parse_tasks here turns those errors into usage errors.
    Only a core flag's own bad value (`fab -H` with nothing after it) fails in that first
    pass, before any fabfile exists, and keeps invoke's status (README, "Exit codes").
    """
    parse_tasks = program.parse_tasks
    if getattr(parse_tasks, "leaseguard_usage", False):
        return

    def parse_tasks_or_usage() -> None:
        try:
            parse_tasks()
        except ParseError as exc:
            raise Exit(f"{exc} (see fab --list, or fab --help TASK)", code=EXIT_USAGE) from None

    parse_tasks_or_usage.leaseguard_usage = True  # type: ignore[attr-defined]
    program.parse_tasks = parse_tasks_or_usage


__all__ = ["CONNECTION_KEYS", "FleetExecutor", "collection", "drain", "guard", "resume"]
