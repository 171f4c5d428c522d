"""A host's task timeout, start time, clock: commands a Runner runs; failures name the host."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, TypedDict, Unpack

from leaseguard.core import lookups
from leaseguard.core.contract import Contract, RuntimeLookup, TaskTimeoutLookup
from leaseguard.core.errors import LookupFailed, TimeoutValueError
from leaseguard.core.fleet import ClockOffset
from leaseguard.core.lookups import Argv, CommandResult, Containers, Replica, container_filter
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
        try:  # errors= reads text: bytes that are not UTF-8 fail the parse, not the check
            done = subprocess.run(
                list(argv), capture_output=True, errors="replace", timeout=LOOKUP_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return CommandResult(124, "")
        return CommandResult(done.returncode, done.stdout, done.stderr)


def offset_from_here(runner: Runner) -> ClockOffset:
    """The host's clock minus this machine's, read with `date +%s.%N` (hosts need no Python)."""
    before = time.time()
    result = runner.run(["date", "+%s.%N"])
    clock = host_clock(result.stdout if result.exit_code == 0 else "", before, time.time())
    if clock is None:
        raise LookupFailed(f"host {runner.label}: cannot read its clock (date)")
    return clock


def host_clock(reading: str, before: float, after: float) -> ClockOffset | None:
    """The host's clock (`reading`: `date +%s.%N`, between `before` and `after`) minus ours."""
    try:
        return ClockOffset(float(reading) - (before + after) / 2, (after - before) / 2)
    except ValueError:
        return None


class Given(TypedDict, total=False):
    """Facts a front already has (flags, an earlier Ansible task's lookup): not looked up."""

    task_timeout_s: float | None
    runtime_started_at: datetime | None
    task_timeout_source: str | None
    replicas: Sequence[str] | None  # what an earlier lookup's filter or glob matched


def resolve_runtime_facts(
    contract: Contract, runner: Runner, **given: Unpack[Given]
) -> RuntimeFacts:
    """The facts given, the rest looked up (a failure raises unless task_timeout.default_s)."""
    lookup, warnings = Lookups(runner), []
    spec = contract.task_timeout
    seconds = given.get("task_timeout_s")
    timeout: TaskTimeout | None = None  # None: the rows carry their own expiry
    if seconds is not None:
        source = given.get("task_timeout_source") or "given:task_timeout_s"
        timeout = TaskTimeout(seconds, source, assumed=source.startswith("default:"))
    elif not contract.rows_carry_expiry:
        try:
            timeout = lookup.task_timeout(spec)
        except LookupFailed as exc:
            if spec.default_s is None:
                raise
            warnings.append(f"{exc}; assumed task_timeout.default_s={spec.default_s:g}")
            source = f"default:{lookups.task_timeout_source(spec)}"
            timeout = TaskTimeout(spec.default_s, source, assumed=True)
    started = given.get("runtime_started_at")
    if started is None:
        looked_up = seconds is None and not contract.rows_carry_expiry
        variable = lookups.shared_variable(contract, timeout_looked_up=looked_up)
        try:
            started = lookup.runtime_start(contract.runtime, variable)
        except LookupFailed as exc:  # no start known: no claim is classed orphaned (safe)
            if spec.default_s is None:
                raise
            warnings.append(f"{exc}; no runtime start known, so no claim is classed orphaned")
    matched = {*lookup.replicas, *(given.get("replicas") or ())}
    return RuntimeFacts(timeout, started, (*lookup.warnings, *warnings), tuple(sorted(matched)))


class Lookups:
    """One check's lookups on one host; `replicas`: what a filter or glob matched."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.host = f"host {runner.label}"
        self._containers_seen: dict[Argv, Containers] = {}
        self._pids: dict[str, int] = {}
        self.replicas: list[str] = []
        self.warnings: list[str] = []

    def task_timeout(self, spec: TaskTimeoutLookup) -> TaskTimeout:
        """The timeout; over several replicas the LONGEST (any of them may run a claim)."""
        source = lookups.task_timeout_source(spec)
        raw: list[tuple[str | None, str | None]]  # (replica: None for a single one, value)
        match spec.source:
            case "fixed":
                assert spec.value_s is not None
                return TaskTimeout(spec.value_s, source)
            case "docker" | "podman":
                variable = lookups.checked_env_name(spec.variable)
                named = container_filter(spec.container) is not None
                found = self._containers(spec.source, spec.container, variable)
                raw = [(r.name if named else None, r.value(variable)) for r in found]
            case "systemd":
                assert spec.unit is not None
                named = lookups.is_unit_glob(spec.unit)
                units = self._systemd(spec.unit, lookups.checked_env_name(spec.variable))
                raw = [
                    (u.name if named else None, lookups.env_value(u.environment, spec.variable))
                    for u in units
                ]
            case "command":
                if container_filter(spec.container) is not None:
                    raise LookupFailed(
                        f"{self.host}: task_timeout.source 'command' runs in one "
                        f"container, not in those a filter matches ({spec.container})"
                    )
                argv = (spec.engine, "exec", spec.container, *spec.command)
                what = f"command in {spec.engine} container {spec.container}"
                raw = [(None, self._output(argv, what))]
            case "process":
                assert spec.pid_file is not None
                pid, name = self._pid(spec.pid_file), lookups.checked_env_name(spec.variable)
                what = f"environment of pid {pid} ({spec.pid_file})"
                out = self._output(lookups.process_env_argv(pid, name), what, absent_ok=True)
                raw = [(None, None if out is None else out.rstrip("\x00\n").partition("=")[2])]
            case _:
                assert spec.path is not None
                name = lookups.checked_env_name(spec.variable)
                argv = lookups.env_file_argv(spec.path, name)
                out = self._output(argv, f"env file {spec.path}", absent_ok=True)
                raw = [(None, None if out is None else lookups.parse_env_file_line(out, name))]
        what, seconds = f"{self.host}: {source}", []
        for replica, value in raw:
            where = f"{what} ({replica})" if replica else what
            if value is None:
                raise LookupFailed(f"{where}: variable {spec.variable} is not set")
            try:
                seconds.append(lookups.parse_timeout_s(value, what=where))
            except TimeoutValueError as exc:
                raise LookupFailed(str(exc)) from None
        return TaskTimeout(max(seconds), source)

    def runtime_start(self, spec: RuntimeLookup, variable: str | None = None) -> datetime | None:
        """The start time; over several replicas the OLDEST (a newer claim may run there)."""
        match spec.source:
            case "docker" | "podman":
                found = self._containers(spec.source, spec.container, variable)
                return min(replica.started_at for replica in found)
            case "systemd":
                assert spec.unit is not None
                return min(unit.active_since for unit in self._systemd(spec.unit))
            case "process":
                assert spec.pid_file is not None
                pid = self._pid(spec.pid_file)
                what = f"start time of pid {pid} ({spec.pid_file})"
                out = self._output(lookups.process_start_argv(pid), what) or ""
                return lookups.parse_process_start(out, f"pid {pid} ({spec.pid_file})")
            case "fixed":
                assert spec.started_at is not None
                return lookups.parse_timestamp(spec.started_at, what="runtime.started_at")
            case _:
                return None

    def _containers(self, engine: str, container: str, variable: str | None) -> list[Replica]:
        """The container, or a filter's running matches (listed in the verdict), read once."""
        argv = lookups.container_argv(engine, container, variable)
        if argv not in self._containers_seen:
            what = f"{engine} container {container}"
            out = self._output(argv, what, shown=lookups.shown_command(argv)) or ""
            found = lookups.read_containers(out, container, f"{self.host}: {what}")
            if found.siblings:
                self.warnings.append(lookups.sibling_warning(self.host, found))
            if container_filter(container) is not None:
                self.replicas += [replica.name for replica in found.matches]
            self._containers_seen[argv] = found
        return list(self._containers_seen[argv].matches)

    def _systemd(self, unit: str, variable: str | None = None) -> list[lookups.SystemdUnit]:
        """The unit, or every running unit a glob matches (listed in the verdict)."""
        argv = lookups.systemd_argv(unit, variable)
        out = self._output(argv, f"systemd unit {unit}", shown="systemctl show") or ""
        if not lookups.is_unit_glob(unit):
            return [lookups.parse_systemctl_show(out, unit)]
        try:
            units = lookups.parse_systemctl_glob(out, unit)
        except LookupFailed as exc:
            raise LookupFailed(f"{self.host}: {exc}") from None
        self.replicas += [u.name for u in units]
        return units

    def _pid(self, pid_file: str) -> int:
        """The pid the file holds, read once per check (the timeout and start share it)."""
        if pid_file not in self._pids:
            text = (self._output(("cat", pid_file), f"pid file {pid_file}") or "").strip()
            if not text.isdigit() or int(text) <= 0:
                raise LookupFailed(f"{self.host}: pid file {pid_file} holds no pid")
            self._pids[pid_file] = int(text)
        return self._pids[pid_file]

    def _output(
        self, argv: Argv, what: str, *, shown: str = "", absent_ok: bool = False
    ) -> str | None:
        """stdout (None only for status 1 if `absent_ok`: grep found nothing), else LookupFailed."""
        result = self.runner.run(list(argv))
        if result.exit_code == 0:
            return result.stdout
        if absent_ok and result.exit_code == 1:
            return None
        said = "" if argv[1:2] == ("exec",) else lookups.first_stderr_line(result.stderr)
        raise LookupFailed(
            f"{self.host}: {what}: `{shown or shlex.join(argv[:3])}` "
            f"{lookups.exit_meaning(result.exit_code)}{f': {said}' if said else ''}"
        )


# Through become, ansible's ssh runs on a tty (stderr merged, CRLF): stderr follows a marker.
_TTY_SCRIPT = (
    'm="@@leaseguard $1"; shift; printf "%s\\n" "$m out@@"; '
    '{ e=$("$@" </dev/null 2>&1 1>&3 3>&-); s=$?; } 3>&1; '
    'printf "\\n%s %d\\n%s" "$m err@@" "$s" "$e"; exit "$s"'
)


def tty_argv(argv: Argv, nonce: str) -> Argv:
    """`argv` run so that its stdout, exit status and stderr can be told apart on a tty."""
    return ("sh", "-c", _TTY_SCRIPT, "sh", nonce, *argv)


def split_tty(result: CommandResult, nonce: str) -> CommandResult:
    """`tty_argv`'s command's result; without both markers (become failed): output, status >= 1."""
    text = result.stdout.replace("\r\n", "\n")
    out, err = f"@@leaseguard {nonce} out@@\n", f"\n@@leaseguard {nonce} err@@ "
    start, stop = text.find(out), text.rfind(err)
    if start < 0 or stop < start + len(out):
        return CommandResult(result.exit_code or 1, "", text)
    status, newline, stderr = text[stop + len(err) :].partition("\n")
    if not (newline and (code := status.strip()).isascii() and code.isdigit()):
        return CommandResult(result.exit_code or 1, "", text)
    return CommandResult(int(code), text[start + len(out) : stop], stderr)
