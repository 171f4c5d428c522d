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

# Below this many rows a sequential scan costs a millisecond or two: not worth a warning.
LARGE_TABLE_ROWS = 100_000
# A never-analysed table (reltuples = -1) counts as large from this size on disk.
LARGE_TABLE_BYTES = 64 * 1024 * 1024
_PLAN_CHECK_TIMEOUT_MS = 1000  # its own small budget, never the check's

# Estimated rows (the planner's reltuples), whether never analysed, size on disk, and the
# names of the table and its leaf partitions (EXPLAIN names the partitions, not the parent).
_SIZE = """
    SELECT coalesce(sum(greatest(c.reltuples, 0)), 0), bool_or(c.reltuples < 0),
           coalesce(sum(pg_relation_size(c.oid)), 0)::bigint, array_agg(c.relname::text)
    FROM pg_class c
    WHERE c.oid = to_regclass(%(table)s)
       OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass(%(table)s)) WHERE isleaf)
"""


def advisory_plan_warning(
    conn: psycopg.Connection[tuple[object, ...]],
    contract: Contract,
    verdict: Verdict,
    status_column: StatusColumn | None = None,
) -> str | None:
    """A warning naming the table when it is large and the guard query's plan (EXPLAIN, not
    ANALYZE) seq-scans it, or no index can walk its status column, else None.

    In its own transaction after the judgment; any error gives None (logged at DEBUG).
    """
    try:
        with read_transaction(conn):
            lock_ms = min(_PLAN_CHECK_TIMEOUT_MS, contract.effective_lock_timeout_ms)
            set_local_limits(conn, statement_timeout=_PLAN_CHECK_TIMEOUT_MS, lock_timeout=lock_ms)
            table = table_identifier(contract).as_string(conn)
            size: Any = conn.execute(_SIZE, {"table": table}).fetchone()
            reltuples, unanalysed, on_disk, names = size
            if reltuples >= LARGE_TABLE_ROWS:
                rows = float(reltuples)
            elif unanalysed and on_disk >= LARGE_TABLE_BYTES:
                rows = float(on_disk // 100)  # ~100 bytes a row: for the message only
            else:
                return None
            params = predicate_params(
                contract, lease_s=verdict.lease_s, runtime_started_at=verdict.runtime_started_at
            )
            explain = sql.SQL("EXPLAIN (FORMAT JSON) ") + counts_query(contract)
            row = conn.execute(explain, params).fetchone()
    except (psycopg.Error, LookupError, TypeError, ValueError) as exc:
        log.debug("plan check on table %s skipped (%s)", contract.table_label, type(exc).__name__)
        return None
    if row is not None and seq_scans(row[0], frozenset(names)):
        where = (
            f"the guard query reads table {contract.table_label} (~{rows:.0f} rows) "
            "with a sequential scan"
        )
    elif status_column and status_column.reads_rows(contract) and status_column.index_key is None:
        where = (
            f"the status check (every status classified) reads table {contract.table_label} "
            f"(~{rows:.0f} rows) with a sequential scan: no btree index leads with its "
            f"status column {contract.status_column}"
        )
    else:
        return None
    return (
        f"{where}; `leaseguard index-sql` (with the same contract options) prints the "
        f"index {index_name(contract)} that keeps each check flat"
    )


def seq_scans(plan: Any, table: str | frozenset[str]) -> list[dict[str, Any]]:
    """The Seq Scan nodes (parallel or not) over `table` (or any of a set of names) in an
    EXPLAIN (FORMAT JSON) result."""
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
