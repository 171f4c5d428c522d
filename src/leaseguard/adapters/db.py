"""The guard's own database session: read-only, time-boxed, named, and leak-proof.

psycopg's messages can carry a DSN fragment or a password hint, so no driver text ever
leaves this module: errors are translated into leaseguard's own messages naming the
target (host, port, database), the table or column, the exception class and SQLSTATE.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from leaseguard.core.contract import Contract
from leaseguard.core.dsn import invalid_dsn
from leaseguard.core.errors import (
    DatabaseUnavailable,
    GuardQueryFailed,
    SchemaMismatch,
)

log = logging.getLogger("leaseguard.db")
APPLICATION_NAME = "leaseguard"

# Where each front takes the database password from (README, "Point it at your own hosts").
_PASSWORD_FROM = (  # where a password is set, not one
    "PGPASSWORD or ~/.pgpass on the controller, password= in the DSN (--dsn, "  # noqa: S105
    "LEASEGUARD_DSN, fabric.yaml's connection.dsn) or, under Ansible, "
    "leaseguard_db_password (LEASEGUARD_DB_PASSWORD)"
)

# libpq's connection failures, recognised by a fixed phrase and reported by a fixed phrase,
# so that the operator learns the cause without the raw text (which may quote the DSN).
_CONNECT_CAUSES = (
    ("password authentication failed", "authentication failed; check " + _PASSWORD_FROM),
    ("no password supplied", "a password is required but none was given; set " + _PASSWORD_FROM),
    ("does not exist", "the database or role does not exist"),
    ("connection refused", "connection refused"),
    ("timeout expired", "connection timed out"),
    ("could not translate host name", "host name not resolved"),
    ("no pg_hba.conf entry", "rejected by pg_hba.conf"),
    ("too many connections", "too many connections"),
    ("the database system is starting up", "the server is starting up"),
    ("the database system is shutting down", "the server is shutting down"),
)


def describe_target(conninfo: str) -> str:
    """host:port/dbname of a conninfo (or the PG* environment), without any secret."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "an unparsable DSN"
    host = params.get("host") or os.environ.get("PGHOST") or "default host"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    dbname = params.get("dbname") or os.environ.get("PGDATABASE") or "default database"
    return f"{host}:{port}/{dbname}"


def connect(
    conninfo: str,
    connect_timeout_s: int,
    *,
    writable: bool = False,
    dbname: str | None = None,
    timeout_s: float | None = None,
    user: str | None = None,
    password: str | None = None,
) -> psycopg.Connection[tuple[object, ...]]:
    """Open a connection named leaseguard; the one way every part of leaseguard connects.

    :param connect_timeout_s: libpq's connect_timeout, and the liveness bound of a
        connection that stopped answering (`liveness_keywords`).
    :param writable: False (the guard's connection): read-only and repeatable-read, so both
        queries of a check see one snapshot and one now(). True (writers of cron.job: the
        budgets and the intake pause): autocommit, so each caller opens the one transaction
        it means (`leaseguard.adapters.cron.cron_transaction`) and nothing stays open between them.
    :param dbname: another database than the DSN's (pg_cron's cron.database_name).
    :param timeout_s: shortens the connect timeout (what is left of a poll's budget).
    :param user: another role than the DSN's (the intake's: the owner of the pg_cron jobs);
        the DSN's password is then dropped, `password` or libpq's PGPASSWORD/.pgpass used.

    Statements are never prepared on the server (prepare_threshold=None, not even psycopg's
    automatic prepare after 5 executions): a pooler in transaction mode (PgBouncer) may run
    the next transaction on another server session, where a prepared statement is unknown.
    Failures name the target (host:port/db) and a fixed phrase, never the DSN or driver text.
    """
    try:
        given = conninfo_to_dict(conninfo)
        if dbname:
            conninfo = make_conninfo(conninfo, dbname=dbname)
        if user:
            as_user = {k: v for k, v in conninfo_to_dict(conninfo).items() if k != "password"}
            conninfo = make_conninfo("", **{**as_user, "user": user, "password": password})
    except psycopg.ProgrammingError:
        raise invalid_dsn(conninfo) from None
    liveness = {k: v for k, v in liveness_keywords(connect_timeout_s).items() if k not in given}
    connect_timeout = connect_timeout_s
    if timeout_s is not None and timeout_s < connect_timeout:
        connect_timeout = max(1, math.ceil(timeout_s))
    try:
        conn = psycopg.Connection.connect(
            make_conninfo(conninfo, **liveness),
            application_name=APPLICATION_NAME,
            connect_timeout=connect_timeout,
            autocommit=writable,
            prepare_threshold=None,
        )
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {describe_target(conninfo)}: "
            f"{_connect_cause(exc)} ({type(exc).__name__})"
        ) from None
    if not writable:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
    return conn


_IDLE = psycopg.pq.TransactionStatus.IDLE
# What a guard connection (`connect`) begins by itself; said aloud on an autocommit one.
_BEGIN = b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


@contextmanager
def read_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """One read-only, repeatable-read transaction around the block: every statement in it
    sees one snapshot. Inside a transaction already, a savepoint of it.

    Not psycopg's transaction(): when its rollback fails (the connection is gone) it logs
    the driver's text as a warning. Here an exception rolls back quietly, or closes a
    connection that cannot (the next check opens a new one); the exception on its way says
    what failed, in leaseguard's words (`translate_errors`).
    """
    if conn.info.transaction_status != _IDLE:
        with conn.transaction():
            yield
        return
    if conn.autocommit:
        conn.execute(_BEGIN)
    try:
        yield
    except BaseException:
        _roll_back(conn)
        raise
    conn.commit()


# A connection this session lost, still open on the server: a partition leaves it there, the
# host's sshd holding the tunnel's channel until its own keepalive notices, hours later.
_END_LEFT_BEHIND = (
    "SELECT pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity "
    "WHERE pid = %s AND pid <> pg_backend_pid() AND application_name = %s "
    "AND usename = current_user AND state IN ('idle', 'idle in transaction')"
)


def end_left_behind(conn: psycopg.Connection[Any], pid: int) -> None:
    """End the server side of the connection `conn` replaces, so that reconnects after a
    partition do not pile up idle backends. Advisory: a failure changes nothing else."""
    try:
        with read_transaction(conn):
            conn.execute(_END_LEFT_BEHIND, (pid, APPLICATION_NAME))
    except psycopg.Error as exc:
        log.debug("left-behind backend %d not ended (%s)", pid, type(exc).__name__)


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a transaction an exception left open or failed; the exception says what failed."""
    if conn.closed:
        return
    try:
        conn.rollback()
    except psycopg.Error:
        conn.close()  # unusable: the next check opens a new connection


def liveness_keywords(connect_timeout_s: int) -> dict[str, int]:
    """libpq keywords that end a wait on a database that stopped answering.

    With every packet dropped, a read would otherwise wait for TCP to give up (~15
    minutes). Keepalive probes start after a second of silence, and tcp_user_timeout
    drops the connection once data (a query or a probe) stays unacknowledged for the
    connect timeout. Through the SSH tunnel the socket is the local forwarder's and the
    SSH connection carries the same bound (leaseguard.adapters.ssh). Values the DSN sets win.
    """
    silent_s = connect_timeout_s
    return {
        "keepalives": 1,
        "keepalives_idle": 1,
        "keepalives_interval": 1,
        "keepalives_count": max(1, silent_s),
        "tcp_user_timeout": silent_s * 1000,
    }


def _connect_cause(exc: psycopg.Error) -> str:
    text = str(exc).lower()
    for needle, phrase in _CONNECT_CAUSES:
        if needle in text:
            return phrase
    return "connection failed"


@contextmanager
def guard_transaction(
    conn: psycopg.Connection[tuple[object, ...]], contract: Contract
) -> Iterator[psycopg.Cursor[tuple[object, ...]]]:
    """A read-only transaction with the guard's own statement and lock budgets.

    A migration holding an ACCESS EXCLUSIVE lock on the table must make the check fail
    within its budget, not hang the deploy behind the very migration it guards.
    """
    with translate_errors(contract), read_transaction(conn):
        cur = conn.cursor()
        # Naive timestamps are read in the zone the contract declares, never in whatever
        # TimeZone the database or role happens to have (Oban, good_job write UTC). And no
        # parallel workers: the guard reads a handful of rows, and a misestimate (graphile's
        # attempts < max_attempts) would make it pay their start-up on every check.
        set_local(
            cur,
            statement_timeout=f"{contract.statement_timeout_ms}ms",
            lock_timeout=f"{contract.effective_lock_timeout_ms}ms",
            idle_in_transaction_session_timeout=f"{contract.statement_timeout_ms * 2}ms",
            TimeZone=contract.timestamp_zone or "UTC",
            max_parallel_workers_per_gather="0",
        )
        yield cur


def set_local_limits(
    executor: psycopg.Connection[Any] | psycopg.Cursor[Any], **limits_ms: int
) -> None:
    """Time limits for the current transaction only, in milliseconds (`set_local`)."""
    set_local(executor, **{name: f"{ms}ms" for name, ms in limits_ms.items()})


def set_local(executor: psycopg.Connection[Any] | psycopg.Cursor[Any], **settings: str) -> None:
    """Settings for the current transaction only (set_config's is_local = true).

    SET takes no bind parameters; set_config() does, so the setting's name and value are
    both bound values. The names are this module's callers' constants, never user input.
    All settings go in one statement.
    """
    call = sql.SQL("set_config(%s, %s, true)")
    query = sql.SQL("SELECT {}").format(sql.SQL(", ").join([call] * len(settings)))
    params = [part for name, value in settings.items() for part in (name, value)]
    executor.execute(query, params)


@contextmanager
def translate_errors(contract: Contract) -> Iterator[None]:
    """Turn driver errors into leaseguard errors that name what failed, and nothing more."""
    table = contract.table_label
    try:
        yield
    except pg_errors.QueryCanceled:
        raise GuardQueryFailed(
            f"guard query on table {table} exceeded statement_timeout="
            f"{contract.statement_timeout_ms}ms (QueryCanceled, SQLSTATE 57014)"
        ) from None
    except pg_errors.LockNotAvailable:
        raise GuardQueryFailed(
            f"table {table} is locked (lock_timeout={contract.effective_lock_timeout_ms}ms), "
            "probably by a migration (LockNotAvailable, SQLSTATE 55P03)"
        ) from None
    except pg_errors.InsufficientPrivilege:
        raise GuardQueryFailed(
            f"permission denied reading table {table}: grant the guard's role SELECT on it "
            "(InsufficientPrivilege, SQLSTATE 42501)"
        ) from None
    except pg_errors.UndefinedTable:
        raise SchemaMismatch(f"table {table} does not exist (UndefinedTable)") from None
    except pg_errors.UndefinedColumn:
        raise SchemaMismatch(
            f"a column named by the contract is missing from table {table} (UndefinedColumn)"
        ) from None
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"connection lost during the guard query on table {table} ({type(exc).__name__})"
        ) from None
    except psycopg.Error as exc:
        state = getattr(exc, "sqlstate", None) or "none"
        raise GuardQueryFailed(
            f"guard query on table {table} failed ({type(exc).__name__}, SQLSTATE {state})"
        ) from None
