"""Ask a host what the protected system is configured with: task timeout and start time.

Each lookup is a command run on the host plus a pure parser (leaseguard.core.lookups). Only
"run this on that host" differs between the CLI (local subprocess), Fabric (an SSH
connection) and Ansible (the module on the host): that is the Runner here. Doing every
lookup of a host in one exec is leaseguard.adapters.host_lookup.
"""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, TypedDict, Unpack

from leaseguard.core.contract import Contract, RuntimeLookup, TaskTimeoutLookup
from leaseguard.core.errors import LookupFailed, TimeoutValueError
from leaseguard.core.lookups import (
    Argv,
    CommandResult,
    SystemdUnit,
    checked_env_name,
    command_argv,
    env_file_argv,
    env_value,
    exit_meaning,
    first_stderr_line,
    parse_env_file_line,
    parse_process_start,
    parse_systemctl_glob,
    parse_systemctl_show,
    pid_argv,
    process_env_argv,
    process_start_argv,
    systemd_argv,
    task_timeout_source,
)
from leaseguard.core.replicas import (
    Containers,
    container_argv,
    container_filter,
    is_unit_glob,
    read_containers,
    shared_variable,
    shown_command,
    sibling_warning,
)
from leaseguard.core.timeouts import parse_timeout_s
from leaseguard.core.timestamps import parse_timestamp
from leaseguard.core.verdict import RuntimeFacts, TaskTimeout

LOOKUP_TIMEOUT_S = 30.0


class Runner(Protocol):
    """Runs an argv on one host. `label` names the host in messages."""

    label: str

    def run(self, argv: Sequence[str]) -> CommandResult: ...


class LocalRunner:
    """Runs lookups on this machine (the `leaseguard` CLI on the app host itself)."""

    label = socket.gethostname()

    def run(self, argv: Sequence[str]) -> CommandResult:
        if shutil.which(argv[0]) is None:
            return CommandResult(127, "")
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                timeout=LOOKUP_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return CommandResult(124, "")
        return CommandResult(done.returncode, done.stdout, done.stderr)


class Given(TypedDict, total=False):
    """Facts a front already has (flags, an earlier Ansible task): not looked up again.

    `task_timeout_source` keeps the provenance of a value looked up earlier (Ansible's
    task_timeout module), so the verdict still names where the timeout came from.
    """

    task_timeout_s: float | None
    runtime_started_at: datetime | None
    task_timeout_source: str | None
    replicas: Sequence[str] | None  # what an earlier lookup's filter or glob matched


def resolve_runtime_facts(
    contract: Contract, runner: Runner, **given: Unpack[Given]
) -> RuntimeFacts:
    """Look up what was not given. A failed lookup raises, unless default_s is configured."""
    return resolve(contract, Lookups(runner), given)


def resolve(contract: Contract, lookups: Lookups, given: Given) -> RuntimeFacts:
    """The facts: those given, the rest from `lookups` (defaults where configured)."""
    warnings: list[str] = []
    task_timeout_s = given.get("task_timeout_s")
    if task_timeout_s is not None:
        source = given.get("task_timeout_source") or "given:task_timeout_s"
        timeout: TaskTimeout | None = TaskTimeout(
            task_timeout_s, source, assumed=source.startswith("default:")
        )
    elif contract.rows_carry_expiry:
        timeout = None  # rows carry their own expiry; no timeout is needed
    else:
        timeout = _task_timeout_or_default(contract.task_timeout, lookups, warnings)
    started = given.get("runtime_started_at")
    if started is None:
        looked_up = task_timeout_s is None and not contract.rows_carry_expiry
        variable = shared_variable(contract, timeout_looked_up=looked_up)
        started = _runtime_start_or_none(contract, lookups, variable, warnings)
    warnings[:0] = lookups.warnings
    replicas = {*lookups.replicas, *(given.get("replicas") or ())}
    return RuntimeFacts(timeout, started, tuple(warnings), tuple(sorted(replicas)))


def _task_timeout_or_default(
    spec: TaskTimeoutLookup, lookups: Lookups, warnings: list[str]
) -> TaskTimeout:
    try:
        return lookups.task_timeout(spec)
    except LookupFailed as exc:
        if spec.default_s is None:
            raise
        warnings.append(f"{exc}; assumed task_timeout.default_s={spec.default_s:g}")
        return TaskTimeout(spec.default_s, f"default:{task_timeout_source(spec)}", assumed=True)


def _runtime_start_or_none(
    contract: Contract, lookups: Lookups, variable: str | None, warnings: list[str]
) -> datetime | None:
    """Without a start time nothing is classed orphaned: the safe direction."""
    try:
        return lookups.runtime_start(contract.runtime, variable)
    except LookupFailed as exc:
        if contract.task_timeout.default_s is None:
            raise
        warnings.append(f"{exc}; no runtime start known, so no claim is classed orphaned")
        return None


class Lookups:
    """The lookups of one check on one host; one container command serves both facts.

    `ran`: results of commands already run together (host_lookup's one exec), by argv;
    those are judged from there, the rest run one exec each. `replicas` names what a
    filter or a unit glob matched; `warnings` what the verdict must say (siblings).
    """

    def __init__(self, runner: Runner, ran: Mapping[Argv, CommandResult] | None = None) -> None:
        self.runner = runner
        self._containers_seen: dict[Argv, Containers] = {}
        self._ran = dict(ran or {})
        self.replicas: list[str] = []
        self.warnings: list[str] = []

    def task_timeout(self, spec: TaskTimeoutLookup) -> TaskTimeout:
        source = task_timeout_source(spec)
        if spec.source == "fixed":
            assert spec.value_s is not None
            return TaskTimeout(spec.value_s, source)
        what = f"host {self.runner.label}: {source}"
        seconds = [
            self._seconds(raw, spec.variable, what, name)
            for name, raw in self._raw_task_timeouts(spec)
        ]
        return TaskTimeout(max(seconds), source)  # the longest: any replica may run a claim

    @staticmethod
    def _seconds(raw: str | None, variable: str, what: str, name: str | None) -> float:
        where = f"{what} ({name})" if name else what
        if raw is None:
            raise LookupFailed(f"{where}: variable {variable} is not set")
        try:
            return parse_timeout_s(raw, what=where)
        except TimeoutValueError as exc:
            raise LookupFailed(str(exc)) from None

    def _raw_task_timeouts(self, spec: TaskTimeoutLookup) -> list[tuple[str | None, str | None]]:
        """(replica, raw value) for each replica read; the replica is None for a single one."""
        match spec.source:
            case "docker" | "podman":
                variable = checked_env_name(spec.variable)
                found = self._containers(spec.source, spec.container, variable)
                return [
                    (self._replica_name(spec.container, r.name), r.value(variable))
                    for r in found.matches
                ]
            case "command":
                return [(None, self._command_output(spec))]
            case "systemd":
                assert spec.unit is not None
                return [
                    (self._unit_name(spec.unit, unit), env_value(unit.environment, spec.variable))
                    for unit in self._systemd(spec.unit)
                ]
            case "process":
                assert spec.pid_file is not None
                return [(None, self._process_env(spec.pid_file, spec.variable))]
            case _:
                assert spec.path is not None
                return [(None, self._env_file(spec.path, spec.variable))]

    def _command_output(self, spec: TaskTimeoutLookup) -> str:
        if container_filter(spec.container) is not None:
            raise LookupFailed(
                f"host {self.runner.label}: task_timeout.source 'command' runs in one "
                f"container, not in those a filter matches ({spec.container})"
            )
        what = f"command in {spec.engine} container {spec.container}"
        return self._run(list(command_argv(spec)), what)

    def runtime_start(self, spec: RuntimeLookup, variable: str | None = None) -> datetime | None:
        """The start time; over several replicas the OLDEST (a claim older than every
        replica's start is an orphan, one newer than any may run there). `variable`: the
        one the task timeout reads from the same container (one command serves both)."""
        match spec.source:
            case "docker" | "podman":
                found = self._containers(spec.source, spec.container, variable)
                for replica in found.matches:
                    self._replica_name(spec.container, replica.name)
                return min(replica.started_at for replica in found.matches)
            case "systemd":
                assert spec.unit is not None
                units = self._systemd(spec.unit)
                for unit in units:
                    self._unit_name(spec.unit, unit)
                return min(unit.active_since for unit in units)
            case "process":
                assert spec.pid_file is not None
                return self._process_start(spec.pid_file)
            case "fixed":
                assert spec.started_at is not None
                return parse_timestamp(spec.started_at, what="runtime.started_at")
            case _:
                return None

    # -- engines ---------------------------------------------------------------------------

    def _containers(self, engine: str, container: str, variable: str | None) -> Containers:
        """The containers `container` names (one, or a filter's running matches), read once."""
        argv = container_argv(engine, container, variable)
        if argv not in self._containers_seen:
            what = f"{engine} container {container}"
            out = self._run(list(argv), what, shown=shown_command(argv))
            found = read_containers(out, container, f"host {self.runner.label}: {what}")
            if found.siblings:
                self.warnings.append(sibling_warning(f"host {self.runner.label}", found))
            self._containers_seen[argv] = found
        return self._containers_seen[argv]

    def _replica_name(self, container: str, name: str) -> str | None:
        """A filter's match is named (and listed in the verdict); a named container is not."""
        if container_filter(container) is None:
            return None
        self.replicas.append(name)
        return name

    def _unit_name(self, pattern: str, unit: SystemdUnit) -> str | None:
        if not is_unit_glob(pattern):
            return None
        self.replicas.append(unit.name)
        return unit.name

    def _systemd(self, unit: str) -> list[SystemdUnit]:
        """The unit, or every ACTIVE unit a glob matches (`systemctl show` takes globs)."""
        out = self._run(list(systemd_argv(unit)), f"systemd unit {unit}")
        if is_unit_glob(unit):
            try:
                return parse_systemctl_glob(out, unit)
            except LookupFailed as exc:
                raise LookupFailed(f"host {self.runner.label}: {exc}") from None
        return [parse_systemctl_show(out, unit)]

    def _process_env(self, pid_file: str, variable: str) -> str | None:
        pid = self._pid(pid_file)
        name = checked_env_name(variable)
        out = self._run_allowing(
            list(process_env_argv(pid, name)),
            f"environment of pid {pid} ({pid_file})",
            allowed=(1,),
        )
        return None if out is None else out.rstrip("\x00\n").partition("=")[2]

    def _process_start(self, pid_file: str) -> datetime:
        pid = self._pid(pid_file)
        out = self._run(
            list(process_start_argv(pid)),
            f"start time of pid {pid} ({pid_file})",
        )
        return parse_process_start(out, f"pid {pid} ({pid_file})")

    def _pid(self, pid_file: str) -> int:
        out = self._run(list(pid_argv(pid_file)), f"pid file {pid_file}")
        text = out.strip()
        if not text.isdigit() or int(text) <= 0:
            raise LookupFailed(f"host {self.runner.label}: pid file {pid_file} holds no pid")
        return int(text)

    def _env_file(self, path: str, variable: str) -> str | None:
        name = checked_env_name(variable)
        out = self._run_allowing(
            list(env_file_argv(path, name)),
            f"env file {path}",
            allowed=(1,),
        )
        return None if out is None else parse_env_file_line(out, name)

    # -- running ---------------------------------------------------------------------------

    def _run(self, argv: list[str], what: str, *, shown: str | None = None) -> str:
        out = self._run_allowing(argv, what, allowed=(), shown=shown)
        assert out is not None
        return out

    def _run_allowing(
        self, argv: list[str], what: str, *, allowed: tuple[int, ...], shown: str | None = None
    ) -> str | None:
        """stdout of argv; None for an allowed 'not found' exit status; else LookupFailed.

        `shown` names a wrapped command in the message (its argv starts with `sh -c`)."""
        result = self._ran.get(tuple(argv)) or self.runner.run(argv)
        if result.exit_code == 0:
            return result.stdout
        if result.exit_code in allowed:
            return None
        said = "" if argv[1:2] == ["exec"] else first_stderr_line(result.stderr)
        raise LookupFailed(
            f"host {self.runner.label}: {what}: `{shown or shlex.join(argv[:3])}` "
            f"{exit_meaning(result.exit_code)}{f': {said}' if said else ''}"
        )
