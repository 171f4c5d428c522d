"""The benchmarks' machinery from the sandbox (sandbox/): the harness host `pg1` (sshd in a
network namespace, its own PostgreSQL on the namespace's 127.0.0.1:5432, the podman engine
behind `docker`), and fleets of plain hosts sharing one PostgreSQL in the root namespace.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import yaml
from psycopg import sql

from benchmarks.common import REPO
from leaseguard.adapters.indexing import recommended_index_sql
from leaseguard.core.contract import Contract
from sandbox.hosts import AppHost, open_app_host
from sandbox.netns import IP
from sandbox.pgcluster import PG_BASE_DIR, PgCluster
from sandbox.podman import PodmanEngine
from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env

BACKEND = "backend"
# The kex paramiko negotiates with this machine's OpenSSH 9.2 sshd (it has no sntrup761x25519,
# OpenSSH 9.2's default, ~90 ms of client CPU per connection here): item 2's control.
PARAMIKO_KEX = "curve25519-sha256"
# This machine's /root/.bashrc runs `pyenv init` (~160 ms) for every command sshd runs,
# unless SHLVL is already set; app servers do not run pyenv in root's rc file.
SKIP_BASHRC = {"SHLVL": "1"}
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


@dataclass
class Fleet:
    """Plain hosts sharing one database at `db_addr:db.port`, one client key, one known_hosts."""

    hosts: list[AppHost]
    db: PgCluster
    db_addr: str
    key_path: Path
    known_hosts: Path

    def targets(self, n: int) -> list[str]:
        return [f"root@{h.addr}" for h in self.hosts[:n]]


@contextlib.contextmanager
def engine_with_backend(base: Path) -> Iterator[PodmanEngine]:
    """The harness's podman engine with container `backend` (APP_TASK_TIMEOUT_S=3600)."""
    with PodmanEngine(base) as engine:
        engine.run_backend(BACKEND)
        try:
            yield engine
        finally:
            engine.remove(BACKEND)


def _seen(engine: PodmanEngine | None) -> Any:
    """What open_app_host reads of an engine: the variables every SSH session gets."""
    return SimpleNamespace(session_env={**(engine.session_env if engine else {}), **SKIP_BASHRC})


@contextlib.contextmanager
def harness_host(base: Path, engine: PodmanEngine, alias: str = "pg1") -> Iterator[AppHost]:
    """A harness host: namespace + sshd + a PostgreSQL on its own 127.0.0.1:5432."""
    base.mkdir(parents=True, exist_ok=True)
    with open_app_host(base, alias, engine=_seen(engine), pg=True) as host:
        yield host


@contextlib.contextmanager
def fleet(base: Path, engine: PodmanEngine | None, size: int) -> Iterator[Fleet]:
    """`size` hosts and the root-namespace database they all reach; torn down on exit.
    engine None: sshd only, for lookups that read the host itself (env_file, process)."""
    with contextlib.ExitStack() as stack:
        hosts: list[AppHost] = []
        for i in range(1, size + 1):
            (base / f"app{i}").mkdir(parents=True, exist_ok=True)
            opened = open_app_host(base / f"app{i}", f"app{i}", engine=_seen(engine))
            hosts.append(stack.enter_context(opened))
        first = hosts[0]
        db_addr = first.netns.addr_host
        for host in hosts[1:]:
            # Only inside our own namespaces: the root namespace owns db_addr already.
            route = ["route", "add", f"{db_addr}/32", "via", host.netns.addr_host]
            subprocess.run([IP, "-n", host.netns.name, *route], check=True, capture_output=True)
            with host.sshd.authorized_keys_path.open("a") as fh:  # one operator key
                fh.write(first.sshd.client_public_key + "\n")
        known_hosts = base / "known_hosts"
        known_hosts.write_text("".join(h.known_hosts_path.read_text() for h in hosts))
        db = stack.enter_context(PgCluster(PG_BASE_DIR, listen=f"127.0.0.1,{db_addr}"))
        # The guard's connections arrive from the hosts' own addresses, through their sshd.
        with (db.data_dir / "pg_hba.conf").open("a") as fh:
            fh.writelines(f"host all postgres {h.addr}/32 trust\n" for h in hosts)
        with db.connect(socket=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
        yield Fleet(hosts, db, db_addr, first.client_key_path, known_hosts)


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
