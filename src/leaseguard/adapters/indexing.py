"""The index keeping the guard's checks flat (`leaseguard index-sql`), and the seq-scan warning."""

import hashlib
import logging
from typing import Any

import psycopg
from psycopg import sql

from leaseguard.adapters.catalog import StatusColumn
from leaseguard.adapters.db import Connection, read_transaction, set_local_limits
from leaseguard.adapters.guard import Subject
from leaseguard.core import predicate, presets
from leaseguard.core.config_values import MAX_IDENTIFIER_BYTES
from leaseguard.core.contract import Contract
from leaseguard.core.errors import SchemaMismatch
from leaseguard.core.verdict import Verdict

log = logging.getLogger("leaseguard.indexing")

INDEX_SUFFIX = "_leaseguard_status"
# A constant comment: a table name may hold a newline, which would end a `--` comment.
INDEX_COMMENT = "-- leaseguard: the guard's status index; run it alone, not in a transaction"
_OWN_PARTIAL_INDEX = (
    "-- leaseguard: this preset reads only the jobs that are not done, through the queue's "
    "own partial index over them ({}); no index needed"
)
# Why a claim rule needs no index of leaseguard's (locks come from pg_locks, no index's).
_NO_INDEX_REASONS = {
    presets.OWNER_HEARTBEAT_RULE: "-- leaseguard: this preset's claims table holds only the "
    "current claims (rows are deleted when a job ends); no index needed",
    presets.VISIBILITY_RULE: "-- leaseguard: this preset judges every message of the queue's "
    "table (deleted and archived ones leave it); no index needed",
    presets.ADVISORY_LOCK_RULE: _OWN_PARTIAL_INDEX.format("que_poll_idx"),
    presets.PROCESS_LOCK_RULE: _OWN_PARTIAL_INDEX.format(
        "index_good_jobs_on_scheduled_at and others"
    ),
}
_CONCURRENTLY = sql.SQL("CONCURRENTLY IF NOT EXISTS")

# The table's kind; the valid indexes serving the guard (leaseguard's own, or a non-partial
# btree leading with the lead column: River's, Oban's); its leaf partitions (schema, name).
_TABLE = """
    SELECT t.relkind::text,
      ARRAY(SELECT i.indexrelid::regclass::text FROM pg_index i
            JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
            LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
            WHERE i.indrelid = t.oid AND i.indisvalid
              AND ((i.indpred IS NULL AND am.amname = 'btree' AND a.attname = %(column)s)
                   OR c.relname = %(own)s)
            ORDER BY 1),
      ARRAY(SELECT ARRAY[n.nspname::text, c.relname::text] FROM pg_partition_tree(t.oid) p
            JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE p.isleaf ORDER BY 1)
    FROM pg_class t WHERE t.oid = to_regclass(%(table)s)"""
# Below this many rows a sequential scan costs a millisecond or two: not worth a warning.
LARGE_TABLE_ROWS = 100_000
# A never-analysed table (reltuples = -1) counts as large from this size on disk.
LARGE_TABLE_BYTES = 64 * 1024 * 1024
_PLAN_CHECK_TIMEOUT_MS = 1000  # its own small budget, never the check's
# Estimated rows, whether never analysed, size on disk, names of the table and its leaves.
_SIZE = """
    SELECT coalesce(sum(greatest(c.reltuples, 0)), 0), bool_or(c.reltuples < 0),
           coalesce(sum(pg_relation_size(c.oid)), 0)::bigint, array_agg(c.relname::text)
    FROM pg_class c WHERE c.oid = to_regclass(%(table)s)
       OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass(%(table)s)) WHERE isleaf)"""


def index_name(table: str) -> str:
    """`<table>_leaseguard_status`; over 63 bytes, the table's head, a hash of it, the suffix."""
    if len(f"{table}{INDEX_SUFFIX}".encode()) <= MAX_IDENTIFIER_BYTES:
        return f"{table}{INDEX_SUFFIX}"
    tail = f"_{hashlib.sha256(table.encode('utf-8')).hexdigest()[:8]}{INDEX_SUFFIX}"
    budget = MAX_IDENTIFIER_BYTES - len(tail.encode("utf-8"))
    return table.encode("utf-8")[:budget].decode("utf-8", errors="ignore") + tail


def _create_index(contract: Contract, how: sql.Composable, name: str, table: sql.Composable) -> str:
    """CREATE INDEX on (lead, claimed_at, expiry) over every row; partial only without a status."""
    lead = contract.status_column if contract.has_status_column else contract.claimed_at_column
    columns = [lead]  # the column the guard filters on: status, or locked_at (graphile)
    if contract.has_claimed_at and lead != contract.claimed_at_column:
        columns.append(contract.claimed_at_column)
    expires = contract.lease.expires_at_column
    if expires and expires != contract.claimed_at_column:
        columns.append(expires)
    statement = sql.SQL("CREATE INDEX {} {} ON {} ({})").format(
        how, sql.Identifier(name), table, sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    if not contract.has_status_column:
        statement += sql.SQL(" WHERE {} OR {}").format(*predicate.claim_conditions(contract))
    return statement.as_string(None) + ";"


def recommended_index_sql(contract: Contract) -> str:
    """CREATE INDEX CONCURRENTLY: building it must not block the claim loop it serves."""
    return _create_index(
        contract, _CONCURRENTLY, index_name(contract.table), predicate.table_identifier(contract)
    )


def offline_advice(contract: Contract) -> list[str]:
    """What `leaseguard index-sql` prints without a database."""
    if (reason := _NO_INDEX_REASONS.get(contract.claim_rule)) is not None:
        return [reason]
    if contract.preset in presets.PARTITIONED_TABLES:
        return [
            "-- leaseguard: this preset's table is partitioned (one partition per queue), and "
            "PostgreSQL refuses CREATE INDEX CONCURRENTLY on a partitioned table",
            "-- run `leaseguard index-sql` with --dsn: it reads the partitions and prints the "
            "recipe (an index ON ONLY the parent, one built CONCURRENTLY per partition, then "
            "ATTACH)",
        ]
    return [
        INDEX_COMMENT,
        "-- it supersedes an earlier version's partial *_leaseguard_claims index",
        recommended_index_sql(contract),
    ]


def index_advice(conn: Connection, contract: Contract) -> list[str]:
    """What `leaseguard index-sql --dsn` prints: an index already serving the guard, or a recipe."""
    if (reason := _NO_INDEX_REASONS.get(contract.claim_rule)) is not None:
        return [reason]
    lead = contract.status_column if contract.has_status_column else contract.claimed_at_column
    table = predicate.table_identifier(contract).as_string(conn)
    with conn.transaction():
        params = {"table": table, "column": lead, "own": index_name(contract.table)}
        row: Any = conn.execute(_TABLE, params).fetchone()
    if row is None:
        raise SchemaMismatch(f"table {contract.table_label} does not exist (or is not visible)")
    relkind, serving, partitions = row
    if serving:
        return [
            f"-- leaseguard: existing index(es) already serve the guard's checks on "
            f"{lead}: {', '.join(serving)}; nothing to create"
        ]
    if relkind != "p":
        return [INDEX_COMMENT, recommended_index_sql(contract)]
    parent = index_name(contract.table)
    only = sql.SQL("ONLY {}").format(predicate.table_identifier(contract))
    parent_name = predicate.table_identifier(contract, parent)
    attach = sql.SQL("ALTER INDEX {} ATTACH PARTITION {};")
    steps = [
        "-- leaseguard: partitioned table; CREATE INDEX CONCURRENTLY is refused on the parent, "
        "so: an index ON ONLY the parent, one per partition built concurrently, then ATTACH "
        "(run each statement alone, not in a transaction)",
        _create_index(contract, sql.SQL("IF NOT EXISTS"), parent, only),
    ]
    for schema, partition in partitions:
        child = index_name(partition)
        steps += [
            _create_index(contract, _CONCURRENTLY, child, sql.Identifier(schema, partition)),
            attach.format(parent_name, sql.Identifier(schema, child)).as_string(None),
        ]
    return steps


def advisory_plan_warning(
    conn: Connection, contract: Contract, verdict: Verdict, column: StatusColumn | None = None
) -> str | None:
    """A warning when a large table is seq-scanned (EXPLAIN) or unindexed; any error: None."""
    try:
        with read_transaction(conn):
            lock_ms = min(_PLAN_CHECK_TIMEOUT_MS, contract.effective_lock_timeout_ms)
            set_local_limits(conn, statement_timeout=_PLAN_CHECK_TIMEOUT_MS, lock_timeout=lock_ms)
            table = predicate.table_identifier(contract).as_string(conn)
            [(reltuples, unanalysed, on_disk, names)] = conn.execute(_SIZE, {"table": table})
            if reltuples >= LARGE_TABLE_ROWS:
                rows = float(reltuples)
            elif unanalysed and on_disk >= LARGE_TABLE_BYTES:
                rows = float(on_disk // 100)  # ~100 bytes a row: for the message only
            else:
                return None
            judged = Subject(None, None, verdict.lease_s, verdict.runtime_started_at)
            params = predicate.subjects_params(contract, [judged.bound(contract)])
            explain = sql.SQL("EXPLAIN (FORMAT JSON) ") + predicate.counts_query(contract)
            row = conn.execute(explain, params).fetchone()
    except (psycopg.Error, LookupError, TypeError, ValueError) as exc:
        log.debug("plan check on table %s skipped (%s)", contract.table_label, type(exc).__name__)
        return None
    reads = f"reads table {contract.table_label} (~{rows:.0f} rows) with a sequential scan"
    if row is not None and _seq_scans(row[0], frozenset(names)):
        where = f"the guard query {reads}"
    elif column and column.reads_rows(contract) and column.index_key is None:
        where = (
            f"the status check (every status classified) {reads}: no btree index leads with "
            f"its status column {contract.status_column}"
        )
    else:
        return None
    return (
        f"{where}; `leaseguard index-sql` (with the same contract options) prints the "
        f"index {index_name(contract.table)} that keeps each check flat"
    )


def _seq_scans(node: Any, names: frozenset[str]) -> bool:
    """Whether an EXPLAIN (FORMAT JSON) result has a Seq Scan (parallel or not) over `names`."""
    if isinstance(node, dict):
        if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in names:
            return True
        node = list(node.values())
    return isinstance(node, list) and any(_seq_scans(child, names) for child in node)
