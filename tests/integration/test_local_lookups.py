"""Runtime lookups on this machine with real processes, files and containers (no systemd)."""

import json
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest

from leaseguard.adapters.runtime import LocalRunner, resolve_runtime_facts
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.errors import LookupFailed
from leaseguard.core.lookups import (
    CommandResult,
    env_value,
    parse_systemctl_show,
    systemd_argv,
)
from sandbox.runs_table import create_runs_table
from tests.support.leaseguard_cli import leaseguard

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(tmp_path):
    """A real process with APP_TASK_TIMEOUT_S in its environment and a pid file."""
    proc = subprocess.Popen(
        ["sleep", "300"],
        env={
            "PATH": "/usr/bin:/bin",
            "SECRET_TOKEN": "tok-DO-NOT-LEAK",
            "APP_TASK_TIMEOUT_S": "900",
        },
    )
    pid_file = tmp_path / "worker.pid"
    pid_file.write_text(f"{proc.pid}\n")
    yield pid_file
    proc.kill()
    proc.wait()


def test_process_lookup_reads_one_variable_and_the_start_time(worker):
    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "process", "pid_file": str(worker)},
            "runtime": {"source": "process", "pid_file": str(worker)},
        }
    )
    facts = resolve_runtime_facts(contract, LocalRunner())
    assert facts.task_timeout.seconds == 900.0
    assert facts.task_timeout.source == f"process:{worker}/APP_TASK_TIMEOUT_S"
    assert abs(datetime.now(UTC) - facts.runtime_started_at) < timedelta(seconds=30)


def test_process_lookup_never_carries_the_rest_of_the_environment(worker):
    outputs = []

    class Recording(LocalRunner):
        def run(self, argv):
            result = super().run(argv)
            outputs.append(result.stdout)
            return result

    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "process", "pid_file": str(worker)},
            "runtime": {"source": "none"},
        }
    )
    resolve_runtime_facts(contract, Recording())
    assert outputs
    assert not any("tok-DO-NOT-LEAK" in out for out in outputs)


def test_a_dead_pid_fails_closed(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    pid_file = tmp_path / "gone.pid"
    pid_file.write_text(str(proc.pid))
    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "process", "pid_file": str(pid_file)},
            "runtime": {"source": "none"},
        }
    )
    with pytest.raises(LookupFailed, match="environment of pid"):
        resolve_runtime_facts(contract, LocalRunner())


def test_a_pid_file_of_bytes_that_are_not_utf8_fails_closed_naming_it(tmp_path):
    """Not a UnicodeDecodeError traceback out of the lookup's subprocess."""
    pid_file = tmp_path / "garbled.pid"
    pid_file.write_bytes(b"\xff\xfe12\n")
    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "process", "pid_file": str(pid_file)},
            "runtime": {"source": "none"},
        }
    )
    with pytest.raises(LookupFailed, match=r"garbled\.pid holds no pid"):
        resolve_runtime_facts(contract, LocalRunner())


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("DATABASE_URL=postgres://u:pw@x/y\nAPP_TASK_TIMEOUT_S=1800\n", 1800.0),
        ('# comment\nexport APP_TASK_TIMEOUT_S="7200"\n', 7200.0),
        # Set twice: sh, systemd's EnvironmentFile= and docker's --env-file keep the last.
        ("APP_TASK_TIMEOUT_S=600\nOTHER=1\nexport APP_TASK_TIMEOUT_S=7200\r\n", 7200.0),
    ],
)
def test_env_file_lookup(tmp_path, content, expected):
    path = tmp_path / "app.env"
    path.write_text(content)
    contract = contract_from_mapping(
        {"task_timeout": {"source": "env_file", "path": str(path)}, "runtime": {"source": "none"}}
    )
    assert resolve_runtime_facts(contract, LocalRunner()).task_timeout.seconds == expected


@pytest.mark.parametrize(
    ("claimed", "exit_status"), [("30 min", 75), ("9 hours", 0)], ids=["live", "stale"]
)
def test_an_env_file_assigning_the_timeout_twice_is_judged_by_the_last(
    db, tmp_path, claimed, exit_status
):
    """The app runs with 14400 s (lease 8 h): a claim 30 minutes old is live, not past a lease
    of 2 x the first line's 600 s; one 9 hours old is past the real lease."""
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) "
            "VALUES (1, 'running', now() - %s::interval)",
            (claimed,),
        )
    path = tmp_path / "app.env"
    path.write_text("APP_TASK_TIMEOUT_S=600\nAPP_TASK_TIMEOUT_S=14400\n")
    config = tmp_path / "lg.yaml"
    config.write_text(
        f"task_timeout: {{source: env_file, path: {path}}}\nruntime: {{source: none}}\n"
    )
    done = leaseguard("check", "--dsn", db.dsn, "--config", str(config), "--json")
    assert done.returncode == exit_status, done.stderr
    assert json.loads(done.stdout)["task_timeout_s"] == 14400.0


def test_env_file_without_the_variable_fails_closed_naming_it(tmp_path):
    path = tmp_path / "app.env"
    path.write_text("OTHER=1\n")
    contract = contract_from_mapping(
        {"task_timeout": {"source": "env_file", "path": str(path)}, "runtime": {"source": "none"}}
    )
    with pytest.raises(LookupFailed, match="variable APP_TASK_TIMEOUT_S is not set"):
        resolve_runtime_facts(contract, LocalRunner())


def test_a_missing_env_file_fails_closed_naming_it(tmp_path):
    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "env_file", "path": str(tmp_path / "nope.env")},
            "runtime": {"source": "none"},
        }
    )
    with pytest.raises(LookupFailed, match=r"env file .*nope\.env"):
        resolve_runtime_facts(contract, LocalRunner())


def test_command_source_runs_inside_the_real_container(podman_engine, backend, monkeypatch):
    for key, value in podman_engine.session_env.items():
        monkeypatch.setenv(key, value)
    contract = contract_from_mapping(
        {
            "task_timeout": {"source": "command", "command": "echo $APP_TASK_TIMEOUT_S"},
        }
    )
    facts = resolve_runtime_facts(contract, LocalRunner())
    assert facts.task_timeout.seconds == 3600.0
    assert facts.task_timeout.source == "command:backend"
    started = podman_engine.inspect("backend")["State"]["StartedAt"]
    assert facts.runtime_started_at.isoformat()[:19] == started[:19]


def test_a_lookup_that_hangs_is_reported_as_timed_out(monkeypatch):
    import leaseguard.adapters.runtime as runtime

    monkeypatch.setattr(runtime, "LOOKUP_TIMEOUT_S", 0.2)
    began = time.monotonic()
    assert LocalRunner().run(["sleep", "5"]) == CommandResult(124, "")
    assert time.monotonic() - began < 4


def test_a_docker_daemon_that_is_down_is_named_in_dockers_own_words(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    contract = contract_from_mapping({"task_timeout": {"source": "docker"}})
    with pytest.raises(LookupFailed) as caught:
        resolve_runtime_facts(contract, LocalRunner())
    message = str(caught.value)
    assert "`docker inspect` exited 1: " in message
    assert "Cannot connect to the Docker daemon" in message, message


def systemd_lookup(tmp_path, env_files):
    """The systemd source's real host script (sh and awk) over a stand-in `systemctl` that
    prints what systemd would for a unit with Environment=APP_TASK_TIMEOUT_S=600 and these
    EnvironmentFile= lines (this machine runs no systemd)."""
    shown = [
        "Id=app.service",
        "ActiveEnterTimestamp=Sun 2026-12-06 08:00:00.000000 UTC",
        "ActiveState=active",
        "LoadState=loaded",
        "Environment=APP_TASK_TIMEOUT_S=600 OTHER=1",
        *(f"EnvironmentFiles={line}" for line in env_files),
    ]
    stub = tmp_path / "bin" / "systemctl"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(shown) + "\nEOF\n")
    stub.chmod(0o755)
    argv = systemd_argv("app.service", "APP_TASK_TIMEOUT_S")
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin"}
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return env_value(parse_systemctl_show(out, "app.service").entries, "APP_TASK_TIMEOUT_S")


@pytest.mark.parametrize("line", ["APP_TASK_TIMEOUT_S=14400", "APP_TASK_TIMEOUT_S = 14400"])
def test_a_units_environment_file_wins_spaced_around_its_equals_sign_too(tmp_path, line):
    """systemd trims the blanks around `=` in an EnvironmentFile: `N = 14400` sets 14400, and
    the 600 of Environment= would judge a 4-hour job by a 20-minute lease."""
    (tmp_path / "app.env").write_text(f"OTHER=2\n{line}\n")
    assert systemd_lookup(tmp_path, [f"{tmp_path}/app.env (ignore_errors=no)"]) == "14400"


@pytest.mark.parametrize("optional", ["yes", "no"])
def test_a_wildcard_environment_file_fails_closed_instead_of_being_skipped(tmp_path, optional):
    """systemd expands `EnvironmentFile=-/etc/app/*.env`; the lookup does not, and read as one
    literal path an optional one was skipped: Environment='s 600 judged a 14400 s job."""
    (tmp_path / "envd").mkdir()
    (tmp_path / "envd" / "app.env").write_text("APP_TASK_TIMEOUT_S=14400\n")
    with pytest.raises(LookupFailed, match=r"envd/\*\.env cannot be read .* a wildcard"):
        systemd_lookup(tmp_path, [f"{tmp_path}/envd/*.env (ignore_errors={optional})"])
