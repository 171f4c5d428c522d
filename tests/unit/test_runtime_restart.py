"""runtime_restart's pure parts: the argv per method, whether the start time moved, the texts.

The restart itself, through ssh and become, is tests/integration/test_runtime_restart.py
(and the deploy tests); here the boundaries.
"""

import dataclasses
import subprocess
from datetime import UTC, datetime

import pytest

from leaseguard.core import restart as front
from leaseguard.core.errors import ConfigError, LookupFailed
from leaseguard.core.lookups import CommandResult
from leaseguard.core.restart import RestartSpec, missing_target, start_moved

DOCKER = RestartSpec("docker", container="backend")
PODMAN = RestartSpec("podman", container="api")
UNIT = RestartSpec("systemd", unit="worker.service")
COMMAND = RestartSpec("command", command=("systemctl", "kill", "my app"))


@pytest.mark.parametrize(
    ("spec", "argv"),
    [
        (DOCKER, ("docker", "restart", "--time", "7200", "backend")),
        (PODMAN, ("podman", "restart", "--time", "7200", "api")),
        (COMMAND, ("env", "LEASEGUARD_STOP_TIMEOUT_S=7200", "systemctl", "kill", "my app")),
    ],
)
def test_the_argv_gives_the_stop_budget_as_the_role_did(spec, argv):
    assert dataclasses.replace(spec, stop_timeout_s=7200).argv == argv


def test_the_systemd_argv_passes_unit_and_budget_as_arguments_not_as_script_text():
    argv = RestartSpec("systemd", unit="a'b.service", stop_timeout_s=7).argv
    assert argv[:2] == ("sh", "-c") and argv[3:] == ("sh", "a'b.service", "7")
    assert "a'b" not in argv[2]
    done = subprocess.run(["sh", "-n", "-c", argv[2]], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr  # the script parses


@pytest.mark.parametrize(
    ("spec", "target"),
    [
        (DOCKER, "docker container backend"),
        (PODMAN, "podman container api"),
        (UNIT, "unit worker.service"),
        (COMMAND, "command systemctl kill 'my app'"),  # as Jinja's map('quote') | join(' ')
    ],
)
def test_the_target_is_named_as_the_role_named_it(spec, target):
    assert spec.target == target


@pytest.mark.parametrize(
    ("spec", "missing"),
    [
        (DOCKER, None),
        (UNIT, None),
        (COMMAND, None),
        (RestartSpec("docker"), "container"),
        (RestartSpec("podman", unit="x"), "container"),
        (RestartSpec("systemd", container="backend"), "unit"),
        (RestartSpec("command"), "command"),
    ],
)
def test_a_method_without_its_target_is_refused(spec, missing):
    assert missing_target(spec) == missing


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        (100.0, 100.5, True),
        (100.0, 100.0, False),  # the same start time: it did not restart
        (100.0, 99.0, False),
        (None, 5.0, True),  # not running before: any start time at all is a move
        (None, None, False),
        (100.0, None, False),  # no start time after: never moved
    ],
)
def test_the_start_moved_only_forward(before, after, moved):
    after = None if after is None else datetime.fromtimestamp(after, UTC)
    assert start_moved(before, after) is moved


BEFORE_AT = "2026-12-01T10:00:00.123456+00:00"
BEFORE = {"runtime_started_at": BEFORE_AT, "runtime_started_epoch_s": 1796119200.123456}
AFTER = datetime(2026, 12, 1, 10, 5, 1, 500000, tzinfo=UTC)


def restart(spec=COMMAND, source="docker"):
    return dataclasses.replace(
        spec, host="app1", stop_timeout_s=10, verify_timeout_s=3, source=source
    )


def test_the_not_moved_message_is_the_roles_text_with_both_start_times():
    same = datetime.fromisoformat(BEFORE_AT)
    assert restart().not_moved_message(BEFORE, same, None) == (
        "leaseguard: restarted app1 with method command (command systemctl kill 'my app'), but "
        "the runtime start time read from docker did not move forward within 3 s "
        "(leaseguard_restart_verify_timeout_s): before 2026-12-01T10:00:00.123456+00:00, "
        "after 2026-12-01T10:00:00.123456+00:00. Check that the restart restarts the runtime "
        "that leaseguard_runtime reads."
    )


def test_a_lookup_failing_until_the_deadline_is_unknown_and_its_words_follow():
    error = LookupFailed("host app1: docker container x: gone")
    msg = restart().not_moved_message(BEFORE, None, error)
    assert "after unknown. Check that" in msg
    assert msg.endswith(
        "leaseguard_runtime reads. The last lookup failed: host app1: docker container x: gone"
    )


def test_the_report_is_the_roles_text():
    after = front.start_of(AFTER)
    assert restart().restarted_message(BEFORE, after) == (
        "leaseguard: restarted app1 (runtime started 2026-12-01T10:00:00.123456+00:00 -> "
        "2026-12-01T10:05:01.500000+00:00, stop budget 10 s)"
    )
    assert after["runtime_started_epoch_s"] == AFTER.timestamp()


@pytest.mark.parametrize(
    ("spec", "ran", "said"),
    [
        (
            DOCKER,
            CommandResult(1, "", "Error: No such container: backend password=hunter2\nmore"),
            "with method docker (docker container backend) failed (rc 1): "
            "Error: No such container: backend password=***. The runtime may be stopped",
        ),
        (
            DOCKER,
            CommandResult(127, "", "sh: docker: not found"),
            "failed (rc 127, command not found)",
        ),
        # A user command's own output is never repeated: it may print anything.
        (COMMAND, CommandResult(3, "token=hunter2", "hunter2"), "'my app') failed (rc 3). The"),
    ],
)
def test_a_failed_restart_names_method_target_and_rc_never_a_secret(spec, ran, said):
    msg = restart(spec).failed_message(ran)
    assert msg.startswith("leaseguard: restarting app1 with method ")
    assert said in msg, msg
    assert "hunter2" not in msg


def test_check_mode_reports_and_runs_nothing():
    result = restart(DOCKER).would_restart()
    assert result["changed"] is True
    assert result["restarted"]["cmd"] is None and result["restarted"]["rc"] is None
    assert result["msg"] == (
        "leaseguard (check mode): would restart app1: docker container backend "
        "with a stop budget of 10 s"
    )


@pytest.mark.parametrize(
    ("source", "needs_lookup"), [("docker", True), ("none", False), ("fixed", False)]
)
def test_a_checked_restart_needs_the_lookup_from_before(source, needs_lookup):
    restart(DOCKER, source).check({"runtime_started_at": None})  # not running: fine
    if needs_lookup:
        with pytest.raises(ConfigError, match="`lookup`"):
            restart(DOCKER, source).check(None)
    else:
        restart(DOCKER, source).check(None)
    with pytest.raises(ConfigError, match="needs `unit`"):
        restart(RestartSpec("systemd"), source).check(BEFORE)


@pytest.mark.parametrize(
    ("spec", "needs"),
    [
        (RestartSpec("docker", container="label=com.docker.compose.service=worker"), "container"),
        (RestartSpec("podman", container="name=^worker-"), "container"),
        (RestartSpec("systemd", unit="worker@*.service"), "unit"),
        (RestartSpec("systemd", unit="worker@[12].service"), "unit"),
    ],
)
def test_a_restart_named_by_a_replica_filter_or_glob_is_refused(spec, needs):
    # `docker restart label=...` restarts nothing; one `systemctl restart` of a glob
    # restarts every replica at once with its stop budget written where systemd never looks.
    with pytest.raises(ConfigError, match=f"needs `{needs}` naming one container or unit"):
        restart(spec, "docker").check(BEFORE)


@pytest.mark.parametrize(
    "spec",
    [RestartSpec("docker", container="worker-1"), RestartSpec("systemd", unit="worker@1.service")],
)
def test_one_named_replica_is_restarted(spec):
    restart(spec, "docker").check(BEFORE)
