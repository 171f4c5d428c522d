"""The warning that points at the guard's index when a large table is read with a
sequential scan: advisory, after the judgment, never failing or changing the check."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import sql

from leaseguard.adapters.db import read_transaction, set_local_limits
from leaseguard.adapters.indexing import index_name
from leaseguard.adapters.statuses import StatusColumn
from leaseguard.core.contract import Contract
from leaseguard.core.predicate import counts_query, predicate_params, table_identifier
from leaseguard.core.verdict import Verdict

log = logging.getLogger("leaseguard.indexing")

# Below this many rows a sequential scan costs a millisecond or two (~1 ms at 10^4 rows,
# ~10 ms at 10^5, measured here): not worth a warning.
LARGE_TABLE_ROWS = 100_000
# A never-analysed table (reltuples = -1) counts as large from this size on disk.
LARGE_TABLE_BYTES = 64 * 1024 * 1024
# The plan check is advisory: it gets a small budget of its own, never the check's.
_PLAN_CHECK_TIMEOUT_MS = 1000


def advisory_plan_warning(
    conn: psycopg.Connection[tuple[object, ...]],
    contract: Contract,
    verdict: Verdict,
    status_column: StatusColumn | None = None,
) -> str | None:
    """A warning when the guard query or its status check scans a large table sequentially
    (`plan_warning`), else None.

    Advisory and fail-safe: any error (permissions, lock, timeout, a plan shape this code
    does not know) gives None, logged at DEBUG, and never fails the check. Runs in its own
    transaction after the judgment, so an error here cannot abort the judgment's.
    """
    try:
        return plan_warning(conn, contract, verdict, status_column)
    except (psycopg.Error, LookupError, TypeError, ValueError) as exc:
        log.debug("plan check on table %s skipped (%s)", contract.table_label, type(exc).__name__)
        return None


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
    with read_transaction(conn):
        set_local_limits(conn, statement_timeout=_PLAN_CHECK_TIMEOUT_MS, lock_timeout=lock_ms)
        table = large_table(conn, contract)
        if table is None:
            return None
        explain = sql.SQL("EXPLAIN (FORMAT JSON) ") + counts_query(contract)
        row = conn.execute(explain, params).fetchone()
    rows, relations = table
    guard_scans = row is not None and bool(seq_scans(row[0], relations))
    status_scans = (
        status_column is not None
        and status_column.reads_rows(contract)
        and status_column.index_key is None
    )
    if not guard_scans and not status_scans:
        return None
    if guard_scans:
        where = (
            f"the guard query reads table {contract.table_label} (~{rows:.0f} rows) "
            "with a sequential scan"
        )
    else:
        where = (
            f"the status check (every status classified) reads table {contract.table_label} "
            f"(~{rows:.0f} rows) with a sequential scan: no btree index leads with its "
            f"status column {contract.status_column}"
        )
    return (
        f"{where}; `leaseguard index-sql` (with the same contract options) prints the "
        f"index {index_name(contract)} that keeps each check flat"
    )


def large_table(
    conn: psycopg.Connection[tuple[object, ...]], contract: Contract
) -> tuple[float, frozenset[str]] | None:
    """(estimated rows, names of the table and its partitions) when large, else None.

    reltuples is the planner's own estimate, kept by ANALYZE and autovacuum; a table never
    analysed (-1) counts as large by its size on disk. A partitioned table's rows live in
    its leaf partitions (pg_partition_tree lists none for a plain table), and
    EXPLAIN names the partitions it scans, not the parent.
    """
    qualified = table_identifier(contract).as_string(conn)
    row = conn.execute(
        """
        SELECT coalesce(sum(greatest(c.reltuples, 0)), 0),
               bool_or(c.reltuples < 0),
               coalesce(sum(pg_relation_size(c.oid)), 0)::bigint,
               array_agg(c.relname::text)
        FROM pg_class c
        WHERE c.oid = to_regclass(%s)
           OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass(%s)) WHERE isleaf)
        """,
        (qualified, qualified),
    ).fetchone()
    if row is None:
        return None
    reltuples, unanalysed, size, names = row
    if not isinstance(reltuples, float | int) or not isinstance(size, int) or not names:
        return None
    relations = frozenset(str(n) for n in names)  # type: ignore[attr-defined]
    if reltuples >= LARGE_TABLE_ROWS:
        return float(reltuples), relations
    if unanalysed and size >= LARGE_TABLE_BYTES:
        # ~100 bytes a row: an order of magnitude, for the message only.
        return float(size // 100), relations
    return None


def seq_scans(plan: Any, table: str | frozenset[str]) -> list[dict[str, Any]]:
    """The Seq Scan nodes (parallel or not) over `table` (or any of a set of names, a
    partitioned table and its partitions) in an EXPLAIN (FORMAT JSON) result."""
    names = frozenset({table}) if isinstance(table, str) else table
    found: list[dict[str, Any]] = []
    stack: list[Any] = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in names:
                found.append(node)
            stack.extend(v for v in node.values() if isinstance(v, list | dict))
    return found
