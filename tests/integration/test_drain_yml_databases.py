"""drain.yml over hosts whose database is their own loopback (the default address): each
may have a database of its own, so each host drains on its own database, never on another's;
and lease_guard's one-task judgment (each_host) refuses such hosts instead of judging them
all on the first host's database."""

import pytest

from sandbox.runs_table import create_runs_table
from tests.support.ansible_run import (
    FIXED_FACTS,
    run_playbook,
    write_each_host_play,
    write_inventory,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JUDGE = "Judge the claims by the system's own lease"


@pytest.fixture
def own_databases(app_host_factory, tmp_path):
    """busy: a live claim in its own database; idle: nothing in its own."""
    hosts = {"busy": app_host_factory("busy", pg=True), "idle": app_host_factory("idle", pg=True)}
    for name, host in hosts.items():
        with host.pg.connect(socket=True) as conn:
            create_runs_table(conn)
            if name == "busy":
                conn.execute(
                    "INSERT INTO execution_runs (id, status, claimed_at) "
                    "VALUES (1, 'running', now())"
                )
    return write_inventory(
        tmp_path / "inventory.yml",
        {name: host.ansible_host_vars() for name, host in hosts.items()},
        leaseguard_db_name="postgres",
        leaseguard_db_user="postgres",
        **FIXED_FACTS,
        leaseguard_drain_poll_s=0.2,
        leaseguard_drain_deadline_s=1,
    )


def test_each_host_drains_on_its_own_database(own_databases, tmp_path):
    run = run_playbook("leaseguard.deploy.drain", own_databases, tmp_path)
    assert run.returncode == 2, run.stdout[-4000:]
    results = run.results(JUDGE)
    assert results["busy"]["decision"] == "defer"  # its own live claim
    assert results["idle"]["decision"] == "proceed"  # not the busy host's claim
    assert run.stats["idle"]["failures"] == 0 and run.stats["busy"]["failures"] == 1


def test_one_task_for_every_host_is_refused_where_each_may_have_its_own(own_databases, tmp_path):
    play = write_each_host_play(tmp_path / "each.yml", {})
    run = run_playbook(play, own_databases, tmp_path)
    assert run.returncode == 2, run.stdout[-4000:]
    assert "each host's own loopback" in run.stdout
    assert "set leaseguard_db_host to the shared database's address" in run.stdout
