"""pytest fixtures for a real PostgreSQL: one cluster per session, one fresh database per test.

Registered from tests/conftest.py through ``pytest_plugins``.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql

from sandbox.pgcluster import PG_BASE_DIR, PgCluster
from sandbox.runs_table import create_runs_table


@dataclass(frozen=True)
class PgDatabase:
    """A throwaway database in the session cluster."""

    cluster: PgCluster
    name: str

    @property
    def dsn(self) -> str:
        """Superuser conninfo for this database over TCP."""
        return self.cluster.dsn(dbname=self.name)

    def dsn_as(self, user: str, **extra: Any) -> str:
        """Conninfo for this database as another role (e.g. guard_ro, or guard_pw + password)."""
        return self.cluster.dsn(dbname=self.name, user=user, **extra)

    def connect(self, **kw: Any) -> psycopg.Connection[Any]:
        """An autocommit connection to this database (superuser unless ``user=`` is given)."""
        return self.cluster.connect(self.name, **kw)

    def psql(self, sql_text: str) -> str:
        """Run SQL through /usr/bin/psql against this database (independent cross-check)."""
        return self.cluster.psql(sql_text, dbname=self.name)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """The session's PostgreSQL 15 + pg_cron cluster; stopped and removed at session end."""
    with PgCluster(PG_BASE_DIR) as cluster:
        yield cluster


@contextlib.contextmanager
def fresh_database(cluster: PgCluster) -> Iterator[PgDatabase]:
    """Create a database named ``t_<hex>``; on exit unschedule its cron jobs and drop it."""
    name = f"t_{secrets.token_hex(6)}"
    ident = sql.Identifier(name)
    with cluster.connect(socket=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield PgDatabase(cluster, name)
    finally:
        with cluster.connect(socket=True) as admin:
            # pg_cron jobs live in the postgres database and would outlive the one they target.
            admin.execute(
                "SELECT cron.unschedule(jobid) FROM cron.job WHERE database = %s", (name,)
            )
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


@pytest.fixture
def db(pg_cluster: PgCluster) -> Iterator[PgDatabase]:
    """A fresh, empty database of the session cluster, dropped (WITH FORCE) after the test."""
    with fresh_database(pg_cluster) as database:
        yield database


@pytest.fixture
def runs_db(db: PgDatabase) -> PgDatabase:
    """`db` with an empty execution_runs table."""
    with db.connect() as conn:
        create_runs_table(conn)
    return db


@pytest.fixture
def busy(db: PgDatabase) -> PgDatabase:
    """execution_runs with one live claim (id 1, claimed 30 minutes ago, silent since) and
    one queued row: the drain tests' starting point."""
    with db.connect() as conn:
        create_runs_table(conn)
        conn.execute(
            "INSERT INTO execution_runs (id, status, claimed_at) VALUES "
            "(1, 'running', now() - interval '30 min'), (2, 'open', NULL)"
        )
    return db
