"""`ansible-playbook leaseguard.deploy.deploy --check` with the `check_status` callback: the
dry run's exit status tells a defer (75), budget drift (3), an unreachable host (4) and any
other failure (2) apart. Real ansible-playbook, a real host and database (test_deploy_check)."""

import pytest

from tests.integration import test_deploy_check
from tests.integration.test_cron_budget_module import CRON_DB, jobs_for
from tests.integration.test_deploy_check import add_live_claim
from tests.support.ansible_run import FIXED_FACTS, run_playbook, write_inventory

pytestmark = [pytest.mark.integration, pytest.mark.slow]

deploy = test_deploy_check.deploy  # the fixture: deploy.yml on host app1

ENABLED = {"ANSIBLE_CALLBACKS_ENABLED": "results_file,leaseguard.deploy.check_status"}


@pytest.fixture
def dry_run(deploy):
    def run(*args, **extra_vars):
        return deploy("--check", *args, env=ENABLED, **extra_vars)

    return run


def test_a_dry_run_that_would_proceed_exits_0(dry_run):
    run = dry_run()
    assert run.returncode == 0, run.stdout[-4000:]


def test_a_dry_run_that_would_defer_exits_75_and_a_real_run_keeps_ansibles_2(
    dry_run, deploy, app_db
):
    add_live_claim(app_db)
    run = dry_run()
    assert run.returncode == 75, run.stdout[-4000:]
    assert "leaseguard: --check exits 75: defer" in run.stdout
    assert deploy(env=ENABLED).returncode == 2  # not --check: ansible-playbook's own status


def test_a_dry_run_that_meets_budget_drift_exits_3(dry_run, deploy, app_db):
    budgets = {
        "leaseguard_migrate_db_user": "postgres",
        "leaseguard_cron_database": CRON_DB,
    }
    production = {"jobs": jobs_for(app_db.name, publish="6s")}
    try:
        assert deploy(leaseguard_cron_budgets=production, **budgets).returncode == 0
        run = dry_run(leaseguard_cron_budgets={"jobs": jobs_for(app_db.name)}, **budgets)
        assert run.returncode == 3, run.stdout[-4000:]
        assert "leaseguard: --check exits 3: drift" in run.stdout
    finally:
        with app_db.cluster.connect(CRON_DB, socket=True) as conn:
            conn.execute(
                "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE %s",
                (f"{app_db.name}\\_%",),
            )


def test_a_dry_run_that_cannot_reach_a_host_exits_4(dry_run):
    run = dry_run(ansible_port=2)
    assert run.returncode == 4, run.stdout[-4000:]


@pytest.mark.parametrize(("tunnel", "status"), [(True, 4), (False, 2)], ids=["tunnel", "database"])
def test_a_batchs_failed_judgment_exits_with_its_cause_not_2_for_every_host(
    tmp_path, app_host_pg, tunnel, status
):
    """serial 2: ONE task judges the batch from app1. Its tunnel to the database failing is
    unreachable (4) as for one host; app2, failed as "not judged", exited 2 over it. A
    judgment failing for another reason (the database refusing the controller's direct
    connection) still exits 2."""
    host = app_host_pg.ansible_host_vars()
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"app1": host, "app2": host},
        **FIXED_FACTS,
        leaseguard_db_host=host["ansible_host"],
        leaseguard_db_port=1,  # nothing listens there
        leaseguard_db_name="app",
        leaseguard_tunnel=tunnel,
        leaseguard_db_user="postgres",
        leaseguard_restart_method="command",
        leaseguard_restart_command=["true"],
    )
    run = run_playbook(
        "leaseguard.deploy.deploy",
        inventory,
        tmp_path,
        "--check",
        extra_vars={"leaseguard_deploy_serial": 2},
        env=ENABLED,
    )
    assert run.returncode == status, run.stdout[-4000:]
    assert run.stats["app2"]["failures"] == 1  # failed as not judged, either way
