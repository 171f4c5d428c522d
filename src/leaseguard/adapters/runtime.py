"""Ask a host what the protected system is configured with: task timeout and start time.

Each lookup is a command run on the host plus a pure parser. Only "run this on that host"
differs between the CLI (local subprocess), Fabric (an SSH connection) and Ansible (the
module on the host), so the parsers here are shared by all three fronts.

Nothing here keeps or reports a container's or process's whole environment: it holds the
protected system's secrets. Only the one configured variable is extracted, host-side where
the command allows it.
"""

from __future__ import annotations

import json
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from leaseguard.core.clock_offset import ClockOffset
from leaseguard.core.contract import Contract, RuntimeLookup, TaskTimeoutLookup
from leaseguard.core.errors import LookupFailed, TimeoutValueError
from leaseguard.core.timeouts import parse_timeout_s
from leaseguard.core.timestamps import parse_timestamp
from leaseguard.core.verdict import RuntimeFacts, TaskTimeout

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LOOKUP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str = ""


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


def resolve_runtime_facts(
    contract: Contract,
    runner: Runner,
    *,
    task_timeout_s: float | None = None,
    runtime_started_at: datetime | None = None,
    task_timeout_source: str | None = None,
) -> RuntimeFacts:
    """Look up what was not given. A failed lookup raises, unless default_s is configured.

    `task_timeout_source` keeps the provenance of a value looked up earlier (Ansible's
    task_timeout module), so the verdict still names where the timeout came from.
    """
    return _resolve(
        contract,
        _Lookups(runner),
        task_timeout_s=task_timeout_s,
        runtime_started_at=runtime_started_at,
        task_timeout_source=task_timeout_source,
    )


@dataclass(frozen=True)
class HostLookup:
    """A host's facts and its clock minus this machine's, read in the same exec."""

    facts: RuntimeFacts
    clock: ClockOffset | None


def look_up_host(
    contract: Contract,
    runner: Runner,
    *,
    task_timeout_s: float | None = None,
    runtime_started_at: datetime | None = None,
    task_timeout_source: str | None = None,
) -> HostLookup:
    """resolve_runtime_facts in ONE exec on the host, its clock read by the same exec.

    Over SSH every exec pays the host's login shell (its rc files: ~160 ms with a pyenv
    .bashrc), so the commands the contract needs run as one `sh` script, each in its own
    marked section, and are then judged one by one exactly as if run alone. A command that
    needs another's output (a pid file's /proc entries) still runs on its own afterwards.

    The clock reading is the script's last `date`: the exec's round trip bounds its
    uncertainty as `clock.offset_from_here`'s sample does (the lookups widen it, which only
    widens the orphan tolerance). None when the script could not read the clock; the caller
    then reads it alone (and reports that failure).
    """
    lookups = _Lookups(runner)
    wanted = () if task_timeout_s is not None else _planned_timeout(contract)
    if runtime_started_at is None:
        wanted = (*wanted, *_planned_start(contract.runtime))
    clock = lookups.run_together(list(dict.fromkeys(wanted)))
    facts = _resolve(
        contract,
        lookups,
        task_timeout_s=task_timeout_s,
        runtime_started_at=runtime_started_at,
        task_timeout_source=task_timeout_source,
    )
    return HostLookup(facts, clock)


def _resolve(
    contract: Contract,
    lookups: _Lookups,
    *,
    task_timeout_s: float | None,
    runtime_started_at: datetime | None,
    task_timeout_source: str | None,
) -> RuntimeFacts:
    warnings: list[str] = []
    if task_timeout_s is not None:
        source = task_timeout_source or "given:task_timeout_s"
        timeout: TaskTimeout | None = TaskTimeout(
            task_timeout_s, source, assumed=source.startswith("default:")
        )
    elif contract.rows_carry_expiry:
        timeout = None  # rows carry their own expiry; no timeout is needed
    else:
        timeout = _task_timeout_or_default(contract.task_timeout, lookups, warnings)
    started = runtime_started_at
    if started is None:
        started = _runtime_start_or_none(contract, lookups, warnings)
    return RuntimeFacts(timeout, started, tuple(warnings))


def _task_timeout_or_default(
    spec: TaskTimeoutLookup, lookups: _Lookups, warnings: list[str]
) -> TaskTimeout:
    try:
        return lookups.task_timeout(spec)
    except LookupFailed as exc:
        if spec.default_s is None:
            raise
        warnings.append(f"{exc}; assumed task_timeout.default_s={spec.default_s:g}")
        return TaskTimeout(spec.default_s, f"default:{task_timeout_source(spec)}", assumed=True)


def _runtime_start_or_none(
    contract: Contract, lookups: _Lookups, warnings: list[str]
) -> datetime | None:
    """Without a start time nothing is classed orphaned: the safe direction."""
    try:
        return lookups.runtime_start(contract.runtime)
    except LookupFailed as exc:
        if contract.task_timeout.default_s is None:
            raise
        warnings.append(f"{exc}; no runtime start known, so no claim is classed orphaned")
        return None


def task_timeout_source(spec: TaskTimeoutLookup) -> str:
    """The source string reported in verdicts, e.g. docker:backend/APP_TASK_TIMEOUT_S."""
    match spec.source:
        case "docker" | "podman":
            return f"{spec.source}:{spec.container}/{spec.variable}"
        case "command":
            return f"command:{spec.container}"
        case "systemd":
            return f"systemd:{spec.unit}/{spec.variable}"
        case "process":
            return f"process:{spec.pid_file}/{spec.variable}"
        case "env_file":
            return f"env_file:{spec.path}/{spec.variable}"
        case _:
            return "fixed"


Argv = tuple[str, ...]


def _planned_timeout(contract: Contract) -> tuple[Argv, ...]:
    """The commands the task timeout lookup will run first (none known in advance: empty)."""
    spec = contract.task_timeout
    if contract.rows_carry_expiry:
        return ()
    match spec.source:
        case "docker" | "podman":
            return (_inspect_argv(spec.source, spec.container),)
        case "command":
            return (_command_argv(spec),)
        case "systemd" if spec.unit is not None:
            return (_systemd_argv(spec.unit),)
        case "process" if spec.pid_file is not None:
            return (_pid_argv(spec.pid_file),)
        case "env_file" if spec.path is not None and _ENV_NAME.fullmatch(spec.variable):
            return (_env_file_argv(spec.path, spec.variable),)
        case _:
            return ()


def _planned_start(spec: RuntimeLookup) -> tuple[Argv, ...]:
    match spec.source:
        case "docker" | "podman":
            return (_inspect_argv(spec.source, spec.container),)
        case "systemd" if spec.unit is not None:
            return (_systemd_argv(spec.unit),)
        case "process" if spec.pid_file is not None:
            return (_pid_argv(spec.pid_file),)
        case _:
            return ()


def _inspect_argv(engine: str, container: str) -> Argv:
    return (engine, "inspect", "--type", "container", container)


def _command_argv(spec: TaskTimeoutLookup) -> Argv:
    return (spec.engine, "exec", spec.container, *spec.command)


def _systemd_argv(unit: str) -> Argv:
    return (
        "systemctl",
        "show",
        unit,
        "--timestamp=us+utc",
        "--property=Environment,ActiveEnterTimestamp,ActiveState,LoadState",
    )


def _pid_argv(pid_file: str) -> Argv:
    return ("cat", pid_file)


def _env_file_argv(path: str, name: str) -> Argv:
    return ("grep", "-m1", "-E", "-e", f"^[[:space:]]*(export[[:space:]]+)?{name}=", path)


class _Lookups:
    """The lookups of one check on one host; one `inspect` serves both facts."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self._inspected: dict[tuple[str, str], dict[str, object]] = {}
        # Results of commands already run together (run_together), by argv.
        self._ran: dict[Argv, CommandResult] = {}

    def run_together(self, commands: Sequence[Argv]) -> ClockOffset | None:
        """Run `commands` and `date` in one exec; their results wait for the lookups."""
        nonce = secrets.token_hex(8)
        before = time.time()
        result = self.runner.run(["sh", "-c", batch_script(commands, nonce)])
        after = time.time()
        self._ran = split_batch(commands, nonce, result)
        reading = batch_clock(result.stdout, nonce)
        if reading is None:
            return None
        return ClockOffset(reading - (before + after) / 2, (after - before) / 2)

    def task_timeout(self, spec: TaskTimeoutLookup) -> TaskTimeout:
        source = task_timeout_source(spec)
        if spec.source == "fixed":
            assert spec.value_s is not None
            return TaskTimeout(spec.value_s, source)
        raw = self._raw_task_timeout(spec)
        what = f"host {self.runner.label}: {source}"
        if raw is None:
            raise LookupFailed(f"{what}: variable {spec.variable} is not set")
        try:
            return TaskTimeout(parse_timeout_s(raw, what=what), source)
        except TimeoutValueError as exc:
            raise LookupFailed(str(exc)) from None

    def _raw_task_timeout(self, spec: TaskTimeoutLookup) -> str | None:
        match spec.source:
            case "docker" | "podman":
                env = self._inspect(spec.source, spec.container).get("env", [])
                assert isinstance(env, list)
                return env_value(env, spec.variable)
            case "command":
                return self._run(
                    list(_command_argv(spec)),
                    f"command in {spec.engine} container {spec.container}",
                )
            case "systemd":
                assert spec.unit is not None
                return env_value(self._systemd(spec.unit).environment, spec.variable)
            case "process":
                assert spec.pid_file is not None
                return self._process_env(spec.pid_file, spec.variable)
            case _:
                assert spec.path is not None
                return self._env_file(spec.path, spec.variable)

    def runtime_start(self, spec: RuntimeLookup) -> datetime | None:
        match spec.source:
            case "docker" | "podman":
                started = self._inspect(spec.source, spec.container)["started_at"]
                assert isinstance(started, datetime)
                return started
            case "systemd":
                assert spec.unit is not None
                return self._systemd(spec.unit).active_since
            case "process":
                assert spec.pid_file is not None
                return self._process_start(spec.pid_file)
            case "fixed":
                assert spec.started_at is not None
                return parse_timestamp(spec.started_at, what="runtime.started_at")
            case _:
                return None

    # -- engines ---------------------------------------------------------------------------

    def _inspect(self, engine: str, container: str) -> dict[str, object]:
        key = (engine, container)
        if key not in self._inspected:
            out = self._run(
                list(_inspect_argv(engine, container)), f"{engine} container {container}"
            )
            self._inspected[key] = parse_container_inspect(out, f"{engine} container {container}")
        return self._inspected[key]

    def _systemd(self, unit: str) -> SystemdUnit:
        out = self._run(list(_systemd_argv(unit)), f"systemd unit {unit}")
        return parse_systemctl_show(out, unit)

    def _process_env(self, pid_file: str, variable: str) -> str | None:
        pid = self._pid(pid_file)
        name = _checked_env_name(variable)
        # Filtered on the host: the rest of the environment never crosses the wire.
        out = self._run_allowing(
            ["grep", "-z", "-m1", "-e", f"^{name}=", f"/proc/{pid}/environ"],
            f"environment of pid {pid} ({pid_file})",
            allowed=(1,),
        )
        return None if out is None else out.rstrip("\x00\n").partition("=")[2]

    def _process_start(self, pid_file: str) -> datetime:
        pid = self._pid(pid_file)
        out = self._run(
            ["sh", "-c", f"getconf CLK_TCK; grep '^btime ' /proc/stat; cat /proc/{pid}/stat"],
            f"start time of pid {pid} ({pid_file})",
        )
        return parse_process_start(out, f"pid {pid} ({pid_file})")

    def _pid(self, pid_file: str) -> int:
        out = self._run(list(_pid_argv(pid_file)), f"pid file {pid_file}")
        text = out.strip()
        if not text.isdigit() or int(text) <= 0:
            raise LookupFailed(f"host {self.runner.label}: pid file {pid_file} holds no pid")
        return int(text)

    def _env_file(self, path: str, variable: str) -> str | None:
        name = _checked_env_name(variable)
        out = self._run_allowing(
            list(_env_file_argv(path, name)),
            f"env file {path}",
            allowed=(1,),
        )
        return None if out is None else parse_env_file_line(out, name)

    # -- running ---------------------------------------------------------------------------

    def _run(self, argv: list[str], what: str) -> str:
        out = self._run_allowing(argv, what, allowed=())
        assert out is not None
        return out

    def _run_allowing(self, argv: list[str], what: str, *, allowed: tuple[int, ...]) -> str | None:
        """stdout of argv; None for an allowed 'not found' exit status; else LookupFailed."""
        result = self._ran.get(tuple(argv)) or self.runner.run(argv)
        if result.exit_code == 0:
            return result.stdout
        if result.exit_code in allowed:
            return None
        said = "" if argv[1:2] == ["exec"] else first_stderr_line(result.stderr)
        raise LookupFailed(
            f"host {self.runner.label}: {what}: `{shlex.join(argv[:3])}` "
            f"{_exit_meaning(result.exit_code)}{f': {said}' if said else ''}"
        )


# --- one exec for several lookups ---------------------------------------------------------
#
# Each command's stdout sits between an `out` and an `end` line (the latter carries its exit
# status), its stderr follows an `err` line; a random nonce keeps a command's own output
# from passing for a marker.


def _marker(nonce: str, what: str) -> str:
    return f"@@leaseguard {nonce} {what}@@"


def batch_script(commands: Sequence[Argv], nonce: str) -> str:
    """A `sh` script running each command in turn, then `date +%s.%N`."""
    lines = []
    for i, argv in enumerate(commands):
        out, err, end = (_marker(nonce, f"{part} {i}") for part in ("out", "err", "end"))
        lines.append(
            f"printf '\\n%s\\n' '{out}'; printf '\\n%s\\n' '{err}' >&2; "
            f"{shlex.join(argv)} </dev/null; printf '\\n%s %d\\n' '{end}' \"$?\""
        )
    lines.append(f"printf '\\n%s\\n' '{_marker(nonce, 'clock')}'; date +%s.%N")
    return "\n".join(lines)


def split_batch(
    commands: Sequence[Argv], nonce: str, result: CommandResult
) -> dict[Argv, CommandResult]:
    """Each command's own CommandResult out of the script's output.

    A command the script never finished (the exec timed out or was cut) gets the exec's
    exit status, so it fails as it would have alone.
    """
    errs = re.split(rf"\n@@leaseguard {nonce} err (\d+)@@\n", "\n" + result.stderr)
    stderr_of = {int(i): text for i, text in zip(errs[1::2], errs[2::2], strict=True)}
    split = {}
    for i, argv in enumerate(commands):
        out, end = _marker(nonce, f"out {i}"), _marker(nonce, f"end {i}")
        found = re.search(
            rf"\n{re.escape(out)}\n(.*)\n{re.escape(end)} (\d+)\n", result.stdout, flags=re.S
        )
        if found is None:
            split[argv] = CommandResult(result.exit_code or 1, "", stderr_of.get(i, ""))
        else:
            split[argv] = CommandResult(int(found[2]), found[1], stderr_of.get(i, ""))
    return split


def batch_clock(stdout: str, nonce: str) -> float | None:
    """The script's closing `date +%s.%N` reading; None if it has none."""
    found = re.search(rf"\n{re.escape(_marker(nonce, 'clock'))}\n(\S+)\s*\Z", stdout)
    try:
        return float(found[1]) if found else None
    except ValueError:
        return None


def _exit_meaning(code: int) -> str:
    return {127: "command not found", 124: "timed out"}.get(code, f"exited {code}")


# Credentials a tool's message might quote: user:password@ in a URL, key=value secrets.
_URL_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")
_SECRET_PAIR = re.compile(r"(?i)\b((?:password|passwd|secret|token|key)\w*\s*[=:]\s*)\S+")
_MAX_STDERR_CHARS = 200


def first_stderr_line(stderr: str) -> str:
    """The tool's own first line of complaint (`Cannot connect to the Docker daemon ...`).

    Only the engine's or systemctl's stderr is shown (never that of a command run inside the
    container): printable characters, credentials masked, cut at 200 characters.
    """
    line = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "")
    line = "".join(ch if ch.isprintable() else " " for ch in line)
    line = _URL_CREDENTIALS.sub(r"\1***@", line)
    line = _SECRET_PAIR.sub(r"\1***", line)
    if len(line) > _MAX_STDERR_CHARS:
        line = line[: _MAX_STDERR_CHARS - 3] + "..."
    return line


def _checked_env_name(variable: str) -> str:
    if not _ENV_NAME.fullmatch(variable):
        raise LookupFailed(f"variable name {variable!r} is not a valid environment variable name")
    return variable


# --- pure parsers -------------------------------------------------------------------------


def env_value(env: Sequence[str], variable: str) -> str | None:
    """The value of one KEY=VALUE entry; the last one wins, as in a process environment."""
    value = None
    for entry in env:
        key, sep, rest = entry.partition("=")
        if sep and key == variable:
            value = rest
    return value


def parse_container_inspect(text: str, what: str) -> dict[str, object]:
    """Env and StartedAt from `docker/podman inspect` JSON; everything else is dropped."""
    try:
        data = json.loads(text)
        container = data[0] if isinstance(data, list) else data
        env = list(container["Config"]["Env"] or [])
        started_raw = container["State"]["StartedAt"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise LookupFailed(f"{what}: inspect output is not a container description") from None
    return {"env": env, "started_at": parse_timestamp(started_raw, what=f"{what} StartedAt")}


@dataclass(frozen=True)
class SystemdUnit:
    environment: tuple[str, ...]
    active_since: datetime


def parse_systemctl_show(text: str, unit: str) -> SystemdUnit:
    """`systemctl show --timestamp=us+utc` output -> Environment= entries and start time."""
    props = dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)
    if props.get("LoadState") == "not-found":
        raise LookupFailed(f"systemd unit {unit} not found")
    if props.get("ActiveState") != "active":
        raise LookupFailed(f"systemd unit {unit} is not active ({props.get('ActiveState')})")
    try:
        environment = tuple(shlex.split(props.get("Environment", "")))
    except ValueError:
        raise LookupFailed(f"systemd unit {unit}: Environment= is not parsable") from None
    stamp = props.get("ActiveEnterTimestamp", "").strip()
    try:
        # "Sun 2026-11-29 08:38:08.123456 UTC"
        active = datetime.strptime(stamp.partition(" ")[2], "%Y-%m-%d %H:%M:%S.%f UTC")
    except ValueError:
        raise LookupFailed(f"systemd unit {unit}: ActiveEnterTimestamp is not parsable") from None
    return SystemdUnit(environment, active.replace(tzinfo=UTC))


def parse_process_start(text: str, what: str) -> datetime:
    """CLK_TCK, the `btime` line of /proc/stat and /proc/PID/stat -> the process start."""
    lines = text.splitlines()
    try:
        ticks_per_s = int(lines[0])
        boot = int(lines[1].split()[1])
        # comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
        fields_after_comm = lines[2].rpartition(")")[2].split()
        start_ticks = int(fields_after_comm[19])  # field 22, starttime
    except (IndexError, ValueError):
        raise LookupFailed(f"{what}: /proc does not describe the process") from None
    return datetime.fromtimestamp(boot, UTC) + timedelta(seconds=start_ticks / ticks_per_s)


def parse_env_file_line(line: str, name: str) -> str:
    """The value of `[export ]NAME=value` with optional quotes, as env files write it."""
    value = line.strip().removeprefix("export").strip()[len(name) + 1 :].strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value.split(" #", 1)[0].strip()
