"""The benchmarks' machinery from the sandbox (sandbox/): the harness host `pg1` (sshd in a
network namespace, its own PostgreSQL on the namespace's 127.0.0.1:5432, the podman engine
behind `docker`), and fleets of plain hosts sharing one PostgreSQL in the root namespace.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import yaml
from psycopg import sql

from benchmarks.common import REPO
from leaseguard.adapters.indexing import recommended_index_sql
from leaseguard.core.contract import Contract
from sandbox.fleet import Fleet, session_env
from sandbox.hosts import AppHost, open_app_host
from sandbox.pgcluster import PgCluster
from sandbox.podman import PodmanEngine
from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env

BACKEND = "backend"
# The kex paramiko negotiates with this machine's OpenSSH 9.2 sshd (it has no sntrup761x25519,
# OpenSSH 9.2's default, ~90 ms of client CPU per connection here): item 2's control.
PARAMIKO_KEX = "curve25519-sha256"
FAB_CWD = REPO


@dataclass(frozen=True)
class Install:
    """A tree of the product with its venv in `root/.venv`: this checkout, or the one
    benchmarks.compare prepares for --before."""

    root: Path = REPO

    @property
    def bin(self) -> Path:
        return self.root / ".venv" / "bin"

    def fab(self, config: Path, key: Path, hosts: Sequence[str], *args: str) -> list[str]:
        return fab_argv(config, key, hosts, *args, python=str(self.bin / "python"))

    def env(self) -> dict[str, str]:
        return clean_env(PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}")


def fab_argv(
    config: Path, key: Path, hosts: Sequence[str], *args: str, python: str = sys.executable
) -> list[str]:
    """`fab -f CONFIG -i KEY -H hosts TASK ...` as a user runs it (python -m fabric)."""
    return [python, "-m", "fabric", "-f", str(config), "-i", str(key), "-H", ",".join(hosts), *args]


def fab_env() -> dict[str, str]:
    return clean_env()


def fab_config(path: Path, dbname: str, known_hosts: Path, **more: Any) -> Path:
    """A `fab` config judging `dbname` as postgres (at each host's 127.0.0.1:5432 through its
    tunnel unless `more` says where: db_host, db_port), with `more`'s lookups."""
    connection = {"dsn": f"dbname={dbname} user=postgres", "known_hosts": str(known_hosts)}
    connection |= {k: more.pop(k) for k in ("db_host", "db_port") if k in more}
    path.write_text(yaml.safe_dump({"leaseguard": {"connection": connection, **more}}))
    return path


def fab_on_host(install: Install, host: AppHost, db: str, workdir: Path, *args: str) -> list[str]:
    """`fab -H host TASK ...` judging `db` on the host's own PostgreSQL."""
    config = fab_config(workdir / f"fabric-{db}.yaml", db, host.known_hosts_path)
    return install.fab(config, host.client_key_path, [f"root@{host.addr}"], *args)


@contextlib.contextmanager
def engine_with_backend(base: Path) -> Iterator[PodmanEngine]:
    """The harness's podman engine with container `backend` (APP_TASK_TIMEOUT_S=3600)."""
    with PodmanEngine(base) as engine:
        engine.run_backend(BACKEND)
        try:
            yield engine
        finally:
            engine.remove(BACKEND)


@contextlib.contextmanager
def harness_host(base: Path, engine: PodmanEngine, alias: str = "pg1") -> Iterator[AppHost]:
    """A harness host: namespace + sshd + a PostgreSQL on its own 127.0.0.1:5432."""
    base.mkdir(parents=True, exist_ok=True)
    with open_app_host(base, alias, engine=session_env(engine), pg=True) as host:
        yield host


def fleet_fab_config(fleet: Fleet, workdir: Path, dbname: str) -> Path:
    """`fab` config for a fleet: the shared database, and lookups reading an env file and a
    pid file (this process, started before any live claim) on each host."""
    env_file, pid_file = workdir / "app.env", workdir / "app.pid"
    env_file.write_text("APP_TASK_TIMEOUT_S=3600\n")
    pid_file.write_text(f"{os.getpid()}\n")
    return fab_config(
        workdir / f"fabric-fleet-{dbname}.yaml",
        dbname,
        fleet.known_hosts,
        db_host=fleet.db_addr,
        db_port=fleet.db.port,
        task_timeout={"source": "env_file", "path": str(env_file)},
        runtime={"source": "process", "pid_file": str(pid_file)},
    )


# --- the protected system's table ---------------------------------------------------------

LIVE_ROWS = 8  # the claimed and queued sets are bounded by the workers, not the history
TABLE = "execution_runs"


def create_database(cluster: PgCluster, name: str, *, drop_only: bool = False) -> None:
    with cluster.connect(socket=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if not drop_only:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(cluster: PgCluster, name: str) -> None:
    create_database(cluster, name, drop_only=True)


@contextlib.contextmanager
def runs_database(
    cluster: PgCluster, name: str, *, live: int = LIVE_ROWS, history: int = 100_000
) -> Iterator[None]:
    """A database with the runs table (active set, history, recommended index); dropped on exit."""
    create_database(cluster, name)
    try:
        with cluster.connect(name, socket=True) as conn:
            create_active_rows(conn, live=live)
            grow_history(conn, history)
            vacuum_and_index(conn)
        yield
    finally:
        drop_database(cluster, name)


def create_active_rows(
    conn: psycopg.Connection[Any], *, live: int = LIVE_ROWS, table: str = TABLE
) -> None:
    """The runs table's active set (ids 1..100): live claims (claimed now, after the runtime
    started), stale ones, queued rows. No autovacuum in the middle of a measurement."""
    ident = sql.Identifier(table)
    create_runs_table(conn, table)
    conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(ident))
    conn.execute(
        sql.SQL(
            """
            INSERT INTO {} (id, status, claimed_at, updated_at)
            SELECT g, 'running', now(), now() FROM generate_series(1, %(live)s) g
            UNION ALL
            SELECT 50 + g, 'running', now() - interval '3 hours', now() - interval '3 hours'
            FROM generate_series(1, %(stale)s) g
            UNION ALL
            SELECT 60 + g, 'open', NULL, now() FROM generate_series(1, %(open)s) g
            """
        ).format(ident),
        {"live": live, "stale": 2, "open": 20},
    )


def grow_history(conn: psycopg.Connection[Any], total_rows: int, table: str = TABLE) -> None:
    """Append done (and ~2% failed) rows until the table holds `total_rows` rows."""
    conn.execute("SET synchronous_commit = off")
    conn.execute(
        sql.SQL(
            """
            INSERT INTO {table} (id, status, claimed_at, updated_at)
            SELECT g, CASE WHEN g %% 50 = 0 THEN 'failed' ELSE 'done' END,
                   now() - make_interval(secs => g), now() - make_interval(secs => g - 60)
            FROM generate_series(
                (SELECT greatest(max(id), 100) + 1 FROM {table}),
                100 + %(target)s - (SELECT count(*) FROM {table} WHERE id <= 100)
            ) AS g
            """
        ).format(table=sql.Identifier(table)),
        {"target": total_rows},
    )


def set_live(cluster: PgCluster, dbname: str, live: bool) -> None:
    """Make the live claims (ids 1..LIVE_ROWS) live again (claimed now) or done."""
    with cluster.connect(dbname, socket=True) as conn:
        if live:
            conn.execute(
                "UPDATE execution_runs SET status = 'running', claimed_at = now() WHERE id <= %s",
                (LIVE_ROWS,),
            )
        else:
            conn.execute("UPDATE execution_runs SET status = 'done' WHERE id <= %s", (LIVE_ROWS,))


def vacuum_and_index(conn: psycopg.Connection[Any]) -> None:
    """VACUUM ANALYZE, then the recommended index (as `leaseguard index-sql` prints)."""
    contract = Contract()
    ident = sql.Identifier(contract.table)
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(ident))
    conn.execute(recommended_index_sql(contract))
    conn.execute(sql.SQL("ANALYZE {}").format(ident))
