"""The benchmark machinery, built from the local sandbox (sandbox/): real PostgreSQL
clusters, sshd in network namespaces ("hosts") and a podman engine behind the docker CLI.

Two kinds of hosts:

* the harness host `pg1`: its own PostgreSQL on the namespace's 127.0.0.1:5432, reachable
  only through SSH - exactly the integration tests' `app_host_pg`;
* a fleet of plain hosts `app1..appN` sharing one PostgreSQL in the root namespace, which
  listens on the first fleet host's veth peer address; a /32 route inside every other
  fleet namespace (and nothing outside our own namespaces) makes that address reachable
  from all of them, as one database is reachable from every app server of a real fleet.
"""

from __future__ import annotations

import contextlib
import subprocess
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
from sandbox.hosts import AppHost, open_app_host
from sandbox.netns import IP
from sandbox.pgcluster import PG_BASE_DIR, PgCluster
from sandbox.podman import PodmanEngine
from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env

BACKEND = "backend"


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


class SessionEnv:
    """The engine as a host's sshd sees it, with extra variables for every SSH session.

    Passed to `open_app_host` in place of the engine: sshd's SetEnv line is built from
    `session_env`; everything else is the engine's.
    """

    def __init__(self, engine: PodmanEngine | None, extra: dict[str, str]) -> None:
        self._engine = engine
        self._extra = extra

    @property
    def session_env(self) -> dict[str, str]:
        engine_env = self._engine.session_env if self._engine is not None else {}
        return {**engine_env, **self._extra}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


# The kex paramiko (fab guard, leaseguard's tunnels) negotiates with this machine's OpenSSH 9.2
# sshd: paramiko's post-quantum kex (mlkem768x25519) needs OpenSSH 9.9, and it has no
# sntrup761x25519, the post-quantum kex OpenSSH 9.2's client picks by default (its reference
# implementation: ~90 ms of client CPU per connection here). Controls that give an OpenSSH
# client this kex compare like for like.
PARAMIKO_KEX = "curve25519-sha256"


# This machine's /root/.bashrc runs `pyenv init` (~160 ms), and bash sources ~/.bashrc for
# every command sshd runs - unless SHLVL is already set, which sshd's SetEnv can do. App
# servers do not run pyenv in root's rc file: the benchmark hosts skip it, and item 2
# also measures a host that keeps it, to show what it costs.
SKIP_BASHRC = {"SHLVL": "1"}


@contextlib.contextmanager
def harness_host(
    base: Path, engine: PodmanEngine, alias: str = "pg1", *, skip_bashrc: bool = True
) -> Iterator[AppHost]:
    """A harness host: namespace + sshd + a PostgreSQL on its own 127.0.0.1:5432."""
    base.mkdir(parents=True, exist_ok=True)
    seen: Any = SessionEnv(engine, SKIP_BASHRC) if skip_bashrc else engine
    with open_app_host(base, alias, engine=seen, pg=True) as host:
        yield host


@contextlib.contextmanager
def fleet(base: Path, engine: PodmanEngine | None, size: int) -> Iterator[Fleet]:
    """`size` hosts and the root-namespace database they all reach; torn down on exit.

    engine None: lightweight hosts (a namespace and sshd, no container engine), for lookups
    that read the host itself (env_file, process).
    """
    with contextlib.ExitStack() as stack:
        hosts: list[AppHost] = []
        for i in range(1, size + 1):
            host_dir = base / f"app{i}"
            host_dir.mkdir(parents=True, exist_ok=True)
            seen: Any = SessionEnv(engine, SKIP_BASHRC)
            hosts.append(stack.enter_context(open_app_host(host_dir, f"app{i}", engine=seen)))
        first = hosts[0]
        db_addr = first.netns.addr_host
        for host in hosts[1:]:
            # Only inside our own namespaces: the root namespace owns db_addr already.
            gateway = host.netns.addr_host
            subprocess.run(
                [IP, "-n", host.netns.name, "route", "add", f"{db_addr}/32", "via", gateway],
                check=True,
                capture_output=True,
            )
            # One client key for the whole fleet, as an operator's key would be.
            with host.sshd.authorized_keys_path.open("a") as fh:
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


# --- the protected system's table ---------------------------------------------------------

# The claimed/queued set is bounded by the number of workers, not by the history: 10
# running (8 live, 2 stale) and 20 open rows whatever the size of the table.
LIVE_ROWS = 8
STALE_ROWS = 2
OPEN_ROWS = 20
TABLE = "execution_runs"


def create_database(cluster: PgCluster, name: str) -> None:
    with cluster.connect(socket=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(cluster: PgCluster, name: str) -> None:
    with cluster.connect(socket=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def create_active_rows(
    conn: psycopg.Connection[Any], *, live: int = LIVE_ROWS, table: str = TABLE
) -> None:
    """The runs table with its active set: live and stale claims, queued rows; no history.

    Ids 1..100 are reserved for the active set; history rows start at 101. Live rows are
    claimed now, after the container started (older claims would be orphans); autovacuum
    is off for the table so that it cannot start in the middle of a measurement (the
    benchmarks VACUUM ANALYZE it themselves after every load).
    """
    ident = sql.Identifier(table)
    create_runs_table(conn, table)
    conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(ident))
    conn.execute(
        sql.SQL(
            """
            INSERT INTO {} (id, status, claimed_at, updated_at)
            SELECT g, 'running', now(), now()
            FROM generate_series(1, %(live)s) g
            UNION ALL
            SELECT 50 + g, 'running', now() - interval '3 hours', now() - interval '3 hours'
            FROM generate_series(1, %(stale)s) g
            UNION ALL
            SELECT 60 + g, 'open', NULL, now() FROM generate_series(1, %(open)s) g
            """
        ).format(ident),
        {"live": live, "stale": STALE_ROWS, "open": OPEN_ROWS},
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


# --- running the fronts -------------------------------------------------------------------


def write_fabric_config(path: Path, *, dsn: str, known_hosts: Path, **connection: Any) -> Path:
    section = {"connection": {"dsn": dsn, "known_hosts": str(known_hosts), **connection}}
    path.write_text(yaml.safe_dump({"leaseguard": section}))
    return path


def fab_argv(config: Path, key: Path, hosts: Sequence[str], *args: str) -> list[str]:
    """`fab -f CONFIG -i KEY -H hosts TASK ...` as a user runs it (python -m fabric)."""
    fab = [sys.executable, "-m", "fabric"]
    return [*fab, "-f", str(config), "-i", str(key), "-H", ",".join(hosts), *args]


def fab_env() -> dict[str, str]:
    return clean_env()


FAB_CWD = REPO


def set_live(conn: psycopg.Connection[Any], live: bool) -> None:
    """Make the live claims (ids 1..LIVE_ROWS) live again (claimed now) or done."""
    if live:
        conn.execute(
            "UPDATE execution_runs SET status = 'running', claimed_at = now() WHERE id <= %s",
            (LIVE_ROWS,),
        )
    else:
        conn.execute("UPDATE execution_runs SET status = 'done' WHERE id <= %s", (LIVE_ROWS,))


def vacuum_and_index(conn: psycopg.Connection[Any], contract: Contract | None = None) -> None:
    """VACUUM ANALYZE, then the recommended index (as `leaseguard index-sql` prints)."""
    contract = contract or Contract()
    ident = sql.Identifier(contract.table)
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(ident))
    conn.execute(recommended_index_sql(contract))
    conn.execute(sql.SQL("ANALYZE {}").format(ident))
