"""A real `leaseguard check` on a DSN with given facts imports only what it uses:
psycopg and the guard, never Fabric, paramiko, invoke, jinja2, Ansible nor the budgets code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env
from tests.unit.test_cli_startup import NOT_FOR_CHECK, ONLY_WITH_A_FILE, imported_by, loaded

pytestmark = pytest.mark.integration


def test_a_real_check_imports_no_front_library_nor_the_budgets_code(db) -> None:
    with db.connect() as conn:
        create_runs_table(conn)
    started = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    argv = ["check", "--dsn", db.dsn, "--task-timeout-s", "60", "--runtime-started-at", started]
    modules = imported_by(*argv, env=clean_env())
    # imported_by asserted exit 0: the check judged the table (proceed) on a real database
    assert loaded(modules, "psycopg")
    assert loaded(modules, "leaseguard.adapters.guard")
    assert [name for name in NOT_FOR_CHECK if loaded(modules, name)] == []
    assert [name for name in ONLY_WITH_A_FILE if loaded(modules, name)] == []


def test_a_check_given_a_config_file_reads_it_with_pyyaml(db, tmp_path) -> None:
    """The other direction: the detector sees PyYAML when a config file is given."""
    with db.connect() as conn:
        create_runs_table(conn)
    config = tmp_path / "leaseguard.yaml"
    config.write_text("leaseguard:\n  statement_timeout_ms: 2000\n", encoding="utf-8")
    started = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    argv = ["check", "--config", str(config), "--dsn", db.dsn, "--task-timeout-s", "60"]
    modules = imported_by(*argv, "--runtime-started-at", started, env=clean_env())
    assert loaded(modules, "yaml")
