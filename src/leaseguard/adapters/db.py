"""The database connection: time-boxed, named; no driver text (it may quote a DSN) leaves here."""

import math
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from leaseguard.core.config_values import invalid_dsn
from leaseguard.core.contract import Contract
from leaseguard.core.errors import DatabaseUnavailable, GuardQueryFailed, SchemaMismatch
from leaseguard.core.fleet import ClockOffset, controller_offset

Connection = psycopg.Connection[tuple[Any, ...]]  # psycopg's TupleRow
Cursor = psycopg.Cursor[tuple[Any, ...]]
APPLICATION_NAME = "leaseguard"

_PASSWORD_FROM = (  # where a password is set, not one
    "PGPASSWORD or ~/.pgpass on the controller, password= in the DSN (--dsn, "  # noqa: S105
    "LEASEGUARD_DSN, fabric.yaml's connection.dsn) or, under Ansible, "
    "leaseguard_db_password (LEASEGUARD_DB_PASSWORD)"
)

# libpq's connection failures, reported by a fixed phrase (the raw text may quote the DSN).
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
    dbname = str(params.get("dbname") or os.environ.get("PGDATABASE") or "default database")
    if re.match(r".*=|\s*postgres(?:ql)?://", dbname, re.DOTALL):  # libpq: a conninfo, secrets too
        dbname = "a database named by a connection string"
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
) -> Connection:
    """A connection named leaseguard: read-only repeatable-read, or `writable` (autocommit)."""
    try:
        given = conninfo_to_dict(conninfo)
        if dbname:
            conninfo = make_conninfo(conninfo, dbname=dbname)
        if user:
            as_user = {k: v for k, v in conninfo_to_dict(conninfo).items() if k != "password"}
            conninfo = make_conninfo("", **{**as_user, "user": user, "password": password})
    except psycopg.ProgrammingError:
        raise invalid_dsn(conninfo) from None
    # A silent database ends the wait within the connect timeout, not TCP's ~15 minutes.
    liveness = dict(keepalives=1, keepalives_idle=1, keepalives_interval=1)
    liveness |= dict(keepalives_count=max(1, connect_timeout_s))
    liveness |= dict(tcp_user_timeout=connect_timeout_s * 1000)
    if timeout_s is not None and timeout_s < connect_timeout_s:  # the caller's budget is shorter
        connect_timeout_s = max(1, math.ceil(timeout_s))
    try:
        conn = psycopg.Connection.connect(
            make_conninfo(conninfo, **{k: v for k, v in liveness.items() if k not in given}),
            application_name=APPLICATION_NAME,
            connect_timeout=connect_timeout_s,
            autocommit=writable,
            prepare_threshold=None,  # never prepared: a transaction-mode pooler may switch sessions
        )
    except psycopg.Error as exc:
        text = str(exc).lower()
        cause = next((p for n, p in _CONNECT_CAUSES if n in text), "connection failed")
        raise DatabaseUnavailable(
            f"cannot connect to PostgreSQL at {describe_target(conninfo)}: "
            f"{cause} ({type(exc).__name__})"
        ) from None
    if not writable:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
    return conn


@contextmanager
def read_transaction(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """A read-only repeatable-read transaction (a savepoint inside one), quiet if rollback fails."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        with conn.transaction():
            yield
        return
    if conn.autocommit:
        conn.execute(b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        yield
    except BaseException:
        if not conn.closed:
            try:
                conn.rollback()
            except psycopg.Error:
                conn.close()
        raise
    conn.commit()


def here_minus_database(conn: Connection, contract: Contract) -> ClockOffset:
    """This machine's clock minus the database's (clock_timestamp, not the transaction's now())."""
    before = time.time()
    with translate_errors(contract), read_transaction(conn):
        [(now,)] = conn.execute("SELECT extract(epoch FROM pg_catalog.clock_timestamp())::float8")
    return controller_offset(float(now), before, time.time())


@contextmanager
def guard_transaction(conn: Connection, contract: Contract) -> Iterator[Cursor]:
    """A read-only transaction with the guard's budgets: a migration's lock fails it in time."""
    with translate_errors(contract), read_transaction(conn):
        cur = conn.cursor()
        # Naive timestamps in the contract's zone; no parallel workers (start-up costs more).
        set_local_limits(
            cur,
            statement_timeout=contract.statement_timeout_ms,
            lock_timeout=contract.effective_lock_timeout_ms,
            idle_in_transaction_session_timeout=contract.statement_timeout_ms * 2,
            TimeZone=contract.timestamp_zone or "UTC",
            max_parallel_workers_per_gather="0",
        )
        yield cur


# search_path with pg_catalog named first (named later or not at all, it is searched first).
_CATALOG_FIRST = sql.SQL(
    "pg_catalog.set_config('search_path', pg_catalog.rtrim(pg_catalog.concat("
    "'pg_catalog, ', pg_catalog.current_setting('search_path')), ', '), true)"
)


def set_local_limits(executor: Connection | Cursor, **settings: int | str) -> None:
    """Settings (an int: milliseconds) for this transaction only, and pg_catalog first in
    search_path: no schema of the role's path shadows a builtin the guard calls (now(), `<`)."""
    # Times read back in the one style psycopg parses, whatever the role or database sets.
    settings = {**settings, "DateStyle": "ISO", "IntervalStyle": "postgres"}
    params = [p for k, v in settings.items() for p in (k, f"{v}ms" if isinstance(v, int) else v)]
    calls = sql.SQL(", ").join([sql.SQL("pg_catalog.set_config(%s, %s, true)")] * len(settings))
    executor.execute(sql.SQL("SELECT {}, {}").format(calls, _CATALOG_FIRST), params)


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
