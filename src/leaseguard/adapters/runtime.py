"""A host's timeout, start and clock (the clock in the first lookup's exec); a checked restart."""

import re
import shlex
import socket
import subprocess
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, TypedDict, Unpack

from leaseguard.core import lookups, restart
from leaseguard.core.contract import Contract, RuntimeLookup, TaskTimeoutLookup
from leaseguard.core.errors import LookupFailed, TimeoutValueError
from leaseguard.core.fleet import ClockOffset
from leaseguard.core.lookups import Argv, CommandResult, Replica, container_filter, env_value
from leaseguard.core.verdict import RuntimeFacts, TaskTimeout

LOOKUP_TIMEOUT_S = 30.0
POLL_S = 2.0  # how often a restart's new start time is read (the restart role's delay: 2)


class Runner(Protocol):
    """Runs an argv on one host. `label` names the host in messages."""

    label: str

    def run(self, argv: Sequence[str]) -> CommandResult: ...


class LocalRunner:
    """Runs lookups on this machine (the `leaseguard` CLI on the app host itself)."""

    label = socket.gethostname()

    def run(self, argv: Sequence[str]) -> CommandResult:
        try:  # errors= reads text: bytes that are not UTF-8 fail the parse, not the check
            done = subprocess.run(
                list(argv), capture_output=True, errors="replace", timeout=LOOKUP_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return CommandResult(124, "")
        except (FileNotFoundError, PermissionError):  # not found, or not executable
            return CommandResult(127, "")
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
    """The host's clock minus ours from a whole `date +%s.%N` line read between the two times."""
    if not re.fullmatch(r"\d+\.\d+", reading.strip()):
        return None
    return ClockOffset(float(reading) - (before + after) / 2, (after - before) / 2)


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
    lookup, warnings, spec = Lookups(runner), [], contract.task_timeout
    timeout: TaskTimeout | None = None  # None: the rows carry their own expiry
    if (seconds := given.get("task_timeout_s")) is not None:
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
        try:
            started = lookup.runtime_start(contract.runtime)
        except LookupFailed as exc:  # no start known: no claim is classed orphaned (safe)
            if spec.default_s is None:
                raise
            warnings.append(f"{exc}; no runtime start known, so no claim is classed orphaned")
    replicas = tuple(sorted({*lookup.replicas, *(given.get("replicas") or ())}))
    return RuntimeFacts(timeout, started, (*dict.fromkeys(lookup.warnings), *warnings), replicas)


class Lookups:
    """One check's lookups on one host; `replicas`: what a filter or glob matched."""

    def __init__(self, runner: Runner) -> None:
        self.runner, self.host = runner, f"host {runner.label}"
        self.ran: dict[Argv, CommandResult] = {}  # each command runs once per check
        self._variables: dict[tuple[str, str], str] = {}  # the timeout's, by engine and container
        self.replicas: list[str] = []  # these two may repeat: a container read for both facts
        self.warnings: list[str] = []

    def task_timeout(self, spec: TaskTimeoutLookup) -> TaskTimeout:
        """The timeout; over several replicas the LONGEST (any of them may run a claim)."""
        source, name = lookups.task_timeout_source(spec), spec.variable
        raw: list[tuple[str | None, str | None]]  # (replica: None for a single one, value)
        if spec.source not in ("fixed", "command") and not lookups.ENV_NAME.fullmatch(name):
            raise LookupFailed(f"variable name {name!r} is not a valid environment variable name")
        match spec.source:
            case "fixed":
                assert spec.value_s is not None
                return TaskTimeout(spec.value_s, source)
            case "docker" | "podman" | "systemd":
                if spec.source != "systemd":  # the start's container command prints it too
                    self._variables[spec.source, spec.container] = name
                found, many = self._replicas(spec, name)
                raw = [(r.name if many else None, env_value(r.entries, name)) for r in found]
            case "command":
                if container_filter(spec.container) is not None:
                    raise LookupFailed(
                        f"{self.host}: task_timeout.source 'command' runs in one "
                        f"container, not in those a filter matches ({spec.container})"
                    )
                argv = (spec.engine, "exec", spec.container, *spec.command)
                what = f"command in {spec.engine} container {spec.container}"
                raw = [(None, self._output(argv, what))]
            case "process":  # the environment is filtered on the host: the rest of it stays there
                pid = self._pid(spec.pid_file)
                argv = ("grep", "-z", "-m1", "-e", f"^{name}=", f"/proc/{pid}/environ")
                what = f"environment of pid {pid} ({spec.pid_file})"
                out = self._output(argv, what, absent_ok=True)
                raw = [(None, None if out is None else out.rstrip("\x00\n").partition("=")[2])]
            case _:  # every line is grepped: the last assignment wins
                assert spec.path is not None
                argv = ("grep", "-E", "-e", f"^[[:space:]]*(export[[:space:]]+)?{name}=", spec.path)
                out = self._output(argv, f"env file {spec.path}", absent_ok=True)
                raw = [(None, None if out is None else lookups.parse_env_file_line(out))]
        what, seconds = f"{self.host}: {source}", []
        for replica, value in raw:
            where = f"{what} ({replica})" if replica else what
            if value is None:
                raise LookupFailed(f"{where}: variable {name} is not set")
            try:
                seconds.append(lookups.parse_timeout_s(value, what=where))
            except TimeoutValueError as exc:
                raise LookupFailed(str(exc)) from None
        return TaskTimeout(max(seconds), source)

    def runtime_start(self, spec: RuntimeLookup) -> datetime | None:
        """The start time; over several replicas the OLDEST (a newer claim may run there)."""
        match spec.source:
            case "docker" | "podman" | "systemd":
                variable = self._variables.get((spec.source, spec.container))
                found, _many = self._replicas(spec, variable)
                return min(replica.started_at for replica in found)
            case "process":
                pid = self._pid(spec.pid_file)
                script = f"getconf CLK_TCK; grep '^btime ' /proc/stat; cat /proc/{pid}/stat"
                what = f"start time of pid {pid} ({spec.pid_file})"
                out = self._output(("sh", "-c", script), what) or ""
                return lookups.parse_process_start(out, f"pid {pid} ({spec.pid_file})")
            case "fixed":
                assert spec.started_at is not None
                return lookups.parse_timestamp(spec.started_at, what="runtime.started_at")
            case _:
                return None

    def _replicas(
        self, spec: TaskTimeoutLookup | RuntimeLookup, variable: str | None
    ) -> tuple[list[Replica], bool]:
        """The container or unit, or each running match of a filter or glob (True: listed)."""
        source, target = spec.source, spec.unit if spec.source == "systemd" else spec.container
        assert target is not None
        if source == "systemd":
            many, what = lookups.is_unit_glob(target), f"systemd unit {target}"
            argv, shown = lookups.systemd_argv(target, variable), "systemctl show"
        else:
            many, what = container_filter(target) is not None, f"{source} container {target}"
            argv = lookups.container_argv(source, target, variable)
            shown = f"{source} ps --filter {target}" if many else f"{source} inspect"
        out = self._output(argv, what, shown=shown) or ""
        if source != "systemd":
            found, siblings = lookups.read_containers(out, target, f"{self.host}: {what}")
            if siblings:
                (project, service), name = found[0].compose, found[0].name
                self.warnings.append(
                    f"{self.host}: container {name} has running compose siblings "
                    f"({', '.join(siblings)}) of service {service!r} (project {project!r}) that "
                    "may hold claims this judgment does not see; to judge them all, name them "
                    f"with a filter: container: label={lookups.COMPOSE_SERVICE}={service}"
                )
        elif not many:
            found = [lookups.parse_systemctl_show(out, target)]
        else:
            try:
                found = lookups.parse_systemctl_glob(out, target)
            except LookupFailed as exc:
                raise LookupFailed(f"{self.host}: {exc}") from None
        if many:
            self.replicas += [replica.name for replica in found]
        return found, many

    def _pid(self, pid_file: str | None) -> int:
        """The pid the file holds (read once: the timeout and start share it)."""
        assert pid_file is not None
        text = (self._output(("cat", pid_file), f"pid file {pid_file}") or "").strip()
        if not text.isdigit() or int(text) <= 0:
            raise LookupFailed(f"{self.host}: pid file {pid_file} holds no pid")
        return int(text)

    def _output(
        self, argv: Argv, what: str, *, shown: str = "", absent_ok: bool = False
    ) -> str | None:
        """stdout (None only for status 1 if `absent_ok`: grep found nothing), else LookupFailed."""
        if argv not in self.ran:
            self.ran[argv] = self.runner.run(list(argv))
        if (result := self.ran[argv]).exit_code == 0:
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
    status, newline, stderr = text[stop + len(err) :].partition("\n")
    code = status.strip()
    if start < 0 or stop < start + len(out) or not (newline and code.isascii() and code.isdigit()):
        return CommandResult(result.exit_code or 1, "", text)
    return CommandResult(int(code), text[start + len(out) : stop], stderr)


# Each exec is a login (about 90 ms through Ansible's ssh): these run in the next command's.
CLOCK_FIRST = 'printf "%s\\n" "$(date +%s.%N)"'
# The restart ($1) and its status line, then the next command if it succeeded (its stderr if not).
_RESTART_FIRST = (
    'e=$(eval "$1" 2>&1 >/dev/null); s=$?; echo "$s"; '
    '[ "$s" = 0 ] || { printf "%s\\n" "$e" >&2; exit "$s"; }; shift'
)


class FirstLine:
    """A runner running `script` (one line of output) in the exec of the first command it runs."""

    def __init__(self, runner: Runner, script: str, *args: str) -> None:
        self.runner, self.label, self.script, self.args = runner, runner.label, script, args
        self.ran: CommandResult | None = None  # the first exec's whole result
        self.line: str | None = None  # the script's line, if whole (a cut one is never taken)
        self.span = (0.0, 0.0)  # when that exec was sent and when it answered

    def run(self, argv: Sequence[str]) -> CommandResult:
        if self.ran is not None:
            return self.runner.run(argv)
        before = time.time()
        script = ["sh", "-c", f'{self.script}; exec "$@"', "sh", *self.args, *argv]
        self.ran, self.span = self.runner.run(script), (before, time.time())
        line, newline, stdout = self.ran.stdout.partition("\n")
        self.line = line.strip() if newline else None
        return self.ran._replace(stdout=stdout)


def look_up_host(
    contract: Contract, runner: Runner, **given: Unpack[Given]
) -> tuple[RuntimeFacts, ClockOffset | None]:
    """The facts not given and the host's clock minus ours (None: no start time to compare)."""
    first = FirstLine(runner, CLOCK_FIRST)
    facts = resolve_runtime_facts(contract, first, **given)
    clock = host_clock(first.line or "", *first.span)
    if clock is None and facts.runtime_started_at is not None:
        clock = offset_from_here(runner)
    return facts, clock


def restart_runtime(
    runner: Runner,
    spec: restart.RestartSpec,
    contract: Contract,
    lookup: dict[str, Any] | None,
    *,
    check_mode: bool = False,
) -> dict[str, Any]:
    """runtime_restart's result: restart, then read the start time every POLL_S until it moves."""
    spec.check(lookup)
    if check_mode:
        return spec.would_restart()
    argv, first = spec.argv, FirstLine(runner, _RESTART_FIRST, shlex.join(spec.argv))
    # Checked: the restart runs in the exec of the first read of the new start.
    started, error = _read_start(first, contract) if spec.verifies else (None, None)
    if first.ran is None:
        done = runner.run(list(argv))
    else:  # a status line lost (a cut exec) is a failed restart: its start is never read as moved
        code = 0 if first.line == "0" else first.ran.exit_code or 1
        done = CommandResult(code, "", first.ran.stderr)
    result = spec.result(argv, done.exit_code)
    if done.exit_code != 0:
        return {**result, "failed": True, "msg": spec.failed_message(done)}
    before = restart.start_of(lookup)
    if not spec.verifies:
        return {**result, "before": before, "msg": spec.restarted_message(before, None)}
    ends_at = time.monotonic() + spec.verify_timeout_s
    while not (moved := restart.start_moved(before["runtime_started_epoch_s"], started)):
        if (left := ends_at - time.monotonic()) <= 0:
            break
        time.sleep(min(POLL_S, left))
        started, error = _read_start(runner, contract)  # e.g. still starting: until the deadline
    result.update(before=before, after=restart.start_of(started))
    if moved:
        return {**result, "msg": spec.restarted_message(before, result["after"])}
    return {**result, "failed": True, "msg": spec.not_moved_message(before, started, error)}


def _read_start(runner: Runner, contract: Contract) -> tuple[datetime | None, LookupFailed | None]:
    try:
        return Lookups(runner).runtime_start(contract.runtime), None
    except LookupFailed as exc:
        return None, exc
