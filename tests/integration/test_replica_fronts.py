"""Replicas through the SSH fronts: `fab guard` and Ansible's lease_guard/task_timeout on a
real host (sshd in a network namespace whose docker CLI drives the session's podman engine),
the database reached through the tunnel.

The lookup's warning about a named container's compose siblings and the list of a filter's
matches must reach each front's own output; a 10 MB variable beside the one configured must
not cross the SSH link.
"""

import json
import secrets
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from sandbox.pgcluster import GUARD_PW_PASSWORD, GUARD_PW_ROLE
from sandbox.runs_table import create_runs_table, insert_runs
from tests.integration.test_container_replicas import _create_by_api
from tests.support.ansible_run import run_playbook, write_inventory
from tests.support.fab_run import run_fab
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVICE = "com.docker.compose.service"


@pytest.fixture(scope="module")
def workers(podman_engine):
    """Two running compose replicas, the second started 3 s after the first: a claim half way
    stays an orphan of replica 2 even when a loaded machine widens the clock tolerance (half
    a `date` round trip over SSH) past a second."""
    project = f"lgf{secrets.token_hex(3)}"
    names = [f"{project}-worker-1", f"{project}-worker-2"]
    labels = ["--label", f"com.docker.compose.project={project}", "--label", f"{SERVICE}=worker"]
    starts = {}
    try:
        for name in names:
            podman_engine.run_backend(name, env={"APP_TASK_TIMEOUT_S": "3600"}, extra_args=labels)
            raw = podman_engine.inspect(name)["State"]["StartedAt"]
            starts[name] = datetime.fromisoformat(raw[:26].rstrip("Z") + "+00:00")
            assert wait_until(lambda s=starts[name]: datetime.now(UTC) > s + timedelta(seconds=3))
        yield project, names, starts
    finally:
        for name in names:
            podman_engine.remove(name)


@pytest.fixture
def between(app_db, workers):
    """A running claim older than replica 2's start and newer than replica 1's."""
    _project, names, starts = workers
    at = starts[names[0]] + (starts[names[1]] - starts[names[0]]) / 2
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", at, at)])
    return app_db


def fab(app_host_pg, db, tmp_path, container, *args):
    spec = {"source": "docker", "container": container}
    section = {
        "connection": {
            "dsn": f"dbname={db.name} user=postgres",
            "known_hosts": str(app_host_pg.known_hosts_path),
        },
        "task_timeout": spec,
        "runtime": spec,
    }
    config = tmp_path / "fabric.yaml"
    config.write_text(yaml.safe_dump({"leaseguard": section}))
    key = str(app_host_pg.client_key_path)
    return run_fab("-f", str(config), "-i", key, "-H", f"root@{app_host_pg.addr}", "guard", *args)


def test_fab_guard_defers_over_every_replica_and_warns_naming_a_named_ones_siblings(
    app_host_pg, between, workers, tmp_path
):
    project, names, _starts = workers
    done = fab(app_host_pg, between, tmp_path, f"name=^{project}-worker-")
    assert done.returncode == 75, done.stdout + done.stderr
    assert f"replicas={names[0]},{names[1]}" in done.stdout
    done = fab(app_host_pg, between, tmp_path, names[1])
    assert done.returncode == 0, done.stdout + done.stderr  # by names[1]'s start: an orphan
    assert f"has running compose siblings ({names[0]})" in done.stderr


def test_ansible_reports_the_siblings_warning_and_the_matches(
    app_host_pg, between, workers, tmp_path
):
    project, names, _starts = workers
    inventory = write_inventory(
        tmp_path / "inventory.yml",
        {"app1": app_host_pg.ansible_host_vars()},
        leaseguard_db_name=between.name,
        leaseguard_db_user=GUARD_PW_ROLE,
    )

    def task(name, module, container):
        spec = {"source": "docker", "container": container}
        options = {"task_timeout": spec, "runtime": spec}
        if module == "lease_guard":
            options.update(db_name=between.name, db_user=GUARD_PW_ROLE)
        return {
            "name": name,
            f"leaseguard.deploy.{module}": options,
            "register": name,
            "ignore_errors": True,
        }

    tasks = [
        task("lookup_one", "task_timeout", names[1]),
        task("guard_one", "lease_guard", names[1]),
        task("guard_all", "lease_guard", f"label=com.docker.compose.project={project}"),
    ]
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "app", "gather_facts": False, "tasks": tasks}]))
    env = {"LEASEGUARD_DB_PASSWORD": GUARD_PW_PASSWORD}
    run = run_playbook(play, inventory, tmp_path, env=env)
    lookup_one, guard_one = run.result("lookup_one", "app1"), run.result("guard_one", "app1")
    for result in (lookup_one, guard_one):
        assert any(f"siblings ({names[0]})" in w for w in result["warnings"]), result
    assert guard_one["decision"] == "proceed"
    assert f"siblings ({names[0]})" in run.stdout + run.stderr  # shown as [WARNING]
    guard_all = run.result("guard_all", "app1")
    assert guard_all["decision"] == "defer"
    assert guard_all["replicas"] == names
    assert guard_all["lookup"]["replicas"] == names


def test_a_10_mb_variable_beside_the_one_read_does_not_slow_fab_guard(
    app_host_pg, app_db, podman_engine, tmp_path
):
    with app_db.connect(socket=True) as conn:
        create_runs_table(conn)
    small, big = f"lgs{secrets.token_hex(3)}", f"lgb{secrets.token_hex(3)}"
    _create_by_api(podman_engine, small, {"APP_TASK_TIMEOUT_S": "900"})
    _create_by_api(podman_engine, big, {"APP_TASK_TIMEOUT_S": "900", "BIG": "x" * 10_000_000})
    try:
        took = {}
        for name in (small, big, small, big):  # twice each: the faster run counts
            began = time.monotonic()
            done = fab(app_host_pg, app_db, tmp_path, name, "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            took[name] = min(took.get(name, 1e9), time.monotonic() - began)
            assert json.loads(done.stdout)[0]["task_timeout_s"] == 900.0
    finally:
        podman_engine.remove(small)
        podman_engine.remove(big)
    # the whole environment brought over took 13 s; one variable costs what it costs small
    assert took[big] < took[small] + 1.5, took
