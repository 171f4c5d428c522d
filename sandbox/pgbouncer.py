"""A throwaway PgBouncer in front of a sandbox PostgreSQL: transaction pooling, as users run it.

Debian 12's PgBouncer (1.18) cannot route protocol-level prepared statements: in transaction
mode each transaction may run on another server connection. The tests put the guard, the
drain and the intake pauses behind it to prove that nothing of theirs outlives a transaction.

PgBouncer refuses to run as root, so it runs as the ``postgres`` OS user through ``runuser``
(as the cluster's own binaries do), from a temporary directory under /tmp that it can read,
listening on a free loopback port. Every database of the cluster is reachable through it
under its own name; ``auth_type = trust`` for the roles in its userlist.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from sandbox.pgcluster import (
    _CLEAN_ENV,
    GUARD_PW_ROLE,
    GUARD_RO_ROLE,
    OS_USER,
    SUPERUSER,
    PgCluster,
    _free_port,
)

PGBOUNCER = "/usr/sbin/pgbouncer"
_START_TIMEOUT_S = 15
_STOP_TIMEOUT_S = 10


class PgBouncer:
    """PgBouncer on 127.0.0.1:`port` pooling `cluster`'s databases in `pool_mode`."""

    def __init__(self, cluster: PgCluster, *, pool_mode: str = "transaction", pool_size: int = 2):
        self.cluster = cluster
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.port = 0
        self._root: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._filled: set[tuple[str, str]] = set()

    def dsn(self, dbname: str, user: str = SUPERUSER) -> str:
        """The conninfo of `dbname` through PgBouncer, its pool filled on first use.

        A pool (one per database and role) opens server connections only when clients wait
        for one; with them all open, consecutive transactions of one client alternate.
        """
        if (dbname, user) not in self._filled:
            self._fill_pool(dbname, user)
        return self._conninfo(dbname, user)

    def _conninfo(self, dbname: str, user: str) -> str:
        return make_conninfo("", host="127.0.0.1", port=self.port, dbname=dbname, user=user)

    def log_tail(self, lines: int = 20) -> str:
        if self._root is None:
            return ""
        with contextlib.suppress(OSError):
            return "\n".join((self._root / "pgbouncer.log").read_text().splitlines()[-lines:])
        return ""

    def start(self) -> PgBouncer:
        self._root = Path(tempfile.mkdtemp(prefix="lg-pgbouncer-", dir="/tmp"))
        try:
            shutil.chown(self._root, user=OS_USER)
            self.port = _free_port()
            self._write_config()
            self._process = subprocess.Popen(
                ["runuser", "-u", OS_USER, "--", PGBOUNCER, str(self._root / "pgbouncer.ini")],
                cwd=self._root,
                env=_CLEAN_ENV,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self._wait_listening()
            self._fill_pool("postgres", SUPERUSER)  # pg_cron's database: the intake pauses
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop PgBouncer (SIGTERM, then SIGKILL) and remove its directory; idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self) -> None:
        assert self._root is not None
        root = self._root
        users = (SUPERUSER, GUARD_RO_ROLE, GUARD_PW_ROLE)
        (root / "userlist.txt").write_text("".join(f'"{user}" ""\n' for user in users))
        (root / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={self.cluster.host} port={self.cluster.port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {root / 'userlist.txt'}\n"
            f"pool_mode = {self.pool_mode}\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 200\n"
            # Hand out the server connections in turn, not the last one used: a client's
            # next transaction then really runs in another server session, as it does on a
            # busy pooler, and anything a session kept across transactions goes missing.
            "server_round_robin = 1\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {root / 'pgbouncer.log'}\n"
            f"pidfile = {root / 'pgbouncer.pid'}\n"
        )
        for name in ("userlist.txt", "pgbouncer.ini"):
            shutil.chown(root / name, user=OS_USER)

    def _fill_pool(self, dbname: str, user: str) -> None:
        """Make the pool open all its server connections (concurrent transactions do)."""
        self._filled.add((dbname, user))
        clients = [psycopg.connect(self._conninfo(dbname, user)) for _ in range(self.pool_size)]
        try:
            for client in clients:
                client.execute("SELECT 1")  # each holds a server connection until rollback
        finally:
            for client in clients:
                client.rollback()  # ends the transaction: the server connection stays pooled
                client.close()

    def _wait_listening(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"pgbouncer exited {self._process.returncode}:\n{self.log_tail()}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not listen within {_START_TIMEOUT_S}s")


@contextlib.contextmanager
def pgbouncer(cluster: PgCluster, **options: object) -> Iterator[PgBouncer]:
    """A running PgBouncer in front of `cluster`, stopped and removed on exit."""
    with PgBouncer(cluster, **options) as bouncer:  # type: ignore[arg-type]
        yield bouncer
