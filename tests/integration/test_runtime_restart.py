"""`runtime_restart` run by real ansible-playbook against a real host (sshd in a network
namespace, the backend a podman container): the start time is read back with podman
inspect, not from the task's own report. The systemd path is tests/integration/
test_systemd_host.py; deploy.yml's use of it, test_deploy_check.py.
"""

from datetime import datetime

import pytest

from tests.integration.test_ansible_modules import BECOME, LOOKUP, SAME_USER, playbook, runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

__all__ = ["playbook", "runs"]  # fixtures used here


def restart_task(name="restart", **options):
    return {
        "name": name,
        "leaseguard.deploy.runtime_restart": {
            "method": "docker",
            "container": "backend",
            "verify_timeout_s": 3,
            "lookup": "{{ lookup }}",
            **options,
        },
        "register": name,
    }


def started_at(podman_engine):
    return podman_engine.inspect("backend")["State"]["StartedAt"]


def as_datetime(iso):
    return datetime.fromisoformat(iso)


@pytest.mark.parametrize("through_become", [False, True], ids=["login_shell", "become_su"])
def test_a_restart_moves_the_start_time_and_reports_both(playbook, podman_engine, through_become):
    before = started_at(podman_engine)
    task = restart_task(stop_timeout_s=4)
    run = playbook([LOOKUP, {**task, **BECOME} if through_become else task], "-vvv", env=SAME_USER)
    assert run.returncode == 0, run.stdout[-4000:]
    result = run.result("restart", "app1")
    after = started_at(podman_engine)
    assert after != before
    assert result["changed"] is True
    assert result["restarted"]["cmd"] == ["docker", "restart", "--time", "4", "backend"]
    assert result["restarted"]["rc"] == 0 and result["stop_timeout_s"] == 4
    looked_up = run.result("lookup", "app1")
    assert result["before"]["runtime_started_at"] == looked_up["runtime_started_at"]
    moved = as_datetime(result["after"]["runtime_started_at"])
    assert moved > as_datetime(looked_up["runtime_started_at"])
    assert moved.isoformat()[:19] == after[:19]  # podman inspect agrees
    assert result["msg"] == (
        f"leaseguard: restarted app1 (runtime started {looked_up['runtime_started_at']} -> "
        f"{result['after']['runtime_started_at']}, stop budget 4 s)"
    )
    # The restart and the first read of the new start time are one exec, through become too.
    execs = task_section(run.stdout, "restart").count("SSH: EXEC ")
    assert execs == 1, execs


def task_section(stdout, name):
    start = stdout.index(f"TASK [{name}]")
    end = stdout.find("TASK [", start + 1)
    return stdout[start : end if end >= 0 else None]


def test_a_command_that_restarts_nothing_fails_naming_both_start_times(playbook, podman_engine):
    before = started_at(podman_engine)
    run = playbook([LOOKUP, restart_task(method="command", command=["true"])])
    assert run.returncode == 2, run.stdout[-4000:]
    result = run.result("restart", "app1")
    assert result["failed"] is True
    assert "with method command (command true)" in result["msg"]
    assert "did not move forward within 3 s" in result["msg"]
    assert result["msg"].count(before[:19]) == 2, result["msg"]  # before and after
    assert result["before"] == result["after"]  # the same start time read twice
    assert started_at(podman_engine) == before


def test_a_failing_restart_fails_naming_method_target_and_rc(playbook, podman_engine):
    before = started_at(podman_engine)
    # Prints a secret that its argv (named in the message) does not hold.
    failing = [
        "sh",
        "-c",
        "echo password=hunter | sed s/$/2/ >&2; echo hunter | sed s/$/2/; exit 7",
    ]
    run = playbook([LOOKUP, restart_task(method="command", command=failing)])
    assert run.returncode == 2, run.stdout[-4000:]
    result = run.result("restart", "app1")
    assert result["failed"] is True and result["restarted"]["rc"] == 7
    assert result["msg"].startswith(
        "leaseguard: restarting app1 with method command (command sh -c "
    )
    assert "failed (rc 7)" in result["msg"]
    assert "after" not in result and "restarted app1 (" not in run.stdout  # no success claimed
    assert "hunter2" not in run.stdout + run.results_path.read_text()
    assert started_at(podman_engine) == before


def test_a_missing_container_fails_with_the_engines_words(playbook):
    run = playbook([LOOKUP, restart_task(container="nope")])
    assert run.returncode == 2
    msg = run.result("restart", "app1")["msg"]
    assert "with method docker (docker container nope) failed (rc " in msg
    assert "no such" in msg.lower(), msg


def test_check_mode_restarts_nothing(playbook, podman_engine):
    before = started_at(podman_engine)
    run = playbook([LOOKUP, restart_task()], "--check")
    assert run.returncode == 0, run.stdout[-4000:]
    result = run.result("restart", "app1")
    assert result["changed"] is True and result["restarted"]["cmd"] is None
    assert "would restart app1: docker container backend" in result["msg"]
    assert started_at(podman_engine) == before


def test_a_runtime_source_that_reads_no_start_time_is_restarted_unchecked(playbook, podman_engine):
    before = started_at(podman_engine)
    task = restart_task(runtime={"source": "none"})
    del task["leaseguard.deploy.runtime_restart"]["lookup"]  # nothing to compare with
    run = playbook([task])
    assert run.returncode == 0, run.stdout[-4000:]
    result = run.result("restart", "app1")
    assert result["msg"] == "leaseguard: restarted app1 (stop budget 10 s)"
    assert "after" not in result
    assert started_at(podman_engine) != before
