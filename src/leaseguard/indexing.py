"""The index that keeps the guard's checks flat as the table grows, and the warning that
points at it when a large table is read with a sequential scan.

The guard reads only claimed and queued rows, a set bounded by the number of workers,
while the table grows with history (done, failed, cancelled rows). It also makes sure every
status present is classified (statuses.py), which asks the index for each distinct status
(a loose index scan). One btree index leading with `status::text` serves both: the guard
query reads the same few entries at 10^4 rows as at 10^7, and the status check visits each
distinct status once. A partial index over the claimed and queued statuses (what earlier
versions recommended, `<table>_leaseguard_claims`) serves the guard query only: it cannot
show a status it does not hold.

The index must match the predicate's own expressions for the planner to use it: the
predicate compares `status::text` (so enum status columns work), so the index key is
`status::text` too (for a text column, PostgreSQL stores that as the plain column). An enum
status column cannot take this index: PostgreSQL indexes only IMMUTABLE expressions and an
enum's ::text is STABLE (labels can be renamed), so for enums the warning says that instead.

Identifiers are `sql.Identifier`s and `sql.SQL` wraps constants only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any

import psycopg
from psycopg import sql

from leaseguard.contract import MAX_IDENTIFIER_BYTES, Contract
from leaseguard.db import set_local_limits
from leaseguard.predicate import counts_query, predicate_params, table_identifier
from leaseguard.statuses import StatusColumn
from leaseguard.verdict import Verdict

log = logging.getLogger("leaseguard.indexing")

INDEX_SUFFIX = "_leaseguard_status"
# Below this many rows a sequential scan costs a millisecond or two (benchmarks/RESULTS.md:
# ~1 ms at 10^4 rows, ~10 ms at 10^5): not worth a warning.
LARGE_TABLE_ROWS = 100_000
# A never-analysed table (reltuples = -1) counts as large from this size on disk.
LARGE_TABLE_BYTES = 64 * 1024 * 1024
# The plan check is advisory: it gets a small budget of its own, never the check's.
_PLAN_CHECK_TIMEOUT_MS = 1000

Cursor = psycopg.Cursor[tuple[object, ...]]


def index_name(contract: Contract) -> str:
    """`<table>_leaseguard_status`, shortened (with a hash of the table name) to 63 bytes."""
    name = contract.table + INDEX_SUFFIX
    if len(name.encode("utf-8")) <= MAX_IDENTIFIER_BYTES:
        return name
    digest = hashlib.sha256(contract.table.encode("utf-8")).hexdigest()[:8]
    tail = f"_{digest}{INDEX_SUFFIX}"
    budget = MAX_IDENTIFIER_BYTES - len(tail.encode("utf-8"))
    head = contract.table.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    return head + tail


def index_columns(contract: Contract) -> list[sql.Composable]:
    """(status::text), claimed_at, and the expiry column when the contract has one."""
    status = sql.Identifier(contract.status_column)
    columns: list[sql.Composable] = [
        sql.SQL("({}::text)").format(status),
        sql.Identifier(contract.claimed_at_column),
    ]
    expires = contract.lease.expires_at_column
    if expires and expires != contract.claimed_at_column:
        columns.append(sql.Identifier(expires))
    return columns


def recommended_index(contract: Contract) -> sql.Composed:
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS ... ((status::text), claimed_at[, expiry]).

    Over every row, not only the claimed and queued ones: the status check must see the
    statuses nobody configured. CONCURRENTLY: building it must not block the claim loop it
    is meant to serve. It cannot run inside a transaction block, so the statement is meant
    to be run alone.
    """
    return sql.SQL("CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} ({columns})").format(
        name=sql.Identifier(index_name(contract)),
        table=table_identifier(contract),
        columns=sql.SQL(", ").join(index_columns(contract)),
    )


def recommended_index_sql(contract: Contract) -> str:
    """The statement as text, terminated, for `leaseguard index-sql` and runbooks."""
    return recommended_index(contract).as_string(None) + ";"


# --- the seq-scan warning -------------------------------------------------------------------


def with_plan_warning(
    conn: psycopg.Connection[tuple[object, ...]],
    contract: Contract,
    verdict: Verdict,
    status_column: StatusColumn | None = None,
) -> Verdict:
    """The verdict, plus a warning when the guard query or its status check scans a large
    table sequentially.

    Advisory and fail-safe: any error (permissions, lock, timeout, a plan shape this code
    does not know) skips the warning and never fails or changes the check. Runs in its own
    transaction after the judgment, so an error here cannot abort the judgment's.
    """
    try:
        warning = plan_warning(conn, contract, verdict, status_column)
    except (psycopg.Error, LookupError, TypeError, ValueError) as exc:
        log.debug("plan check on table %s skipped (%s)", contract.table_label, type(exc).__name__)
        return verdict
    if warning is None:
        return verdict
    return dataclasses.replace(verdict, warnings=(*verdict.warnings, warning))


def plan_warning(
    conn: psycopg.Connection[tuple[object, ...]],
    contract: Contract,
    verdict: Verdict,
    status_column: StatusColumn | None = None,
) -> str | None:
    """A warning naming the table when it is large and the guard query's plan seq-scans it,
    or no index can walk its status column (the status check then reads every row).

    Two cheap steps: the planner's row estimate (pg_class.reltuples) first; EXPLAIN, without
    ANALYZE, only when the table is large.
    """
    params = predicate_params(
        contract, lease_s=verdict.lease_s, runtime_started_at=verdict.runtime_started_at
    )
    lock_ms = min(_PLAN_CHECK_TIMEOUT_MS, contract.effective_lock_timeout_ms)
    with conn.transaction(), conn.cursor() as cur:
        set_local_limits(cur, statement_timeout=_PLAN_CHECK_TIMEOUT_MS, lock_timeout=lock_ms)
        table = large_table(cur, contract)
        if table is None:
            return None
        cur.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + counts_query(contract), params)
        row = cur.fetchone()
    guard_scans = row is not None and bool(seq_scans(row[0], contract.table))
    status_scans = status_column is not None and status_column.index_key is None
    if not guard_scans and not status_scans:
        return None
    rows, status_is_enum = table
    column = contract.status_column
    if guard_scans:
        where = (
            f"the guard query reads table {contract.table_label} (~{rows:.0f} rows) "
            "with a sequential scan"
        )
    else:
        where = (
            f"the status check (every status classified) reads table {contract.table_label} "
            f"(~{rows:.0f} rows) with a sequential scan: no btree index leads with its "
            f"status column {column}"
        )
    if status_is_enum:
        return (
            f"{where}; its status column {column} is an enum: an index on ({column}) makes "
            "the status check an index probe, but PostgreSQL cannot index an enum's ::text "
            "(not IMMUTABLE), which the guard query compares"
        )
    return (
        f"{where}; `leaseguard index-sql` (with the same contract options) prints the "
        f"index {index_name(contract)} that keeps each check flat"
    )


def large_table(cur: Cursor, contract: Contract) -> tuple[float, bool] | None:
    """(estimated rows, status column is an enum) when the table counts as large, else None.

    reltuples is the planner's own estimate, kept by ANALYZE and autovacuum; a table never
    analysed (-1) counts as large by its size on disk.
    """
    qualified = table_identifier(contract).as_string(cur.connection)
    cur.execute(
        """
        SELECT c.reltuples, pg_relation_size(c.oid), coalesce(t.typtype = 'e', false)
        FROM pg_class c
        LEFT JOIN pg_attribute a
               ON a.attrelid = c.oid AND a.attname = %s AND NOT a.attisdropped
        LEFT JOIN pg_type t ON t.oid = a.atttypid
        WHERE c.oid = to_regclass(%s)
        """,
        (contract.status_column, qualified),
    )
    row = cur.fetchone()
    if row is None:
        return None
    reltuples, size, is_enum = row
    if not isinstance(reltuples, float | int) or not isinstance(size, int):
        return None
    if reltuples >= LARGE_TABLE_ROWS:
        return float(reltuples), is_enum is True
    if reltuples < 0 and size >= LARGE_TABLE_BYTES:
        # ~100 bytes a row: an order of magnitude, for the message only.
        return float(size // 100), is_enum is True
    return None


def seq_scans(plan: Any, table: str) -> list[dict[str, Any]]:
    """The Seq Scan nodes (parallel or not) over `table` in an EXPLAIN (FORMAT JSON) result."""
    found: list[dict[str, Any]] = []
    stack: list[Any] = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") == table:
                found.append(node)
            stack.extend(v for v in node.values() if isinstance(v, list | dict))
    return found
