"""`module_defaults` for the action group `leaseguard` sets the connection options once.

A real ansible-playbook run on a `local` host against a real PostgreSQL: the database options
are given only in `module_defaults: {group/leaseguard.deploy.leaseguard: ...}`, and every member
of the group (meta/runtime.yml) runs with them: the ones that reach the database reach the one
named there, the others accept and ignore them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.pgcluster import SUPERUSER
from sandbox.runs_table import create_runs_table, insert_runs
from tests.support.ansible_run import REPO, PlaybookRun, run_playbook, write_inventory
from tests.support.pg_fixtures import PgDatabase

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP = "group/leaseguard.deploy.leaseguard"
HOUR_AGO = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
# One task per member, each given only its own options.
MEMBER_TASKS: list[dict[str, Any]] = [
    {
        "name": "lookup",
        "leaseguard.deploy.task_timeout": {
            "task_timeout": {"source": "fixed", "value_s": 3600},
            "runtime": {"source": "fixed", "started_at": HOUR_AGO},
        },
        "register": "lookup",
    },
    {
        "name": "guard",
        "leaseguard.deploy.lease_guard": {"lookup": "{{ lookup }}"},
        "register": "guard",
    },
    {
        "name": "budgets",
        "leaseguard.deploy.cron_budget": {"resume_recorded": True, "cron_database": "postgres"},
        "check_mode": True,
        "register": "budgets",
    },
    {
        "name": "hold",
        # No intake configured: it holds nothing and says so, without connecting.
        "leaseguard.deploy.intake_hold": {"state": "held"},
        "register": "hold",
    },
    {
        "name": "restart",
        "leaseguard.deploy.runtime_restart": {
            "method": "command",
            "command": ["true"],
            "runtime": {"source": "none"},
        },
        "register": "restart",
    },
]


def test_every_member_of_the_group_is_tested_here() -> None:
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())
    members = {f"leaseguard.deploy.{name}" for name in runtime["action_groups"]["leaseguard"]}
    tasked = {key for task in MEMBER_TASKS for key in task if key.startswith("leaseguard.")}
    assert tasked == members


def run_group_play(db: PgDatabase, tmp_path: Path, defaults: dict[str, Any]) -> PlaybookRun:
    inventory = write_inventory(
        tmp_path / "inventory.yml", {"ctl": {"ansible_connection": "local"}}
    )
    play = {
        "hosts": "app",
        "gather_facts": False,
        "module_defaults": {GROUP: defaults},
        "tasks": MEMBER_TASKS,
    }
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    # Nothing from the environment: the options come from module_defaults alone.
    env = {"LEASEGUARD_DSN": "", "PGDATABASE": "", "PGUSER": "", "PGPASSWORD": ""}
    return run_playbook(path, inventory, tmp_path, env=env)


def connection_defaults(db: PgDatabase) -> dict[str, Any]:
    """Every shared connection option, for the database db."""
    return {
        "db_host": db.cluster.host,
        "db_port": db.cluster.port,
        "db_name": db.name,
        "db_user": SUPERUSER,
        "db_password": "unused-by-trust-auth",
        "dsn": "application_name=group_defaults",
        "tunnel": False,
        "connect_timeout_s": 5,
    }


def test_the_groups_connection_options_reach_every_member(db: PgDatabase, tmp_path: Path):
    ten_min_ago = datetime.now(UTC) - timedelta(minutes=10)
    with db.connect() as conn:
        create_runs_table(conn)
        insert_runs(conn, [(1, "running", ten_min_ago, ten_min_ago)])
    run = run_group_play(db, tmp_path, connection_defaults(db))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Unsupported parameters" not in run.stdout
    assert run.result("lookup", "ctl")["task_timeout_s"] == 3600.0
    # The claim ten minutes old is live: the guard judged the database the group names.
    guard = run.result("guard", "ctl")
    assert (guard["decision"], guard["counts"]["live"]) == ("defer", 1)
    assert run.result("budgets", "ctl")["records"] == []
    assert run.result("restart", "ctl")["changed"] is True
    assert run.result("hold", "ctl")["hold"] is None


def test_a_database_the_group_does_not_name_is_not_judged(db: PgDatabase, tmp_path: Path):
    # The other direction: the group names a database that does not exist, so the guard
    # (which reaches it) fails closed, and the lookup before it (which does not) runs.
    defaults = {**connection_defaults(db), "db_name": f"{db.name}_absent"}
    run = run_group_play(db, tmp_path, defaults)
    assert run.returncode == 2
    assert "Unsupported parameters" not in run.stdout
    assert run.result("lookup", "ctl")["task_timeout_s"] == 3600.0
    guard = run.result("guard", "ctl")
    assert guard["failed"] is True and guard["decision"] == "failed"
    assert "unused-by-trust-auth" not in run.stdout + run.stderr
