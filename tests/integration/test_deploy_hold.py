"""deploy.yml on a busy intake: no claim between the verdict and the verified restart.

Real ansible-playbook against a real host (sshd in a namespace, the backend in podman,
PostgreSQL with pg_cron). The intake claims a row every 0.1 s while its pg_cron job is
active (tests/integration/test_intake_hold.BusyIntake). The guard's role is the password
role; intake is held as the jobs' owner (leaseguard_cron_user), the intake identity.
"""

from datetime import datetime

import pytest

from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE
from tests.support.ansible_run import run_playbook, write_inventory
from tests.support.busy_intake import BusyIntake, active, claims_between
from tests.support.busy_intake import intake_job as cron_intake

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JUDGE = "Judge the claims by the system's own lease"
RESTART = "Restart the runtime and check that its start time moved forward"


@pytest.fixture
def intake_job(app_db):
    with cron_intake(app_db) as job:
        yield job


@pytest.fixture
def deploy(tmp_path, app_host_pg, app_db, backend, podman_engine):
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"app1": app_host_pg.ansible_host_vars()},
        leaseguard_db_name=app_db.name,
        leaseguard_db_user=GUARD_PW_ROLE,
        leaseguard_drain_poll_s=0.2,
        leaseguard_restart_stop_timeout_s=1,
    )

    def run(**extra_vars):
        return run_playbook(
            "leaseguard.deploy.deploy",
            inventory,
            tmp_path,
            extra_vars=extra_vars,
            env={"PGPASSWORD": GUARD_PW_PASSWORD},
        )

    return run


def held(job):
    return {
        "leaseguard_pause_cron_jobs": [job],
        "leaseguard_cron_database": "postgres",
        "leaseguard_cron_user": "postgres",  # the jobs' owner; the guard stays guard_pw
    }


def window(run):
    """From the final verdict to the restarted runtime's start (the verified restart)."""
    verdict = run.result(JUDGE, "app1")
    restart = run.result(RESTART, "app1")
    return (
        datetime.fromisoformat(verdict["checked_at"]),
        datetime.fromisoformat(restart["after"]["runtime_started_at"]),
        verdict,
    )


@pytest.mark.parametrize("on_busy", ["defer", "wait"])
def test_no_claim_between_the_verdict_and_the_verified_restart(deploy, app_db, intake_job, on_busy):
    busy = BusyIntake(app_db, intake_job)
    busy.start()
    try:
        run = deploy(leaseguard_on_busy=on_busy, **held(intake_job))
        assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
        start, end, verdict = window(run)
        assert verdict["decision"] == "proceed"
        assert verdict["intake"]["held"] is True
        assert verdict["intake"]["what"] == [f"pg_cron:{intake_job}"]
        assert claims_between(app_db, start, end) == 0
        assert active(app_db, intake_job)  # given back after the verified restart
    finally:
        busy.stop()
    assert busy.claims > 0


def test_without_intake_the_verdict_says_not_held_and_claims_get_in(deploy, app_db, intake_job):
    # The control, one claim a second (an unheld guard never proceeds at 0.1 s): claims are
    # taken between the verdict and the restart, the incident the hold prevents.
    busy = BusyIntake(app_db, intake_job, period_s=0.5)
    busy.start()
    try:
        run = deploy(leaseguard_on_busy="wait")
    finally:
        busy.stop()
    assert run.returncode == 0, run.stdout[-5000:]
    start, end, verdict = window(run)
    assert verdict["intake"] == {
        "held": False,
        "what": [],
        "msg": "intake: not held (no intake configured: nothing stops new claims between the "
        "verdict and the action)",
    }
    assert claims_between(app_db, start, end) > 0


def test_the_guard_role_alone_cannot_hold_the_intake_and_fails_closed(deploy, app_db, intake_job):
    busy_free = active(app_db, intake_job)
    run = deploy(leaseguard_pause_cron_jobs=[intake_job], leaseguard_cron_database="postgres")
    assert run.returncode == 2, run.stdout[-5000:]
    hold = run.result("Hold intake until the restart is verified", "app1")
    assert hold["failed"] is True
    assert f"pg_cron job(s) not found: {intake_job} (as role {GUARD_PW_ROLE}" in hold["msg"]
    assert "leaseguard_cron_user" in hold["msg"]
    assert active(app_db, intake_job) == busy_free


# The command's own shell kills the SSH session it runs in (sshd's per-connection process, an
# ancestor of the shell): a real link dropped mid-restart or mid-migration.
DROP_OWN_SSH_SESSION = (
    'p=$$; while [ "$p" -gt 1 ]; do case "$(cat /proc/$p/comm)" in sshd*) kill -9 "$p";'
    " exit;; esac; p=$(cut -d' ' -f4 /proc/$p/stat); done"
)


def test_a_link_dropped_mid_restart_fails_and_gives_intake_back(deploy, app_db, intake_job):
    run = deploy(
        leaseguard_restart_method="command",
        leaseguard_restart_command=["sh", "-c", DROP_OWN_SSH_SESSION],
        **held(intake_job),
    )
    assert run.returncode == 2, run.stdout[-5000:]
    restart = run.result(RESTART, "app1")
    assert "over its Ansible connection failed (AnsibleConnectionFailure)" in restart["msg"]
    assert run.result("Give intake back", "app1")["released"] == [f"pg_cron:{intake_job}"]
    assert active(app_db, intake_job)


def test_a_host_unreachable_mid_migration_gives_the_fleets_intake_back(deploy, app_db, intake_job):
    # Ansible runs no `always` for a host it marks UNREACHABLE: the migrate role's hold on the
    # fleet's pg_cron intake must still be given back, and the deploy must fail.
    run = deploy(
        leaseguard_migrate_command=["sh", "-c", DROP_OWN_SSH_SESSION],
        leaseguard_migrate_pause_cron_jobs=[intake_job],
        leaseguard_migrate_db_user="postgres",
        **held(intake_job),
    )
    assert run.returncode != 0, run.stdout[-5000:]
    assert active(app_db, intake_job), run.stdout[-8000:]
    failed = run.result("Fail a migration whose host became unreachable while it ran", "app1")
    assert "outcome on app1 is unknown" in failed["msg"] and "intake resumed" in failed["msg"]
    assert "the cron budgets were not applied" in failed["msg"]
    assert RESTART not in run.stdout
