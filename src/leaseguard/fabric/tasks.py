"""Fabric tasks `guard`, `drain`, `resume` (fabfile.py: `ns = collection()`) and their config;
what a task runs is imported when it runs: loading the collection imports no psycopg, and the
hosts' SSH connections open while the judging code loads."""

import contextlib
import difflib
import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

import fabric.main
from fabric import Config, Connection, Executor, task
from invoke.collection import Collection
from invoke.config import AmbiguousMergeError
from invoke.context import Context
from invoke.exceptions import Exit, ParseError, UncastableEnvVar

from leaseguard.adapters import ssh
from leaseguard.adapters.ssh import DatabaseAddress, SshOptions
from leaseguard.core import config_values as values
from leaseguard.core.contract import CONFIG_KEYS, CRON_BUDGETS_SECTION, Contract, load_contract
from leaseguard.core.errors import EXIT_USAGE, ConfigError

if TYPE_CHECKING:
    from leaseguard.orchestration.drain_run import DrainOptions

CONNECTION_KEYS = frozenset(
    {"dsn", "db_host", "db_port", "known_hosts", "accept_unknown_host_keys", "gateway"}
)
ACCEPT_VARIABLE = "FABRIC_LEASEGUARD_CONNECTION_ACCEPT_UNKNOWN_HOST_KEYS"
# DrainOptions' fields, named here so that loading the collection imports no psycopg.
DRAIN_KEYS = frozenset(
    {"poll_s", "deadline_s", "pause_cron_jobs", "cron_database", "cron_user", "cron_password"}
    | {"pause_command", "resume_command", "status_file", "metrics_file", "resume_retry_s"}
)
FLEET_HOSTS_KEY = "leaseguard_fleet_hosts"
CONFIG_UNMERGED = (
    "leaseguard: Fabric could not merge its config: a section under leaseguard: (such as "
    "connection: or drain:) given a single value where a mapping goes, or a FABRIC_* "
    "variable set over a list; fix fabric.yaml or the variable"
)
Opening = dict[str, Future[Connection]]  # each host's SSH connection, once opened


@dataclass(frozen=True)
class FabricSettings:
    """A task's settings; the DSN's address and `drain:` (they load psycopg) parsed at first use."""

    contract: Contract
    conninfo: str = field(repr=False)
    ssh: SshOptions
    db_given: tuple[str | None, int | None]  # connection.db_host, db_port
    drain_given: tuple[dict[str, Any], dict[str, Any]] = field(repr=False, hash=False)

    @cached_property
    def address(self) -> DatabaseAddress:
        return DatabaseAddress(*values.tunnel_far_end(self.conninfo, *self.db_given))

    @cached_property
    def drain(self) -> "DrainOptions":
        from leaseguard.orchestration.drain_run import drain_options

        section, flags = self.drain_given
        drain_options(section)  # fabric.yaml's own section is refused when wrong, flags or not
        return drain_options({**section, **flags})

    def parsed(self) -> "FabricSettings":
        _ = self.address, self.drain
        return self


def settings_from_config(config: Any, drain_flags: dict[str, Any] | None = None) -> FabricSettings:
    """`leaseguard:`: the contract keys, `connection:` and `drain:` (`drain_flags` given win)."""
    section = _plain(config.get("leaseguard", {}) or {})
    beside = {"connection", "drain", CRON_BUDGETS_SECTION}  # so a near miss names these too
    keys = {key.partition(".")[0] for key in CONFIG_KEYS} | beside
    values.reject_unknown(section, frozenset(keys), prefix="")
    connection = section.pop("connection", None) or {}
    if not isinstance(connection, dict):
        raise ConfigError("connection must be a mapping")
    values.reject_unknown(connection, CONNECTION_KEYS, prefix="connection.")
    drain = section.pop("drain", {}) or {}
    section.pop(CRON_BUDGETS_SECTION, None)  # read by `leaseguard budgets`
    contract = load_contract(section)
    # One connect budget for the whole path (each SSH hop, the database): `fab -t N`, else
    # `leaseguard.connect_timeout_s`, else `timeouts.connect`, else the contract's 10 s.
    given = {
        "fab -t": (config.get("connect_kwargs") or {}).get("timeout"),
        "connect_timeout_s": section.get("connect_timeout_s"),
        "timeouts.connect": (config.get("timeouts") or {}).get("connect"),
    }
    if set_by := [key for key, value in given.items() if value is not None]:
        contract = replace(contract, connect_timeout_s=values.whole_number(given, set_by[0], None))
    # A FABRIC_LEASEGUARD_* variable is a string here: "true"/"false" read as booleans.
    accept = connection.get("accept_unknown_host_keys")
    if isinstance(accept, str) and accept.lower() in ("true", "false"):
        connection["accept_unknown_host_keys"] = accept.lower() == "true"
    # Over a YAML boolean Fabric reads any non-empty variable as true, "false" too: not here.
    raw = os.environ.get(ACCEPT_VARIABLE, "").strip().lower()
    if accept is True and raw not in ("", "true", "1"):
        if raw != "false":
            raise ConfigError(f"{ACCEPT_VARIABLE} must be true or false")
        connection["accept_unknown_host_keys"] = False
    text = partial(values.optional_text, connection, prefix="connection.")
    accepts = values.flag(connection, "accept_unknown_host_keys", False, prefix="connection.")
    ssh_options = SshOptions(
        known_hosts=text("known_hosts"),
        accept_unknown_host_keys=accepts,
        gateway=text("gateway"),
        connect_timeout_s=contract.connect_timeout_s,
    )
    dsn = text("dsn") if connection.get("dsn") != "" else None  # "": from LEASEGUARD_DSN too
    dsn = dsn or os.environ.get("LEASEGUARD_DSN", "")
    port = values.optional_port(connection, "db_port", prefix="connection.")
    given_flags = {key: value for key, value in (drain_flags or {}).items() if value is not None}
    return FabricSettings(contract, dsn, ssh_options, (text("db_host"), port), (drain, given_flags))


def _plain(value: Any) -> Any:
    """invoke's DataProxy as plain dicts/lists; unset keys (None) left out, as if absent."""
    if hasattr(value, "keys"):
        items = {str(k): _plain(value[k]) for k in value.keys()}  # noqa: SIM118
        return {k: v for k, v in items.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def connection_to(host: str, c: Context, settings: FabricSettings) -> Connection:
    # Fabric's Connection writes to the config it is given (re-merging it, empty meanwhile) while
    # other hosts' threads may run: each host gets its own clone, made here on the task's thread.
    config = c.config.clone() if isinstance(c.config, Config) else None
    return ssh.make_connection(host, settings.ssh, config)


@contextlib.contextmanager
def connecting(hosts: list[str], c: Context, settings: FabricSettings) -> Iterator[Opening]:
    """Each host's SSH connection opening on a daemon thread from now (at most 64 at once; a run
    that ends early never waits for a host still connecting); closed at the end, or once open."""
    slots = threading.Semaphore(64)

    def open_one(connection: Connection, opened: Future[Connection]) -> None:
        with slots:
            try:
                ssh.open_connection(connection)
                opened.set_result(connection)
            except BaseException as exc:  # raised again to whoever takes the host over
                opened.set_exception(exc)
                connection.close()

    connections: Opening = {host: Future() for host in dict.fromkeys(hosts)}
    try:
        for host, opened in connections.items():
            args = (connection_to(host, c, settings), opened)
            threading.Thread(target=open_one, args=args, name="leaseguard-ssh", daemon=True).start()
        yield connections
    finally:  # each one closed now, or once it has opened (a host nobody took over)
        for opened in connections.values():
            opened.add_done_callback(lambda done: done.exception() or done.result().close())


@contextlib.contextmanager
def as_usage_error() -> Iterator[None]:
    """A config refused ends the task as a usage error (exit 2)."""
    try:
        yield
    except ConfigError as exc:
        raise Exit(f"leaseguard: {exc}", code=EXIT_USAGE) from None


def settings_or_exit(c: Context, drain_flags: dict[str, Any] | None = None) -> FabricSettings:
    with as_usage_error():
        return settings_from_config(c.config, drain_flags).parsed()


class FleetExecutor(Executor):  # type: ignore[misc]
    """Runs this module's tasks once with every -H host (Fabric: once per host, serially)."""

    def execute(self, *tasks: Any) -> Any:
        try:
            return super().execute(*tasks)
        except (AmbiguousMergeError, UncastableEnvVar):  # their text quotes values: secrets
            raise Exit(CONFIG_UNMERGED, code=EXIT_USAGE) from None

    def expand_calls(self, calls: list[Any], apply_hosts: bool = True) -> list[Any]:
        expanded: list[Any] = []
        host_str = self.core[0].args.hosts.value if apply_hosts else None
        for call in calls:
            body = getattr(getattr(call, "task", call), "body", None)
            if getattr(body, "__module__", None) == __name__:
                self.config[FLEET_HOSTS_KEY] = host_str.split(",") if host_str else []
                expanded.append(call)
            else:
                expanded.extend(super().expand_calls([call], apply_hosts=apply_hosts))
        return expanded


def fleet_hosts(c: Context) -> list[str]:
    if isinstance(c, Connection):  # run by a plain Fabric executor: one host per call
        return [c.original_host]
    hosts = list(c.config.get(FLEET_HOSTS_KEY) or [])
    if not hosts:
        raise Exit("leaseguard: give the hosts to check with -H host1,host2", code=EXIT_USAGE)
    for host in hosts:
        if not host.rpartition("@")[2].partition(":")[0]:  # "root@", ":22", ""
            raise Exit(f"leaseguard: -H {host!r} names no host", code=EXIT_USAGE)
    return hosts


@task(help={"json_": "print a JSON list (one object per host) instead of timeline lines"})
def guard(c: Context, json_: bool = False) -> None:
    """Judge every host's live leases: exit 0 proceed, 75 defer, 1 failed.

    The hosts are looked up in parallel, then judged together: one query over one database
    connection (through the first host's tunnel), each host by its own facts.
    """
    with as_usage_error():
        settings = settings_from_config(c.config)
    hosts = fleet_hosts(c)
    with connecting(hosts, c, settings) as connections, as_usage_error():
        settings.parsed()  # the DSN and `drain:` (psycopg loads) while the hosts connect
        from leaseguard.fabric.hosts import guard_hosts

        guard_hosts(settings, hosts, connections, json_)


@task(
    help={
        "deadline_s": "give up after N seconds (default and maximum: the longest remaining "
        "lease seen at the start)",
        "poll_s": "seconds between polls (default 5)",
        "pause_cron_job": "pg_cron job to deactivate during the drain and reactivate after "
        "(repeatable); shared intake: paused once for all hosts, resumed after the last",
        "resume_retry_s": "retry a failed resume for up to N seconds (default 60)",
        "json_": "print a JSON list (one object per host; one, host fleet, for a fleet "
        "drain) instead of timeline lines",
        "status_file": "rewrite a JSON snapshot of the drain (every host) here after every "
        "poll; read it with `leaseguard status PATH`",
        "metrics_file": "rewrite Prometheus text metrics here after every poll",
        "run": "once drained, run this shell command on every host with intake still held; "
        "intake is given back only after every host's command has ended (exit status: the "
        "first failing host's)",
    },
    iterable=["pause_cron_job"],
)
def drain(
    c: Context,
    deadline_s: float | None = None,
    poll_s: float | None = None,
    pause_cron_job: list[str] | None = None,
    resume_retry_s: float | None = None,
    json_: bool = False,
    status_file: str | None = None,
    metrics_file: str | None = None,
    run: str | None = None,
) -> None:
    """Pause intake, wait until no live lease remains (lease-bounded), resume intake.

    With pg_cron jobs to pause (shared intake), the fleet is drained as one: intake is
    held once, the wait judges every host's facts with the fleet rule, and intake is
    given back once, after the wait (and after --run's command on every host), on every
    exit path (Ctrl-C, SIGTERM and SIGHUP included).
    """
    from leaseguard.fabric.hosts import drain_hosts

    if run is not None and not run.strip():  # `--run "$UNSET"`: never a drain without it
        raise Exit("leaseguard: --run was given no command; nothing was paused", code=EXIT_USAGE)
    given = {"deadline_s": deadline_s, "poll_s": poll_s, "resume_retry_s": resume_retry_s}
    files = {"status_file": status_file or None, "metrics_file": metrics_file or None}
    flags = {**given, **files, "pause_cron_jobs": pause_cron_job or None}
    drain_hosts(c, settings_or_exit(c, flags), json_, run)


@task(
    help={
        "job": "only this recorded job (repeatable; default: every recorded job)",
        "json_": "print what was resumed as JSON",
        "force": "also give back holds whose holder still runs or cannot be checked",
    },
    iterable=["job"],
)
def resume(
    c: Context, json_: bool = False, job: list[str] | None = None, force: bool = False
) -> None:
    """Give back the intake pauses a drain recorded and never resumed (through the first host).

    Jobs an operator disabled without a drain have no record and are never touched; a hold
    whose holder still runs here, or ran on another machine, is kept (exit 75) unless --force.
    """
    from leaseguard.fabric.hosts import resume_through

    settings, host = settings_or_exit(c), fleet_hosts(c)[0]
    connection = connection_to(host, c, settings)
    resume_through(host, connection, settings, json_, jobs=job or None, force=force)


def collection() -> Collection:
    """The tasks; gives `fab` the fleet executor, and exit 2 (not 1) for a bad flag or task."""
    program = getattr(fabric.main, "program", None)
    if program is not None and program.executor_class is Executor:  # a collection's comes late
        program.executor_class = FleetExecutor
        parse_tasks = program.parse_tasks

        def parse_tasks_or_usage() -> None:
            """A near miss of a task or flag invoke could not parse, and where to look."""
            try:
                parse_tasks()
            except ParseError as exc:
                hint, see = "", " (see fab --list, or fab --help TASK)"
                unknown = re.match(r"No idea what '([^']+)' is!", str(exc))
                if unknown and (tasks := getattr(program, "collection", None)) is not None:
                    known = list(tasks.task_names)
                    for argument in (a for t in tasks.task_names for a in tasks[t].get_arguments()):
                        known += [f"--{n}" if len(n) > 1 else f"-{n}" for n in argument.names]
                    close = difflib.get_close_matches(unknown[1].partition("=")[0], known, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                raise Exit(f"{exc}{hint}{see}", code=EXIT_USAGE) from None

        program.parse_tasks = parse_tasks_or_usage
    # Every `leaseguard:` key, unset: invoke reads `FABRIC_<KEY_PATH>` (a FABRIC_LEASEGUARD_*
    # variable) only for a key it holds.
    tree: dict[str, Any] = {"connection": dict.fromkeys(CONNECTION_KEYS)}
    tree["drain"] = dict.fromkeys(DRAIN_KEYS)
    for key in CONFIG_KEYS:
        section, _, leaf = key.rpartition(".")  # one level at most, as `lease.multiplier`
        (tree.setdefault(section, {}) if section else tree)[leaf] = None
    ns = Collection(guard, drain, resume)
    ns.configure({"leaseguard": tree})
    return ns
