"""deploy.yml as users run it: `--check` dry runs, a restart that did nothing, a mistyped
variable. Real ansible-playbook against a real host (sshd in a namespace, the backend in
podman, PostgreSQL with pg_cron); what did or did not change is read back with docker inspect
and psql, not from the playbook's own report.
"""

from datetime import UTC, datetime, timedelta

import pytest

from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE
from sandbox.runs_table import create_runs_table, insert_runs
from tests.integration.test_cron_budget_module import CRON_DB, cron_jobs, jobs_for
from tests.support.ansible_run import run_playbook, write_inventory

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEPLOY = "leaseguard.deploy.deploy"
WOULD = "Report what the restart would do"
RESTART = "Restart the runtime and check that its start time moved forward"


@pytest.fixture
def deploy(tmp_path, app_host_pg, app_db, backend, podman_engine):
    """Run deploy.yml on host app1 (its backend container, its database through the tunnel)."""
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"app1": app_host_pg.ansible_host_vars()},
        leaseguard_db_name=app_db.name,
        leaseguard_db_user=GUARD_PW_ROLE,
    )

    def run(*args, env=None, **extra_vars):
        return run_playbook(
            DEPLOY,
            inventory,
            tmp_path,
            *args,
            extra_vars=extra_vars,
            env={"PGPASSWORD": GUARD_PW_PASSWORD, **(env or {})},
        )

    return run


def started_at(podman_engine):
    return podman_engine.inspect("backend")["State"]["StartedAt"]


def add_live_claim(app_db):
    with app_db.connect(socket=True) as conn:
        insert_runs(conn, [(7, "running", datetime.now(UTC) + timedelta(seconds=5), None)])


def test_check_mode_reports_the_restart_and_changes_nothing(deploy, podman_engine, app_db):
    before = started_at(podman_engine)
    run = deploy("--check")
    assert run.returncode == 0, run.stdout[-4000:]
    msg = run.result(WOULD, "app1")["msg"]
    assert "app1 proceed" in msg and "would restart docker container backend" in msg, msg
    assert started_at(podman_engine) == before
    # The real run does what the dry run said, so the dry run was not vacuous.
    assert deploy().returncode == 0
    assert started_at(podman_engine) != before


def test_check_mode_exits_nonzero_when_the_real_run_would_defer(deploy, podman_engine, app_db):
    add_live_claim(app_db)
    before = started_at(podman_engine)
    run = deploy("--check")
    assert run.returncode == 2, run.stdout[-4000:]
    refusal = run.result("Defer the restart while work is in flight", "app1")
    assert "not restarting app1: 1 live claim(s) in execution_runs (7)" in refusal["msg"]
    assert started_at(podman_engine) == before


@pytest.mark.parametrize(
    ("on_busy", "said"),
    [
        ("wait", "would wait up to"),
        ("force", "would FORCE a restart, killing live claim(s) 7"),
    ],
)
def test_check_mode_says_what_wait_and_force_would_do(deploy, podman_engine, app_db, on_busy, said):
    add_live_claim(app_db)
    before = started_at(podman_engine)
    run = deploy("--check", leaseguard_on_busy=on_busy)
    assert run.returncode == 0, run.stdout[-4000:]
    msg = run.result(WOULD, "app1")["msg"]
    assert "app1 defer" in msg and said in msg, msg
    assert started_at(podman_engine) == before
    with app_db.connect(socket=True) as conn:  # a dry-run wait pauses nothing, ends nothing
        assert conn.execute("SELECT status FROM execution_runs").fetchall() == [("running",)]


def test_check_mode_shows_the_migration_and_budget_changes_and_applies_none(
    deploy, podman_engine, app_db, tmp_path
):
    marker = tmp_path / "migrated"
    before = started_at(podman_engine)
    try:
        run = deploy(
            "--check",
            "--diff",
            leaseguard_migrate_command=["touch", str(marker)],
            leaseguard_cron_budgets={"jobs": jobs_for(app_db.name)},
            leaseguard_migrate_db_user="postgres",
            leaseguard_cron_database=CRON_DB,
        )
        assert run.returncode == 0, run.stdout[-4000:]
        budgets = run.result("Apply the pg_cron statement budgets", "app1")
        assert budgets["changed"] is True and budgets["applied"] is False
        assert f"{app_db.name}_publish" in run.stdout  # the --diff of the planned jobs
        assert "would migrate" in run.result("Report the migration", "app1")["msg"]
        assert cron_jobs(app_db.cluster, app_db.name) == {}  # psql: nothing scheduled
        assert not marker.exists()
        assert started_at(podman_engine) == before
    finally:
        with app_db.cluster.connect(CRON_DB, socket=True) as conn:
            conn.execute(
                "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE %s",
                (f"{app_db.name}\\_%",),
            )


def test_a_restart_that_does_nothing_fails_naming_the_start_times(deploy, podman_engine):
    before = started_at(podman_engine)
    run = deploy(
        leaseguard_restart_method="command",
        leaseguard_restart_command=["true"],
        leaseguard_restart_verify_timeout_s=3,
    )
    assert run.returncode == 2, run.stdout[-4000:]
    msg = run.result(RESTART, "app1")["msg"]
    assert "Unknown error" not in run.stdout
    assert "with method command (command true)" in msg, msg
    assert "did not move forward within 3 s" in msg
    stamp = before[:19]  # docker prints nanoseconds and Z; the role ISO 8601 with an offset
    assert msg.count(stamp) == 2, msg  # before and after: the same start time


def test_a_mistyped_variable_fails_before_anything_runs(deploy, podman_engine):
    before = started_at(podman_engine)
    run = deploy(leaseguard_on_bussy="wait")
    assert run.returncode == 2, run.stdout[-4000:]
    result = run.result("Check the leaseguard variables", "app1")
    assert result["unknown"] == {"leaseguard_on_bussy": "leaseguard_on_busy"}
    assert "leaseguard_on_bussy (did you mean leaseguard_on_busy?)" in result["msg"]
    assert run.stats["app1"]["ok"] == 0  # the first task of the deploy
    assert started_at(podman_engine) == before


def test_a_variable_of_the_wrong_type_fails_before_intake_is_held(deploy, podman_engine, tmp_path):
    """The restart role imports the guard without its argument validation: a guard variable
    of the wrong type is refused by the first task, before intake is held or anything judged;
    the same variable with a good value (as -e gives it, a string of digits) deploys."""
    log = tmp_path / "intake.log"
    intake = {
        "leaseguard_pause_command": ["sh", "-c", f"echo paused >> {log}"],
        "leaseguard_resume_command": ["sh", "-c", f"echo resumed >> {log}"],
    }
    before = started_at(podman_engine)
    run = deploy(leaseguard_statement_timeout_ms="slow", **intake)
    assert run.returncode == 2, run.stdout[-4000:]
    result = run.result("Check the leaseguard variables", "app1")
    assert result["wrong_type"] == {"leaseguard_statement_timeout_ms": "int"}
    assert "leaseguard_statement_timeout_ms (wants int). Nothing was run." in result["msg"]
    assert "slow" not in result["msg"]
    assert run.stats["app1"]["ok"] == 0  # the first task of the deploy
    assert not log.exists()  # intake was never held
    assert started_at(podman_engine) == before
    run = deploy(leaseguard_statement_timeout_ms="5000", **intake)
    assert run.returncode == 0, run.stdout[-4000:]
    assert log.read_text().split() == ["paused", "resumed"]
    assert started_at(podman_engine) != before


@pytest.mark.parametrize(
    ("method", "needed"),
    [("command", "leaseguard_restart_command"), ("systemd", "leaseguard_restart_unit")],
)
def test_a_restart_that_cannot_run_fails_before_the_guard_judges(
    deploy, podman_engine, method, needed
):
    """Said by the restart role's first task: nothing is looked up, judged or drained."""
    before = started_at(podman_engine)
    run = deploy(leaseguard_restart_method=method, leaseguard_on_busy="wait")
    assert run.returncode == 2, run.stdout[-4000:]
    result = run.result("Check the leaseguard variables", "app1")
    assert result["msg"] == f"leaseguard: restart method {method} needs {needed}"
    assert "Judge the claims by the system's own lease" not in run.stdout
    assert started_at(podman_engine) == before


def test_restart_if_started_before_skips_only_a_host_restarted_after_the_cut_off(
    deploy, podman_engine
):
    """Both sides of the cut-off: an earlier start is restarted, a later one is left as it is."""
    first = started_at(podman_engine)
    after_start = datetime.fromisoformat(first[:26].rstrip("Z") + "+00:00").timestamp() + 1
    run = deploy(leaseguard_restart_if_started_before=after_start)  # it started before: restart
    assert run.returncode == 0, run.stdout[-4000:]
    second = started_at(podman_engine)
    assert second != first
    run = deploy(leaseguard_restart_if_started_before=after_start)  # now it started after
    assert run.returncode == 0, run.stdout[-4000:]
    note = run.result(
        "Note that this host already runs a runtime started after the cut-off", "app1"
    )
    assert "after leaseguard_restart_if_started_before; not restarting it again" in note["msg"]
    assert run.result("Judge the claims by the system's own lease", "app1")["skipped"] is True
    assert started_at(podman_engine) == second
