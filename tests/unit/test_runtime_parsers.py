import json
import os
from datetime import UTC, datetime

import pytest

from leaseguard.adapters.runtime import resolve_runtime_facts
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import LookupFailed
from leaseguard.core.lookups import (
    CommandResult,
    container_argv,
    env_value,
    parse_env_file_line,
    parse_process_start,
    parse_systemctl_show,
    parse_timestamp,
)


class ScriptedRunner:
    """Answers argv prefixes with canned output, as a host would."""

    label = "app1"

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def run(self, argv):
        self.calls.append(list(argv))
        for prefix, result in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return result
        return CommandResult(127, "")


# What the container command prints: one JSON line per container, only the one variable.
INSPECT = (
    json.dumps(
        {
            "name": "/backend",
            "running": True,
            "started_at": "2026-09-09T04:00:00.123456789Z",
            "project": "",
            "service": "",
            "compose": False,
            "env": ["APP_TASK_TIMEOUT_S=3600", None],
        }
    )
    + "\n"
)
CONTAINER = ("sh", "-c")


def test_inspect_gives_the_variable_and_the_start_time_with_timezone():
    runner = ScriptedRunner({CONTAINER: CommandResult(0, INSPECT)})
    facts = resolve_runtime_facts(contract_from_mapping({}), runner)
    assert facts.task_timeout.seconds == 3600.0
    assert facts.task_timeout.source == "docker:backend/APP_TASK_TIMEOUT_S"
    assert facts.runtime_started_at == datetime(2026, 9, 9, 4, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize("text", ["", "[]", "{}", "not json", '{"name": "x"}'])
def test_inspect_output_that_is_not_a_container_fails_closed(text):
    runner = ScriptedRunner({CONTAINER: CommandResult(0, text)})
    with pytest.raises(LookupFailed, match="inspect output is not a container description"):
        resolve_runtime_facts(contract_from_mapping({}), runner)


def test_env_value_takes_the_last_assignment_and_only_exact_names():
    env = ["A=1", "APP_TASK_TIMEOUT_S_OLD=5", "APP_TASK_TIMEOUT_S=10", "APP_TASK_TIMEOUT_S=20"]
    assert env_value(env, "APP_TASK_TIMEOUT_S") == "20"
    assert env_value(env, "MISSING") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-09-09T04:00:00Z", datetime(2026, 9, 9, 4, tzinfo=UTC)),
        ("2026-09-09T04:00:00.5+00:00", datetime(2026, 9, 9, 4, 0, 0, 500000, tzinfo=UTC)),
        ("2026-09-09T06:00:00+02:00", datetime(2026, 9, 9, 4, tzinfo=UTC)),
    ],
)
def test_timestamps_keep_their_timezone(text, expected):
    assert parse_timestamp(text, what="x") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0001-01-01T00:00:00Z", "is not set"),
        ("", "is not set"),
        ("yesterday", "is not an ISO 8601 timestamp"),
        ("2026-09-09T04:00:00", "has no timezone"),
    ],
)
def test_bad_timestamps_fail_closed(text, message):
    with pytest.raises(LookupFailed, match=message):
        parse_timestamp(text, what="x")


SYSTEMCTL = """\
Environment=A=1 "APP_TASK_TIMEOUT_S=1800" "B=two words"
ActiveEnterTimestamp=Sun 2026-11-29 08:38:08.250000 UTC
ActiveState=active
LoadState=loaded
"""


def test_systemctl_show_gives_environment_and_active_since():
    unit = parse_systemctl_show(SYSTEMCTL, "app.service")
    assert env_value(unit.entries, "APP_TASK_TIMEOUT_S") == "1800"
    assert env_value(unit.entries, "B") == "two words"
    assert unit.started_at == datetime(2026, 11, 29, 8, 38, 8, 250000, tzinfo=UTC)


def test_an_inactive_or_missing_unit_fails_closed():
    with pytest.raises(LookupFailed, match="not found"):
        parse_systemctl_show("LoadState=not-found\nActiveState=inactive\n", "x.service")
    with pytest.raises(LookupFailed, match="not active"):
        parse_systemctl_show("LoadState=loaded\nActiveState=failed\n", "x.service")


def test_process_start_is_boot_time_plus_start_ticks():
    # fields 3..21 (state S and 18 more), then field 22, starttime = 250 ticks
    stat = "1234 (my (odd) worker) S " + " ".join(["0"] * 18) + " 250 0 0"
    text = f"100\nbtime 1788926400\n{stat}\n"
    started = parse_process_start(text, "pid 1234")
    assert started == datetime.fromtimestamp(1788926400 + 2.5, UTC)


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("APP_TASK_TIMEOUT_S=3600\n", "3600"),
        ('export APP_TASK_TIMEOUT_S="3600"\n', "3600"),
        ("  APP_TASK_TIMEOUT_S='90.5'\n", "90.5"),
        ("APP_TASK_TIMEOUT_S=3600 # one hour\n", "3600"),
    ],
)
def test_env_file_lines_in_the_usual_spellings(line, value):
    assert parse_env_file_line(line) == value


def test_a_missing_container_fails_closed_naming_host_and_container():
    runner = ScriptedRunner({CONTAINER: CommandResult(1, "")})
    with pytest.raises(LookupFailed) as caught:
        resolve_runtime_facts(contract_from_mapping({}), runner)
    assert "host app1" in str(caught.value)
    assert "docker container backend" in str(caught.value)


def test_a_missing_variable_fails_closed_naming_it():
    inspect = INSPECT.replace('"APP_TASK_TIMEOUT_S=3600", ', "")
    runner = ScriptedRunner({CONTAINER: CommandResult(0, inspect)})
    with pytest.raises(LookupFailed, match="variable APP_TASK_TIMEOUT_S is not set"):
        resolve_runtime_facts(contract_from_mapping({}), runner)


def test_a_garbage_value_fails_closed_without_echoing_it():
    inspect = INSPECT.replace("APP_TASK_TIMEOUT_S=3600", "APP_TASK_TIMEOUT_S=hunter2")
    runner = ScriptedRunner({CONTAINER: CommandResult(0, inspect)})
    with pytest.raises(LookupFailed) as caught:
        resolve_runtime_facts(contract_from_mapping({}), runner)
    assert "not a number of seconds" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_default_s_is_used_when_the_lookup_finds_nothing_and_the_verdict_says_assumed():
    runner = ScriptedRunner({CONTAINER: CommandResult(1, "")})
    contract = contract_from_mapping({"task_timeout": {"default_s": 3600}})
    facts = resolve_runtime_facts(contract, runner)
    assert facts.task_timeout.seconds == 3600.0
    assert facts.task_timeout.assumed is True
    assert facts.runtime_started_at is None
    assert any("assumed" in w for w in facts.warnings)


def test_given_facts_skip_the_lookups():
    runner = ScriptedRunner({})
    started = datetime(2026, 1, 1, tzinfo=UTC)
    facts = resolve_runtime_facts(
        contract_from_mapping({}), runner, task_timeout_s=60.0, runtime_started_at=started
    )
    assert facts.task_timeout.seconds == 60.0
    assert facts.runtime_started_at == started
    assert runner.calls == []


def test_a_lookup_cut_short_with_the_clock_fails_closed_as_it_would_alone():
    from leaseguard.adapters.runtime import look_up_host

    runner = ScriptedRunner({("sh", "-c"): CommandResult(124, "17.5\npartial")})
    with pytest.raises(LookupFailed, match="docker container backend: `docker inspect` timed out"):
        look_up_host(contract_from_mapping({}), runner)
    assert len(runner.calls) == 1


def test_a_failed_lookup_read_with_the_clock_names_it_as_when_run_alone():
    from leaseguard.adapters.runtime import LocalRunner, look_up_host

    contract = contract_from_mapping(
        {"task_timeout": {"source": "env_file", "path": "/nonexistent/lg.env"}}
    )
    with pytest.raises(LookupFailed) as caught:
        look_up_host(contract, LocalRunner())
    assert "env file /nonexistent/lg.env" in str(caught.value)
    assert "exited 2" in str(caught.value)


class _Counting:
    def __init__(self):
        from leaseguard.adapters.runtime import LocalRunner

        self.inner, self.label, self.calls = LocalRunner(), "here", []

    def run(self, argv):
        self.calls.append(list(argv))
        return self.inner.run(argv)


def _process_contract(pid_file):
    source = {"source": "process", "pid_file": str(pid_file)}
    return contract_from_mapping({"task_timeout": source, "runtime": source})


def test_the_clock_is_read_in_the_first_lookups_exec_and_the_facts_agree_with_lookups_alone(
    tmp_path,
):
    import os
    import subprocess

    from leaseguard.adapters.runtime import look_up_host

    env = {**os.environ, "APP_TASK_TIMEOUT_S": "42"}
    with subprocess.Popen(["sleep", "60"], env=env) as app:
        try:
            (tmp_path / "app.pid").write_text(f"{app.pid}\n")
            contract = _process_contract(tmp_path / "app.pid")
            clocked, alone = _Counting(), _Counting()
            facts, clock = look_up_host(contract, clocked)
            separate = resolve_runtime_facts(contract, alone)
        finally:
            app.kill()
    # The pid file (read once for both facts), its environment, its start: no exec of its own
    # for the clock, which wraps the first of them only.
    assert len(clocked.calls) == len(alone.calls) == 3
    assert clocked.calls[0][:2] == ["sh", "-c"] and clocked.calls[0][-2:] == alone.calls[0]
    assert clocked.calls[1:] == alone.calls[1:]
    assert facts == separate
    assert facts.task_timeout.seconds == 42.0
    # This machine's own clock: within the reading's uncertainty of zero.
    assert clock is not None and abs(clock.offset_s) <= clock.uncertainty_s + 0.001


def test_a_clock_that_cannot_be_read_with_the_lookup_is_read_alone_and_fails_closed_if_unread():
    from leaseguard.adapters.runtime import look_up_host

    # `date` printed nothing in the first exec (an empty line): the lookup's output is intact,
    # and the clock is read on its own, once.
    runner = ScriptedRunner({CONTAINER: CommandResult(0, "\n" + INSPECT)})
    with pytest.raises(LookupFailed, match="host app1: cannot read its clock"):
        look_up_host(contract_from_mapping({}), runner)
    assert [argv[0] for argv in runner.calls] == ["sh", "date"]
    runner.answers[("date",)] = CommandResult(0, "5.5\n")
    runner.calls.clear()
    facts, clock = look_up_host(contract_from_mapping({}), runner)
    assert facts.task_timeout.seconds == 3600.0
    assert clock is not None and clock.offset_s < 0
    assert [argv[0] for argv in runner.calls] == ["sh", "date"]


def test_the_clock_read_with_the_lookup_is_the_hosts_minus_ours():
    import time

    from leaseguard.adapters.runtime import look_up_host

    ahead = f"{time.time() + 600:.6f}\n"  # a host ten minutes ahead
    runner = ScriptedRunner({CONTAINER: CommandResult(0, ahead + INSPECT)})
    facts, clock = look_up_host(contract_from_mapping({}), runner)
    assert len(runner.calls) == 1
    assert facts.task_timeout.seconds == 3600.0
    assert facts.runtime_started_at == parse_timestamp("2026-09-09T04:00:00.123456Z", what="t")
    assert clock is not None and 599 < clock.offset_s < 601


@pytest.mark.parametrize("first", ["1765040000", "17", "", "hello\n", "42\n1765040000.5\n"])
def test_a_clock_line_cut_short_or_not_a_clock_is_never_taken_for_one(first):
    from leaseguard.adapters.runtime import CLOCK_FIRST, look_up_host

    # A timed-out exec's partial output, a login shell's own line: the lookup fails or the
    # clock is read on its own; a wrong reading (years off) would class live claims orphaned.
    contract = contract_from_mapping(
        {"task_timeout": {"source": "env_file", "path": "/app.env", "default_s": 60}}
    )
    runner = ScriptedRunner(
        {
            ("sh", "-c", f'{CLOCK_FIRST}; exec "$@"', "sh", "grep"): CommandResult(124, first),
            CONTAINER: CommandResult(0, INSPECT),
            ("date",): CommandResult(0, "5.5\n"),
        }
    )
    facts, clock = look_up_host(contract, runner)
    assert facts.task_timeout.assumed and facts.task_timeout.seconds == 60
    assert [argv[0] for argv in runner.calls] == ["sh", "sh", "date"]
    assert clock is not None and clock.offset_s < -1e9  # the `date` exec's reading: 5.5


def test_through_become_the_clock_and_the_lookups_output_come_apart_on_a_tty():
    from leaseguard.adapters.runtime import CLOCK_FIRST, FirstLine, host_clock, split_tty, tty_argv

    class OnATty:
        label = "app1"

        def run(self, argv):
            return split_tty(on_a_tty(list(tty_argv(tuple(argv), "0123abcd"))), "0123abcd")

    runner = FirstLine(OnATty(), CLOCK_FIRST)
    ran = runner.run(["sh", "-c", "echo warm >&2; printf '3600\\n'; exit 3"])
    assert ran == CommandResult(3, "3600\n", "warm")
    clock = host_clock(runner.line, *runner.span)
    assert clock is not None and abs(clock.offset_s) <= clock.uncertainty_s
    assert runner.run(["echo", "again"]).stdout == "again\n"  # the clock is read once


@pytest.mark.parametrize("content", ["", "abc\n", " 12 x\n"])
def test_a_pid_file_without_a_pid_fails_closed_before_any_other_lookup(tmp_path, content):
    from leaseguard.adapters.runtime import look_up_host

    (tmp_path / "app.pid").write_text(content)
    runner = _Counting()
    with pytest.raises(LookupFailed, match="holds no pid"):
        look_up_host(_process_contract(tmp_path / "app.pid"), runner)
    assert len(runner.calls) == 1


def on_a_tty(argv):
    """argv run as ansible's ssh -tt runs it: stdout and stderr one tty, lines ending CRLF."""
    import os
    import pty
    import subprocess

    main, side = pty.openpty()
    with subprocess.Popen(argv, stdin=side, stdout=side, stderr=side) as proc:
        os.close(side)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the tty's other end closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    os.close(main)
    return CommandResult(proc.returncode, b"".join(chunks).decode())


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        # A warning on stderr around the value: the value alone, the warning as stderr.
        ("echo warm >&2; echo 3600; echo done >&2", CommandResult(0, "3600\n", "warm\ndone")),
        # Output without a final newline, CRs of its own, a failure's words and status.
        (
            "printf 'a\\r\\nb'; echo no such object >&2; exit 3",
            CommandResult(3, "a\r\nb", "no such object"),
        ),
        ("true", CommandResult(0, "", "")),
    ],
)
def test_a_command_on_a_tty_keeps_its_stdout_status_and_stderr_apart(script, expected):
    from leaseguard.adapters.runtime import split_tty, tty_argv

    ran = on_a_tty(list(tty_argv(("sh", "-c", script), "0123abcd")))
    assert "\r\n" in ran.stdout  # the hazard is real here
    assert split_tty(ran, "0123abcd") == expected


def test_tty_output_without_the_markers_fails_with_it_as_the_complaint():
    from leaseguard.adapters.runtime import split_tty

    ran = CommandResult(0, "su: Authentication failure\r\n")
    assert split_tty(ran, "0123abcd") == CommandResult(1, "", "su: Authentication failure\n")
    cut = CommandResult(255, "@@leaseguard 0123abcd out@@\r\n36")  # the exec was cut
    assert split_tty(cut, "0123abcd").exit_code == 255
    assert split_tty(cut, "0123abcd").stdout == ""


def test_a_units_environment_file_lines_win_and_an_unreadable_one_fails_closed():
    show = "Id=a.service\nActiveState=active\nActiveEnterTimestamp=Sun 2026-11-29 08:38:08.1 UTC\n"
    unit = parse_systemctl_show(
        show + "Environment= APP_T=600\nEnvFile=APP_T=900\nEnvFile=export APP_T='7200'\r\n",
        "a.service",
    )
    assert env_value(unit.entries, "APP_T") == "7200"
    with pytest.raises(LookupFailed, match=r"EnvironmentFile /etc/app\.env cannot be read"):
        parse_systemctl_show(show + "EnvFileUnreadable=/etc/app.env\n", "a.service")


class _RestartHost(ScriptedRunner):
    """Its first exec (the restart, then the first read of the start) answers `first`; each
    later read of the start answers `later`."""

    def __init__(self, first, later):
        super().__init__({CONTAINER: later})
        self.first = first

    def run(self, argv):
        if not self.calls:
            self.calls.append(list(argv))
            return self.first
        return super().run(argv)


STARTING = CommandResult(1, "", "starting")
CONTAINER_SCRIPT = container_argv("docker", "backend", None)[2]


def _restart(first, later=STARTING, verify_timeout_s=0):
    from leaseguard.adapters.runtime import restart_runtime
    from leaseguard.core.restart import RestartSpec

    host = _RestartHost(first, later)
    spec = RestartSpec(
        "docker", container="backend", host="app1", verify_timeout_s=verify_timeout_s
    )
    before = {"runtime_started_at": "2026-09-09T03:00:00+00:00", "runtime_started_epoch_s": 0.0}
    return restart_runtime(host, spec, contract_from_mapping({}), before), host.calls


def test_a_restart_and_the_first_read_of_its_new_start_are_one_exec():
    result, calls = _restart(CommandResult(0, "0\n" + INSPECT))
    assert len(calls) == 1
    assert calls[0][4] == "docker restart --time 10 backend"  # then the read: sh -c ...
    assert calls[0][5:7] == ["sh", "-c"] and calls[0][7] == CONTAINER_SCRIPT
    assert not result.get("failed") and result["restarted"]["rc"] == 0
    assert result["after"]["runtime_started_at"].startswith("2026-09-09T04:00:00")


def test_a_restart_that_failed_is_reported_failed_and_its_start_never_read():
    result, calls = _restart(CommandResult(3, "3\n", "Error: no such container: backend"))
    assert len(calls) == 1
    assert result["failed"] and result["restarted"]["rc"] == 3
    assert "failed (rc 3): Error: no such container: backend" in result["msg"]


@pytest.mark.parametrize(
    "cut",
    [CommandResult(255, "", ""), CommandResult(124, "0", ""), CommandResult(0, "banner\n0\n")],
)
def test_a_restart_whose_status_line_was_lost_is_failed_never_moved(cut):
    # The exec cut before the status line was whole, or a line not the status in its place:
    # failed, whatever a read after it would say.
    result, _calls = _restart(cut, later=CommandResult(0, INSPECT), verify_timeout_s=5)
    assert result["failed"] and result["restarted"]["rc"] == (cut.exit_code or 1)
    assert "its start time was not checked" in result["msg"]


def test_a_restart_whose_first_read_fails_reads_again_until_the_start_moved(monkeypatch):
    from leaseguard.adapters import runtime

    monkeypatch.setattr(runtime, "POLL_S", 0.01)
    # Restarted (status 0), the container still starting: read again, alone.
    first = CommandResult(1, "0\n", "starting")
    result, calls = _restart(first, later=CommandResult(0, INSPECT), verify_timeout_s=5)
    assert not result.get("failed"), result["msg"]
    assert len(calls) == 2 and calls[1][:2] == ["sh", "-c"] and "eval" not in calls[1][2]
    # Never started within the deadline: failed, naming the last read's failure.
    result, calls = _restart(first, verify_timeout_s=0)
    assert result["failed"] and "did not move forward" in result["msg"]
    assert "`docker inspect` exited 1: starting" in result["msg"]


FAKE_DOCKER = """#!/bin/sh
echo "$1" >> "$LG_CALLS"
case "$1" in
  restart) echo restarting; echo "$LG_RESTART_SAYS" >&2; exit "$LG_RESTART_RC" ;;
  inspect) [ -z "$LG_INSPECT_SAYS" ] || { echo "$LG_INSPECT_SAYS" >&2; exit 1; }
           printf '%s' "$LG_INSPECT" ;;
esac
"""


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    """A `docker` on PATH that a real shell runs: `restart` says and exits as told, `inspect`
    prints INSPECT (or fails saying so); every call's verb noted, in order."""
    (tmp_path / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("LG_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("LG_INSPECT", INSPECT)
    for name, value in {"LG_RESTART_SAYS": "", "LG_RESTART_RC": "0", "LG_INSPECT_SAYS": ""}.items():
        monkeypatch.setenv(name, value)
    return lambda: (tmp_path / "calls").read_text().split()


def _restart_on(runner, verify_timeout_s=0):
    from leaseguard.adapters.runtime import restart_runtime
    from leaseguard.core.restart import RestartSpec

    spec = RestartSpec(
        "docker", container="backend", host="app1", verify_timeout_s=verify_timeout_s
    )
    before = {"runtime_started_at": "2026-09-09T03:00:00+00:00", "runtime_started_epoch_s": 0.0}
    return restart_runtime(runner, spec, contract_from_mapping({}), before)


class _Local:
    label = "app1"

    def __init__(self, tty=False):
        from leaseguard.adapters.runtime import LocalRunner, split_tty, tty_argv

        self.local, self.tty, self.execs = LocalRunner(), tty, 0
        self.wrap, self.split = tty_argv, split_tty

    def run(self, argv):
        self.execs += 1
        if not self.tty:
            return self.local.run(argv)
        return self.split(on_a_tty(list(self.wrap(tuple(argv), "0123abcd"))), "0123abcd")


@pytest.mark.parametrize("tty", [False, True], ids=["login_shell", "become_tty"])
def test_in_a_real_shell_the_restart_and_its_first_read_share_one_exec(fake_docker, tty):
    runner = _Local(tty)
    result = _restart_on(runner)
    assert not result.get("failed"), result["msg"]
    assert runner.execs == 1 and fake_docker() == ["restart", "inspect"]
    assert result["after"]["runtime_started_at"].startswith("2026-09-09T04:00:00")


@pytest.mark.parametrize("tty", [False, True], ids=["login_shell", "become_tty"])
def test_in_a_real_shell_a_failed_restart_is_named_by_its_own_words_and_nothing_is_read(
    fake_docker, monkeypatch, tty
):
    monkeypatch.setenv("LG_RESTART_RC", "3")
    monkeypatch.setenv("LG_RESTART_SAYS", "Error: No such container: backend")
    result = _restart_on(_Local(tty))
    assert result["failed"] and result["restarted"]["rc"] == 3
    assert "failed (rc 3): Error: No such container: backend" in result["msg"]
    assert fake_docker() == ["restart"]


def test_in_a_real_shell_a_first_read_that_fails_is_named_by_its_own_words(
    fake_docker, monkeypatch
):
    # The restart said something on stderr and succeeded; the read after it failed: the
    # message quotes the read, never the restart (a user command's words stay unshown).
    monkeypatch.setenv("LG_RESTART_SAYS", "a restart's own chatter")
    monkeypatch.setenv("LG_INSPECT_SAYS", "container is starting")
    result = _restart_on(_Local())
    assert result["failed"] and "did not move forward" in result["msg"]
    assert "`docker inspect` exited 1: container is starting" in result["msg"]
    assert "chatter" not in result["msg"]
