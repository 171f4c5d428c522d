"""A throwaway PostgreSQL 15 cluster (with pg_cron): the sandbox's and the tests' real server.

The server binaries run as the ``postgres`` OS user through ``runuser`` because initdb refuses
root and the test interpreter (pyenv under /root) is not readable by ``postgres``; only the
PostgreSQL binaries cross that boundary. Everything lives in one temporary directory whose
parents must be traversable by ``postgres`` (``/tmp`` is).

Roles created on start:

* ``postgres``: superuser, trusted on the socket and on loopback TCP.
* ``guard_pw`` (:data:`GUARD_PW_ROLE`): must authenticate with scram-sha-256 on every TCP
  connection, password :data:`GUARD_PW_PASSWORD`; tests use it to prove that passwords never
  leak and that a wrong password is refused.
* ``guard_ro`` (:data:`GUARD_RO_ROLE`): password-less login. Both guard roles are members of
  ``pg_read_all_data`` and nothing else, so they can read every table and write none.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PSQL = "/usr/bin/psql"
OS_USER = "postgres"
SUPERUSER = "postgres"

GUARD_PW_ROLE = "guard_pw"
GUARD_PW_PASSWORD = "s3cret-pw-DO-NOT-LEAK"
GUARD_RO_ROLE = "guard_ro"

# Where clusters go by default. Not the caller's TMPDIR: every parent of the cluster directory
# must be traversable by the postgres OS user, which /tmp is and pytest's per-user base temp
# directory (0700) is not.
PG_BASE_DIR = Path("/tmp")

# A unix socket path is limited to 107 bytes; ".s.PGSQL.65535" takes 14 of them.
_MAX_SOCKET_DIR_LEN = 90
_START_ATTEMPTS = 3
_PG_CTL_TIMEOUT_S = 60
# The server and the tools see only this environment: nothing from the caller's PG* variables
# (PGPASSWORD, PGSERVICE, ...) may reach them.
_CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "PGPASSFILE": os.devnull}


class PgClusterError(RuntimeError):
    """The cluster could not be created, started or queried."""


class PgCluster:
    """A PostgreSQL 15 cluster with pg_cron, created by :meth:`start`, destroyed by :meth:`stop`.

    :param base_dir: existing directory, traversable by the ``postgres`` OS user, in which
        :meth:`start` creates the cluster's own temporary directory.
    :param port: TCP port; ``None`` picks a free one at start (and retries on a bind race).
    :param listen: ``listen_addresses`` of the server; also the host that :meth:`dsn` names.
    :param command_prefix: argv prepended to every initdb/pg_ctl call, e.g.
        ``["ip", "netns", "exec", "lg-host1"]`` to run the server inside a network namespace.
        The socket directory is on the shared filesystem, so :meth:`psql`, :meth:`socket_dsn`
        and ``connect(socket=True)`` reach the server from any namespace.
    """

    def __init__(
        self,
        base_dir: str | os.PathLike[str],
        port: int | None = None,
        listen: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        self.listen = listen
        self.command_prefix = tuple(command_prefix)
        self._requested_port = port
        self._port: int | None = port
        self._root: Path | None = None
        self._started = False

    # -- attributes that exist once start() has created the directory ----------------------

    @property
    def root(self) -> Path:
        """The cluster's temporary directory (removed by :meth:`stop`)."""
        if self._root is None:
            raise PgClusterError("cluster has not been started")
        return self._root

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def logfile(self) -> Path:
        return self.root / "postgres.log"

    @property
    def port(self) -> int:
        if self._port is None:
            raise PgClusterError("cluster has not been started (no port chosen yet)")
        return self._port

    @property
    def host(self) -> str:
        """The TCP address clients use: the listen address, or loopback for a wildcard."""
        first = self.listen.split(",")[0].strip()
        if first in ("*", ""):
            return "127.0.0.1"
        with contextlib.suppress(ValueError):
            address = ipaddress.ip_address(first)
            if address.is_unspecified:
                return "::1" if address.version == 6 else "127.0.0.1"
        return first

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> Self:
        """Create, configure and start the cluster; wait until it accepts connections."""
        if self._started:
            raise PgClusterError("cluster already started")
        if os.geteuid() != 0:
            raise PgClusterError("PgCluster needs root (it runs the server via runuser)")
        try:
            self._make_dirs()
            self._initdb()
            self._write_hba()
            self._start_server()
            self._started = True
            self._create_roles_and_extensions()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server immediately and remove its directory; safe to call more than once."""
        root = self._root
        if root is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            result = self._pg_ctl("stop", "-m", "immediate", check=False)
            if result.returncode != 0:
                self._kill_postmaster()
        shutil.rmtree(root, ignore_errors=True)
        self._root = None
        self._started = False
        self._port = self._requested_port

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- clients ----------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres", user: str = SUPERUSER, **extra: Any) -> str:
        """A libpq key=value conninfo string for a TCP connection to :attr:`host`."""
        return make_conninfo("", host=self.host, port=self.port, dbname=dbname, user=user, **extra)

    def socket_dsn(self, dbname: str = "postgres", user: str = SUPERUSER, **extra: Any) -> str:
        """Like :meth:`dsn` but over the unix socket (works across network namespaces)."""
        return make_conninfo(
            "", host=str(self.socket_dir), port=self.port, dbname=dbname, user=user, **extra
        )

    def connect(
        self, dbname: str = "postgres", *, socket: bool = False, **kw: Any
    ) -> psycopg.Connection[Any]:
        """An autocommit connection (TCP by default); ``kw`` are conninfo keywords."""
        conninfo = self.socket_dsn(dbname, **kw) if socket else self.dsn(dbname, **kw)
        return psycopg.connect(conninfo, autocommit=True)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        """Run ``sql`` through /usr/bin/psql (-XAt) as the superuser and return its stdout.

        An independent client, for cross-checking what the code under test sees.
        """
        result = subprocess.run(
            [
                *(PSQL, "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"),
                *("-h", str(self.socket_dir), "-p", str(self.port), "-U", SUPERUSER, "-d", dbname),
            ],
            input=sql,
            capture_output=True,
            text=True,
            env=_CLEAN_ENV,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise PgClusterError(f"psql exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server log (empty if there is none yet)."""
        try:
            text = self.logfile.read_text(errors="replace")
        except (OSError, PgClusterError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- internals --------------------------------------------------------------------------

    def _make_dirs(self) -> None:
        pg = pwd.getpwnam(OS_USER)
        root = Path(tempfile.mkdtemp(prefix="pgcluster-", dir=self.base_dir))
        self._root = root
        root.chmod(0o755)
        self.socket_dir.mkdir(mode=0o755)
        self.data_dir.mkdir(mode=0o700)
        for path in (root, self.socket_dir, self.data_dir):
            os.chown(path, pg.pw_uid, pg.pw_gid)
        if len(str(self.socket_dir)) > _MAX_SOCKET_DIR_LEN:
            raise PgClusterError(f"socket directory path too long for a unix socket: {root}")
        probe = self._run_pg(["/usr/bin/test", "-w", str(root), "-a", "-x", str(root)], check=False)
        if probe.returncode != 0:
            raise PgClusterError(
                f"the {OS_USER} OS user cannot reach {root}: every parent directory must be "
                "traversable by it (use a base_dir under /tmp)"
            )

    def _initdb(self) -> None:
        self._run_pg(
            [
                *(str(PG_BIN / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER, "-A", "trust"),
                *("--no-sync", "--no-instructions", "--encoding=UTF8", "--locale=C"),
            ]
        )

    def _write_config(self, port: int) -> None:
        settings = {
            "listen_addresses": self.listen,
            "port": port,
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": 100,
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "32MB",
            "shared_preload_libraries": "pg_cron",
            "cron.database_name": "postgres",
            "cron.use_background_workers": "off",
            # pg_cron connects back through libpq: the socket works in any network namespace
            # and whatever listen_addresses is.
            "cron.host": str(self.socket_dir),
            "log_line_prefix": "%m [%p] %q%u@%d ",
        }
        lines = [f"{key} = {_conf_value(value)}" for key, value in settings.items()]
        # postgresql.auto.conf is read last, so it overrides initdb's postgresql.conf and is
        # rewritten in full on a port retry.
        (self.data_dir / "postgresql.auto.conf").write_text("\n".join(lines) + "\n")

    def _write_hba(self) -> None:
        # First match wins: the password role's TCP rules come before the trust rules.
        rules = [
            "local all all trust",
            *(
                f"host all {GUARD_PW_ROLE} {addr} scram-sha-256"
                for addr in ("127.0.0.1/32", "::1/128", "samehost")
            ),
            "host all all 127.0.0.1/32 trust",
            "host all all ::1/128 trust",
            "host all all samehost trust",
        ]
        (self.data_dir / "pg_hba.conf").write_text("\n".join(rules) + "\n")

    def _start_server(self) -> None:
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = self._requested_port or _free_port()
            self._port = port
            self._write_config(port)
            result = self._pg_ctl("start", "-l", str(self.logfile), check=False)
            if result.returncode == 0:
                return
            raced = self._requested_port is None and "could not bind" in self.log_tail(50)
            if not raced or attempt == _START_ATTEMPTS:
                raise PgClusterError(
                    f"pg_ctl start failed ({result.returncode}): {result.stderr.strip()}\n"
                    f"--- server log ---\n{self.log_tail()}"
                )

    def _create_roles_and_extensions(self) -> None:
        # Over the socket: in a network namespace the TCP port is unreachable from here.
        with psycopg.connect(self.socket_dsn(), autocommit=True) as conn:
            pw_role, ro_role = sql.Identifier(GUARD_PW_ROLE), sql.Identifier(GUARD_RO_ROLE)
            # Utility statements take no bind parameters: the password goes in as a literal.
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    pw_role, sql.Literal(GUARD_PW_PASSWORD)
                )
            )
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ro_role))
            conn.execute(sql.SQL("GRANT pg_read_all_data TO {}, {}").format(pw_role, ro_role))
            conn.execute("CREATE EXTENSION pg_cron")

    def _pg_ctl(self, action: str, *args: str, check: bool) -> subprocess.CompletedProcess[str]:
        """pg_ctl ACTION on this data directory, waiting (bounded) for it to take effect."""
        timeout = str(_PG_CTL_TIMEOUT_S)
        argv = [str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-w", "-t", timeout, *args]
        return self._run_pg([*argv, action], check=check)

    def _run_pg(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as the postgres OS user (behind :attr:`command_prefix`)."""
        full = [*self.command_prefix, "runuser", "-u", OS_USER, "--", *argv]
        result = subprocess.run(
            full,
            cwd=self._root or "/",
            env=_CLEAN_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_PG_CTL_TIMEOUT_S + 30,
            check=False,
        )
        if check and result.returncode != 0:
            raise PgClusterError(
                f"{Path(argv[0]).name} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def _kill_postmaster(self) -> None:
        """Last resort when pg_ctl cannot stop the server: SIGQUIT the postmaster, then wait."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _conf_value(value: object) -> str:
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _free_port() -> int:
    """A TCP port that is free right now on every local IPv4 address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port
