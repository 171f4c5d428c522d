"""The lease predicate, written once, built with psycopg.sql.

Identifiers always go through `sql.Identifier`; every value (statuses, the lease, the
orphan cut-off, the clock) is a bound parameter. Time arithmetic happens in the database
clock: claimed_at was written by the database, so comparing it with the guard's own clock
would add the controller's skew to every judgment.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from leaseguard.core.contract import Contract
from leaseguard.core.presets import (
    LOCKED_AT_RULE,
    OWNER_COLUMN,
    OWNER_HEARTBEAT_COLUMN,
    OWNER_HEARTBEAT_RULE,
    OWNERS_TABLE,
    ROW_EXPIRY_RULE,
)


def table_identifier(contract: Contract) -> sql.Identifier:
    if contract.schema:
        return sql.Identifier(contract.schema, contract.table)
    return sql.Identifier(contract.table)


# The database clock, or the instant a test pins.
_NOW = sql.SQL("coalesce(%(as_of)s::timestamptz, now())")


def _judged_rows(contract: Contract) -> sql.Composed:
    """Every claimed or queued row, classed queued / orphaned / stale / live: the predicate.

    A claimed row whose claimed_at (or expiry) is NULL cannot be proven dead, so it falls
    through to live: the guard errs on the side of the work. One plain subquery, no CTEs:
    planning is most of this query's cost once the partial index makes the scan cheap.
    Naive timestamps are read in the contract's timestamp_zone: the guard transaction sets
    TimeZone to it (leaseguard.adapters.db.guard_transaction), so `::timestamptz` means that zone.
    """
    claimed_at = sql.Identifier(contract.claimed_at_column)
    expires = expiry(contract)
    claimed, queued = claim_conditions(contract)
    return sql.SQL(
        """
        SELECT {id}::text AS id,
               {claimed_at}::timestamptz AS claimed_at,
               {expires} AS lease_expires_at,
               CASE
                   WHEN {queued} THEN 'queued'
                   WHEN {claimed_at} < %(orphan_cutoff)s::timestamptz THEN 'orphaned'
                   WHEN {expires} <= {now} THEN 'stale'
                   ELSE 'live'
               END AS class
        FROM {table}
        WHERE {claimed} OR {queued}
        """
    ).format(
        id=sql.Identifier(contract.id_column),
        claimed=claimed,
        queued=queued,
        claimed_at=claimed_at,
        expires=expires,
        now=_NOW,
        table=table_identifier(contract),
    )


def expiry(contract: Contract) -> sql.Composable:
    """When a claimed row's lease ends, as a timestamptz expression (NULL: unknown, live)."""
    claimed_at = sql.Identifier(contract.claimed_at_column)
    if contract.lease.expires_at_column:
        return sql.SQL("{}::timestamptz").format(sql.Identifier(contract.lease.expires_at_column))
    if contract.claim_rule == ROW_EXPIRY_RULE:
        # pg-boss (src/plans.ts failJobsByTimeout, failJobsByHeartbeat): whichever comes
        # first of the row's own expiry and, when it has a heartbeat, its heartbeat's.
        # least() skips NULLs, so a job without a heartbeat is judged by its expiry alone.
        return sql.SQL(
            "least({started}::timestamptz + {expire} * interval '1 second', "
            "{beat}::timestamptz + {beat_s} * interval '1 second')"
        ).format(
            started=claimed_at,
            expire=sql.Identifier("expire_seconds"),
            beat=sql.Identifier("heartbeat_on"),
            beat_s=sql.Identifier("heartbeat_seconds"),
        )
    if contract.claim_rule == OWNER_HEARTBEAT_RULE:
        return _owner_heartbeat_expiry(contract)
    return sql.SQL("{}::timestamptz + %(lease)s::interval").format(claimed_at)


def owners_table(contract: Contract) -> sql.Identifier:
    """Solid Queue's processes table, in the claims table's schema."""
    if contract.schema:
        return sql.Identifier(contract.schema, OWNERS_TABLE)
    return sql.Identifier(OWNERS_TABLE)


def _owner_heartbeat_expiry(contract: Contract) -> sql.Composable:
    """Solid Queue: the owner's last heartbeat + the alive threshold (the lease).

    A claim whose owner row is gone (or never named) is one Solid Queue itself fails
    (ClaimedExecution.orphaned): its lease ended at -infinity, so it is stale. The owners'
    table lives beside the claims table, in the same schema.
    """
    return sql.SQL(
        "coalesce((SELECT o.{beat}::timestamptz FROM {owners} AS o WHERE o.id = {owner}), "
        "'-infinity'::timestamptz) + %(lease)s::interval"
    ).format(
        beat=sql.Identifier(OWNER_HEARTBEAT_COLUMN),
        owners=owners_table(contract),
        owner=sql.SQL("{}.{}").format(table_identifier(contract), sql.Identifier(OWNER_COLUMN)),
    )


def claim_conditions(contract: Contract) -> tuple[sql.Composable, sql.Composable]:
    """(row is claimed, row is queued) as SQL conditions, by the contract's claim rule.

    The status rule compares the column natively: the statuses are bound as an array of
    unknown type, which PostgreSQL types as the column's own (text, varchar or an enum), so
    the queue's own indexes on the status column serve the guard; a `::text` cast on the
    column would hide them from the planner.
    """
    if contract.claim_rule == LOCKED_AT_RULE:
        # graphile-worker (sql/000011.sql, is_available): unlocked with attempts left is
        # queued; unlocked with none left is finished (exhausted), read by neither.
        return (
            sql.SQL("{} IS NOT NULL").format(sql.Identifier(contract.claimed_at_column)),
            sql.SQL("({} IS NULL AND {} < {})").format(
                sql.Identifier(contract.claimed_at_column),
                sql.Identifier("attempts"),
                sql.Identifier("max_attempts"),
            ),
        )
    if contract.claim_rule == OWNER_HEARTBEAT_RULE:
        # Solid Queue: every row of the claims table is a claim (it is deleted when the job
        # ends); queued jobs are rows of another table, not read.
        return sql.SQL("true"), sql.SQL("false")
    status = sql.Identifier(contract.status_column)
    return (
        sql.SQL("{} = ANY(%(claimed)s)").format(status),
        sql.SQL("{} = ANY(%(queued)s)").format(status),
    )


def counts_query(contract: Contract) -> sql.Composed:
    """Rows per class and the clock used (no rows at all: no candidates)."""
    return sql.SQL(
        """
        SELECT {now} AS checked_at, j.class, count(*) AS n
        FROM ({judged}) AS j
        GROUP BY j.class
        """
    ).format(now=_NOW, judged=_judged_rows(contract))


def live_claims_query(contract: Contract) -> sql.Composed:
    """The live rows, longest remaining lease first (NULL expiry first: unbounded)."""
    return sql.SQL(
        """
        SELECT j.id, j.claimed_at, j.lease_expires_at,
               extract(epoch FROM j.lease_expires_at - {now})::float8 AS remaining_s
        FROM ({judged}) AS j
        WHERE j.class = 'live'
        ORDER BY j.lease_expires_at DESC NULLS FIRST, j.id
        LIMIT %(live_limit)s
        """
    ).format(now=_NOW, judged=_judged_rows(contract))


def predicate_params(
    contract: Contract,
    *,
    lease_s: float | None,
    runtime_started_at: datetime | None,
    as_of: datetime | None = None,
    tolerance_s: float | None = None,
    live_limit: int = 100,
) -> dict[str, Any]:
    """Bind values for both queries; the orphan cut-off is computed here, once.

    `tolerance_s` defaults to the contract's clock_skew_s; callers that measured the
    host-vs-database offset pass a wider one.
    """
    cutoff = None
    if runtime_started_at is not None:
        tolerance = contract.clock_skew_s if tolerance_s is None else tolerance_s
        cutoff = runtime_started_at - timedelta(seconds=tolerance)
    return {
        "as_of": as_of,
        "claimed": list(contract.claimed_statuses),
        "queued": list(contract.queued_statuses),
        "lease": timedelta(seconds=lease_s) if lease_s is not None else None,
        "orphan_cutoff": cutoff,
        "live_limit": live_limit,
    }


def columns_query() -> sql.SQL:
    """The columns of a relation and their types, for the pre-flight schema check."""
    return sql.SQL(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        WHERE a.attrelid = %(relation)s AND a.attnum > 0 AND NOT a.attisdropped
        """
    )


def rls_query() -> sql.SQL:
    """Whether row-level security can hide rows of a relation from the current role.

    (RLS enabled, forced on the owner, role is (a member of) the owner, role bypasses RLS).
    A permissive policy `FOR SELECT ... USING (true)` that applies to the role (polroles {0}
    is PUBLIC), with no restrictive policy beside it, counts as bypassing: it shows every row.
    """
    return sql.SQL(
        """
        SELECT c.relrowsecurity, c.relforcerowsecurity,
               pg_has_role(current_user, c.relowner, 'USAGE'),
               r.rolsuper OR r.rolbypassrls OR EXISTS (
                   SELECT 1 FROM pg_policy p
                   WHERE p.polrelid = c.oid AND p.polpermissive
                     AND p.polcmd IN ('r', '*')
                     AND pg_get_expr(p.polqual, p.polrelid) = 'true'
                     AND (p.polroles = '{0}'::oid[]
                          OR EXISTS (SELECT 1 FROM unnest(p.polroles) AS pr(oid)
                                     WHERE pg_has_role(current_user, pr.oid, 'USAGE')))
               ) AND NOT EXISTS (
                   SELECT 1 FROM pg_policy p
                   WHERE p.polrelid = c.oid AND NOT p.polpermissive
               )
        FROM pg_class c, pg_roles r
        WHERE c.oid = %(relation)s AND r.rolname = current_user
        """
    )


# --- every status classified ----------------------------------------------------------------
#
# The predicate reads only claimed and queued rows, so a status the contract does not name
# (a typo, 'Running', a new state the system grew) would silently drop out of the judgment.
# These queries find the statuses present in the table that are in none of the contract's
# lists, without reading the table: the catalog says which index can answer, and a "loose
# index scan" over that index visits each distinct status once (O(distinct x log n)).


def status_column_query() -> sql.SQL:
    """The status column's facts: enum labels, NOT NULL, an index that can walk it, its type.

    The usable index is a valid, non-partial btree whose first key is the column itself
    ('column') or the expression `status::text` ('text'), with the default operator class
    and the comparison's collation: only such an index serves `ORDER BY key LIMIT 1` and
    `key > value`. An index leading with the plain column is preferred (it also orders
    enums and numbers natively).
    """
    return sql.SQL(
        """
        SELECT t.typtype = 'e' AS is_enum,
               ARRAY(SELECT e.enumlabel::text FROM pg_enum e
                     WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) AS labels,
               a.attnotnull,
               (SELECT CASE WHEN i.indkey[0] = a.attnum THEN 'column' ELSE 'text' END
                FROM pg_index i
                JOIN pg_class ic ON ic.oid = i.indexrelid
                JOIN pg_am am ON am.oid = ic.relam
                JOIN pg_opclass oc ON oc.oid = i.indclass[0]
                WHERE i.indrelid = c.oid AND am.amname = 'btree' AND oc.opcdefault
                  AND i.indisvalid AND i.indisready AND i.indpred IS NULL
                  AND ((i.indkey[0] = a.attnum AND i.indcollation[0] = a.attcollation)
                       OR (i.indkey[0] = 0
                           AND pg_get_indexdef(i.indexrelid, 1, false)
                               = format('(%%I)::text', a.attname)
                           AND i.indcollation[0] = CASE a.attcollation WHEN 0
                               THEN 'pg_catalog.default'::regcollation ELSE a.attcollation END))
                ORDER BY i.indkey[0] = a.attnum DESC
                LIMIT 1) AS index_key,
               t.oid AS type_oid
        FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = %(column)s
                           AND NOT a.attisdropped
        JOIN pg_type t ON t.oid = a.atttypid
        WHERE c.oid = %(relation)s
        """
    )


def status_key(contract: Contract, index_key: str | None) -> sql.Composable:
    """The status as the walking index keys it: the column, or its ::text."""
    status = sql.Identifier(contract.status_column)
    if index_key == "column":
        return status
    return sql.SQL("{}::text").format(status)


def unclassified_walk_query(contract: Contract, index_key: str) -> sql.Composed:
    """The statuses (as text; NULL for NULL) in none of the lists, found through the index.

    A recursive loose index scan: each step asks the index for the next status greater
    than the last one (an index probe, not a scan), and it stops after %(max_named)s + 1
    unclassified statuses, so its cost is bounded by the classified statuses plus that
    cap, whatever the table's size.
    """
    key = status_key(contract, index_key)
    return sql.SQL(
        """
        WITH RECURSIVE walk(v, unknown) AS (
            (SELECT {key}, 0 FROM {table} WHERE {key} IS NOT NULL ORDER BY {key} LIMIT 1)
            UNION ALL
            SELECT (SELECT {key} FROM {table} WHERE {key} > w.v ORDER BY {key} LIMIT 1),
                   w.unknown + (w.v::text <> ALL(%(classified)s::text[]))::int
            FROM walk AS w
            WHERE w.v IS NOT NULL
              AND w.unknown + (w.v::text <> ALL(%(classified)s::text[]))::int
                  <= %(max_named)s
        )
        SELECT w.v::text FROM walk AS w
        WHERE w.v IS NOT NULL AND w.v::text <> ALL(%(classified)s::text[])
        UNION ALL
        SELECT NULL WHERE NOT %(not_null)s AND EXISTS (SELECT FROM {table} WHERE {key} IS NULL)
        """
    ).format(key=key, table=table_identifier(contract))


def status_rows_query(
    contract: Contract, index_key: str, statuses: list[str | None]
) -> sql.Composed:
    """Rows holding each given status, counted up to %(count_cap)s: (position, rows).

    One branch per status, each with the status as its own bound value, so the planner
    picks per status: the index for a rare one, a short scan for a common one (a generic
    plan could scan the whole table looking for a rare one).
    """
    key = status_key(contract, index_key)
    branches = [
        sql.SQL(
            "SELECT {i}, count(*) FROM (SELECT FROM {table} WHERE {match} LIMIT %(count_cap)s) AS r"
        ).format(
            i=sql.Literal(i),
            table=table_identifier(contract),
            match=sql.SQL("{} IS NULL").format(key)
            if status is None
            else sql.SQL("{} = {}").format(key, sql.Placeholder(f"s{i}")),
        )
        for i, status in enumerate(statuses)
    ]
    return sql.SQL(" UNION ALL ").join(branches)


def unlisted_labels_query() -> sql.SQL:
    """Whether an enum type has a label in none of the lists (read now, not cached: a label
    added since the connection's pre-flight could already be on a row)."""
    return sql.SQL(
        "SELECT EXISTS (SELECT FROM pg_enum WHERE enumtypid = %(type_oid)s "
        "AND enumlabel <> ALL(%(classified)s::text[]))"
    )


def unclassified_scan_query(contract: Contract) -> sql.Composed:
    """The same answer without a usable index, with exact counts: one pass over the table.

    The column is compared natively, like the guard query's: %(classified)s must hold only
    values of its type (for an enum, its labels; statuses.py drops the others, which no
    row can hold anyway).
    """
    status = sql.Identifier(contract.status_column)
    return sql.SQL(
        """
        SELECT {status}::text, count(*)
        FROM {table}
        WHERE {status} IS NULL OR {status} <> ALL(%(classified)s)
        GROUP BY 1
        ORDER BY 2 DESC, 1
        LIMIT %(max_named)s + 1
        """
    ).format(status=status, table=table_identifier(contract))
