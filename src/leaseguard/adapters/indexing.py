"""The index that keeps the guard's checks flat as the table grows (`leaseguard index-sql`;
plan_warning.py points at it when a large table is read with a sequential scan).

The guard reads only claimed and queued rows, a set bounded by the number of workers,
while the table grows with history (done, failed, cancelled rows). It also makes sure every
status present is classified (statuses.py), which asks the index for each distinct status
(a loose index scan). One btree index leading with the status column serves both: the
guard query reads the same few entries at 10^4 rows as at 10^7, and the status check visits
each distinct status once. A partial index over the claimed and queued statuses (what earlier
versions recommended, `<table>_leaseguard_claims`) serves the guard query only: it cannot
show a status it does not hold.

The index must match the predicate's own expressions for the planner to use it: the
predicate compares the status column natively (no cast), so the index key names the plain
column; that works for text and enum status columns alike, and it is why a queue's own
index leading with its status column (River's, Oban's) already serves both checks. A
contract without a status column (graphile-worker: claimed iff locked_at is set) has no
status check; its index is partial, over the rows the guard reads, in the guard's terms.

A partitioned table (pg-boss) refuses CREATE INDEX CONCURRENTLY on its parent: the recipe
there is an invalid index ON ONLY the parent, one concurrent index per partition, and an
ATTACH of each, after which the parent index is valid and covers future partitions too.

Identifiers are `sql.Identifier`s and `sql.SQL` wraps constants only.
"""

from __future__ import annotations

import hashlib

import psycopg
from psycopg import sql

from leaseguard.core.config_values import MAX_IDENTIFIER_BYTES
from leaseguard.core.contract import Contract
from leaseguard.core.errors import SchemaMismatch
from leaseguard.core.predicate import (
    claim_conditions,
    table_identifier,
)
from leaseguard.core.presets import (
    ADVISORY_LOCK_RULE,
    OWNER_HEARTBEAT_RULE,
    PARTITIONED_TABLES,
    PROCESS_LOCK_RULE,
    VISIBILITY_RULE,
)

INDEX_SUFFIX = "_leaseguard_status"


def index_name(contract: Contract) -> str:
    """`<table>_leaseguard_status`, shortened (with a hash of the table name) to 63 bytes."""
    return _short_name(contract.table + INDEX_SUFFIX)


def _short_name(name: str) -> str:
    """`name` when it fits in 63 bytes, else its head plus a hash and the suffix."""
    if len(name.encode("utf-8")) <= MAX_IDENTIFIER_BYTES:
        return name
    stem = name.removesuffix(INDEX_SUFFIX)
    digest = hashlib.sha256(stem.encode("utf-8")).hexdigest()[:8]
    tail = f"_{digest}{INDEX_SUFFIX}"
    budget = MAX_IDENTIFIER_BYTES - len(tail.encode("utf-8"))
    head = stem.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    return head + tail


def index_columns(contract: Contract) -> list[sql.Composable]:
    """status, claimed_at (when claims record one: procrastinate's do not), and the expiry
    column when the contract has one."""
    columns: list[sql.Composable] = [sql.Identifier(lead_column(contract))]
    if contract.has_claimed_at and lead_column(contract) != contract.claimed_at_column:
        columns.append(sql.Identifier(contract.claimed_at_column))
    expires = contract.lease.expires_at_column
    if expires and expires != contract.claimed_at_column:
        columns.append(sql.Identifier(expires))
    return columns


def lead_column(contract: Contract) -> str:
    """The column the guard's WHERE clause filters on: status, or locked_at (graphile)."""
    if not contract.has_status_column:
        return contract.claimed_at_column
    return contract.status_column


def index_predicate(contract: Contract) -> sql.Composable | None:
    """The index's WHERE clause: none with a status column (the status check must see every
    status); without one (graphile-worker), the rows the guard reads, in its own terms."""
    if contract.has_status_column:
        return None
    claimed, queued = claim_conditions(contract)
    return sql.SQL("{} OR {}").format(claimed, queued)


def recommended_index(contract: Contract) -> sql.Composed:
    """CREATE INDEX CONCURRENTLY IF NOT EXISTS ... (status, claimed_at[, expiry]).

    Over every row, not only the claimed and queued ones: the status check must see the
    statuses nobody configured (only a contract without a status column gets a partial
    one, `index_predicate`). CONCURRENTLY: building it must not block the claim loop it
    is meant to serve. It cannot run inside a transaction block, so the statement is meant
    to be run alone.
    """
    return _create_index(
        sql.SQL("CONCURRENTLY IF NOT EXISTS"),
        sql.Identifier(index_name(contract)),
        table_identifier(contract),
        contract,
    )


def _create_index(
    how: sql.Composable, name: sql.Composable, table: sql.Composable, contract: Contract
) -> sql.Composed:
    statement = sql.SQL("CREATE INDEX {how} {name} ON {table} ({columns})").format(
        how=how,
        name=name,
        table=table,
        columns=sql.SQL(", ").join(index_columns(contract)),
    )
    where = index_predicate(contract)
    if where is None:
        return statement
    return statement + sql.SQL(" WHERE {}").format(where)


# A constant comment: a table name may hold a newline, which would end a `--` comment.
INDEX_COMMENT = "-- leaseguard: the guard's status index; run it alone, not in a transaction"


# Solid Queue deletes a claim when its job ends: the claims table never outgrows the workers.
NO_INDEX_NEEDED = (
    "-- leaseguard: this preset's claims table holds only the current claims "
    "(rows are deleted when a job ends); no index needed"
)
# Que and good_job: the guard reads the jobs that are not done, which the queue's own
# partial indexes hold (Que's que_poll_idx, good_job's `WHERE finished_at IS NULL` ones);
# the locks come from pg_locks, which no index can serve.
_OWN_PARTIAL_INDEX = (
    "-- leaseguard: this preset reads only the jobs that are not done, through the queue's "
    "own partial index over them ({}); no index needed"
)
_NO_INDEX_REASONS = {
    OWNER_HEARTBEAT_RULE: NO_INDEX_NEEDED,
    # pgmq: every row of a queue's table is a message not yet deleted or archived, and the
    # guard judges each one (read or not): no index narrows that.
    VISIBILITY_RULE: "-- leaseguard: this preset judges every message of the queue's table "
    "(deleted and archived ones leave it); no index needed",
    ADVISORY_LOCK_RULE: _OWN_PARTIAL_INDEX.format("que_poll_idx"),
    PROCESS_LOCK_RULE: _OWN_PARTIAL_INDEX.format("index_good_jobs_on_scheduled_at and others"),
}


def no_index_reason(contract: Contract) -> str | None:
    """Why the contract needs no index of leaseguard's (a comment line), or None."""
    return _NO_INDEX_REASONS.get(contract.claim_rule)


def index_needed(contract: Contract) -> bool:
    """False when the rows the guard reads are few by design (Solid Queue's claims table)
    or served by the queue's own partial index (Que, good_job)."""
    return no_index_reason(contract) is None


# Offline, for a preset whose stock table is partitioned (pg-boss): PostgreSQL refuses
# CREATE INDEX CONCURRENTLY on a partitioned table, and the partitions are only known by
# reading the catalog.
PARTITIONED_OFFLINE = (
    "-- leaseguard: this preset's table is partitioned (one partition per queue), and "
    "PostgreSQL refuses CREATE INDEX CONCURRENTLY on a partitioned table",
    "-- run `leaseguard index-sql` with --dsn: it reads the partitions and prints the recipe "
    "(an index ON ONLY the parent, one built CONCURRENTLY per partition, then ATTACH)",
)


def offline_advice(contract: Contract) -> list[str]:
    """What `leaseguard index-sql` prints without a database (comment lines and at most one
    statement); never CONCURRENTLY for a table the preset knows to be partitioned."""
    if (reason := no_index_reason(contract)) is not None:
        return [reason]
    if contract.preset in PARTITIONED_TABLES:
        return list(PARTITIONED_OFFLINE)
    return [
        INDEX_COMMENT,
        "-- it supersedes an earlier version's partial *_leaseguard_claims index",
        recommended_index_sql(contract),
    ]


def recommended_index_sql(contract: Contract) -> str:
    """The statement as text, terminated, for `leaseguard index-sql` and runbooks."""
    return recommended_index(contract).as_string(None) + ";"


def partitioned_index_sql(contract: Contract, partitions: list[tuple[str, str]]) -> list[str]:
    """The recipe for a partitioned table: ON ONLY parent, concurrent per partition, ATTACH.

    `partitions` are (schema, name) of the leaf partitions. The parent index starts invalid
    and becomes valid once every partition's index is attached.
    """
    parent = index_name(contract)
    parent_ident = _index_ident(contract.schema, parent)
    steps = [
        _create_index(
            sql.SQL("IF NOT EXISTS"), sql.Identifier(parent), _only(contract), contract
        ).as_string(None)
        + ";"
    ]
    for schema, partition in partitions:
        child = _short_name(f"{partition}{INDEX_SUFFIX}")
        steps.append(
            _create_index(
                sql.SQL("CONCURRENTLY IF NOT EXISTS"),
                sql.Identifier(child),
                sql.Identifier(schema, partition),
                contract,
            ).as_string(None)
            + ";"
        )
        steps.append(
            sql.SQL("ALTER INDEX {} ATTACH PARTITION {};")
            .format(parent_ident, _index_ident(schema, child))
            .as_string(None)
        )
    return steps


def _only(contract: Contract) -> sql.Composable:
    return sql.SQL("ONLY {}").format(table_identifier(contract))


def _index_ident(schema: str | None, name: str) -> sql.Identifier:
    return sql.Identifier(schema, name) if schema else sql.Identifier(name)


def serving_indexes_query() -> sql.SQL:
    """Valid indexes of a relation that serve the guard: leaseguard's own (by name), or a
    non-partial btree whose first key column is the given one.

    Such an index serves the guard's `lead = ANY(...)` (or `locked_at IS NOT NULL`) as it
    stands, and, being over every row, the status check's walk over the distinct statuses
    too: River's and Oban's (state, queue, priority, ...) fetching indexes do.
    """
    return sql.SQL(
        """
        SELECT i.indexrelid::regclass::text
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_am am ON am.oid = c.relam
        LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
        WHERE i.indrelid = %(relation)s AND i.indisvalid
          AND ((i.indpred IS NULL AND am.amname = 'btree' AND a.attname = %(column)s)
               OR c.relname = %(own)s)
        ORDER BY 1
        """
    )


def index_advice(conn: psycopg.Connection[tuple[object, ...]], contract: Contract) -> list[str]:
    """What `leaseguard index-sql --dsn` prints: comment lines and statements.

    An existing index that already serves the guard is named instead of a new one; a
    partitioned table gets the per-partition recipe instead of a refused CONCURRENTLY.
    """
    if (reason := no_index_reason(contract)) is not None:
        return [reason]
    qualified = table_identifier(contract).as_string(conn)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT oid, relkind::text FROM pg_class WHERE oid = to_regclass(%s)", (qualified,)
        )
        row = cur.fetchone()
        if row is None:
            raise SchemaMismatch(f"table {contract.table_label} does not exist (or is not visible)")
        relation, relkind = row
        cur.execute(
            serving_indexes_query(),
            {"relation": relation, "column": lead_column(contract), "own": index_name(contract)},
        )
        serving = [str(name) for (name,) in cur.fetchall()]
        cur.execute(
            "SELECT n.nspname::text, c.relname::text FROM pg_partition_tree(%s) t "
            "JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE t.isleaf ORDER BY 1, 2",
            (relation,),
        )
        partitions = [(str(schema), str(name)) for schema, name in cur.fetchall()]
    if serving:
        return [
            f"-- leaseguard: existing index(es) already serve the guard's checks on "
            f"{lead_column(contract)}: {', '.join(serving)}; nothing to create"
        ]
    if relkind == "p":
        return [
            "-- leaseguard: partitioned table; CREATE INDEX CONCURRENTLY is refused on the parent, "
            "so: an index ON ONLY the parent, one per partition built concurrently, then ATTACH "
            "(run each statement alone, not in a transaction)",
            *partitioned_index_sql(contract, partitions),
        ]
    return [
        INDEX_COMMENT,
        recommended_index_sql(contract),
    ]
