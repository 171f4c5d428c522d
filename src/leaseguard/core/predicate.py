"""The lease predicate, written once, built with psycopg.sql.

Identifiers always go through `sql.Identifier`; every value (statuses, the lease, the
orphan cut-off, the clock) is a bound parameter. Time arithmetic happens in the database
clock: claimed_at was written by the database, so comparing it with the guard's own clock
would add the controller's skew to every judgment.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from leaseguard.core.contract import Contract
from leaseguard.core.kind_leases import kind_expiry, kind_params
from leaseguard.core.lock_rules import (
    held_condition,
    lock_conditions,
    own_column,
    owners_table,
)
from leaseguard.core.lock_rules import table_identifier as table_identifier
from leaseguard.core.presets import (
    ADVISORY_LOCK_RULE,
    LOCKED_AT_RULE,
    OWNER_HEARTBEAT_RULE,
    OWNERS,
    PROCESS_LOCK_RULE,
    ROW_EXPIRY_RULE,
    VISIBILITY_RULE,
    WORKER_HEARTBEAT_RULE,
    Owners,
)

# The database clock, or the instant a test pins.
_NOW = sql.SQL("coalesce(%(as_of)s::timestamptz, now())")

# Whom the rows are judged for: one row per subject (a host by its own facts, or a fleet by
# the fleet rule), its lease and orphan cut-off bound as arrays; named apart from any job
# table's columns.
_SUBJECTS = sql.SQL(
    "unnest(%(subject_leases)s::interval[], %(subject_cutoffs)s::timestamptz[]) "
    "WITH ORDINALITY AS lg_subject(lg_lease, lg_orphan_cutoff, lg_n)"
)
# The subject's lease and orphan cut-off, as the judged rows read them.
LEASE = sql.SQL("lg_subject.lg_lease")
_CUTOFF = sql.SQL("lg_subject.lg_orphan_cutoff")


def _judged_rows(contract: Contract) -> sql.Composed:
    """Every claimed or queued row, classed queued / orphaned / stale / live for each
    subject (the table read once): the predicate.

    A claimed row whose claimed_at (or expiry) is NULL cannot be proven dead, so it falls
    through to live: the guard errs on the side of the work. A row whose lock a live
    session holds right now (Que, good_job) is live before any time test: a session that
    died has released it. Naive timestamps are read in the contract's timestamp_zone (the
    guard transaction sets TimeZone to it).
    """
    claimed_at = _claimed_at(contract)
    expires = expiry(contract)
    _, queued = claim_conditions(contract)
    return sql.SQL(
        """
        SELECT lg_subject.lg_n,
               {id}::text AS id,
               {claimed_at} AS claimed_at,
               {expires} AS lease_expires_at,
               {expiry_null} AS expiry_null,
               CASE
                   WHEN {queued} THEN 'queued'
                   WHEN {held} THEN 'live'
                   WHEN {claimed_at} < {cutoff} THEN 'orphaned'
                   WHEN {expires} <= {now} THEN 'stale'
                   ELSE 'live'
               END AS class
        FROM {table} CROSS JOIN {subjects}
        WHERE {judged}
        """
    ).format(
        id=sql.Identifier(contract.id_column),
        judged=judged_condition(contract),
        queued=queued,
        held=held_condition(contract),
        claimed_at=claimed_at,
        expires=expires,
        expiry_null=_expiry_null(contract),
        now=_NOW,
        table=table_identifier(contract),
        cutoff=_CUTOFF,
        subjects=_SUBJECTS,
    )


def _expiry_null(contract: Contract) -> sql.Composable:
    """Whether the row's own expiry column is NULL (then judged by the lease: reported)."""
    if not contract.lease.expires_at_column:
        return sql.SQL("false")
    return sql.SQL("{} IS NULL").format(sql.Identifier(contract.lease.expires_at_column))


def _claimed_at(contract: Contract) -> sql.Composable:
    """When the row was claimed, as a timestamptz (Que's lock records no time: NULL)."""
    if not contract.has_claimed_at:
        return sql.SQL("NULL::timestamptz")
    return sql.SQL("{}::timestamptz").format(sql.Identifier(contract.claimed_at_column))


def expiry(contract: Contract) -> sql.Composable:
    """When a claimed row's lease ends, as a timestamptz expression (NULL: unknown, live).

    An expiry column's NULL means "no lease known": the row is judged by the task-timeout
    lease from its claim (claimed_at + lease), never taken as expired nor as unbounded.
    'infinity' never expires (live; `live_claims_query` reports it so), '-infinity' has.
    """
    claimed_at = sql.Identifier(contract.claimed_at_column)
    if contract.lease.expires_at_column:
        return sql.SQL("coalesce({}::timestamptz, {}::timestamptz + {})").format(
            sql.Identifier(contract.lease.expires_at_column), claimed_at, LEASE
        )
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
    if contract.claim_rule in (OWNER_HEARTBEAT_RULE, WORKER_HEARTBEAT_RULE):
        return _owner_heartbeat_expiry(contract, OWNERS[contract.claim_rule])
    if contract.claim_rule == ADVISORY_LOCK_RULE:
        # Que: no time lease at all; the lock is held until the work ends or the session
        # dies. Unknown (NULL): the wait is bounded by the lease (guard._wait_upper_bound).
        return sql.SQL("NULL::timestamptz")
    if contract.claim_rule == PROCESS_LOCK_RULE:
        return sql.SQL("CASE WHEN {held} THEN NULL ELSE {beat} END").format(
            held=held_condition(contract),
            beat=_owner_heartbeat_expiry(contract, OWNERS[PROCESS_LOCK_RULE]),
        )
    if contract.kind_timeouts:
        return kind_expiry(contract, LEASE)
    return sql.SQL("{}::timestamptz + {}").format(claimed_at, LEASE)


def _owner_heartbeat_expiry(contract: Contract, owners: Owners) -> sql.Composable:
    """The owner's last heartbeat + the alive threshold (the lease).

    A claim whose owner row is gone (or never named) is one the system itself fails or
    unlocks (Solid Queue's ClaimedExecution.orphaned, good_job's Process.cleanup): its lease
    ended at -infinity, so it is stale. So is one whose owner is judged by its advisory lock
    (good_job's lock_type) when the lock is not held: its heartbeat does not count then. The
    owners' table lives beside the claims table, in the same schema.
    """
    beat: sql.Composable = sql.SQL("o.{}::timestamptz").format(
        sql.Identifier(owners.heartbeat_column)
    )
    if owners.lock_type_column:
        beat = sql.SQL("CASE WHEN o.{} IS NULL THEN {} END").format(
            sql.Identifier(owners.lock_type_column), beat
        )
    return sql.SQL(
        "coalesce((SELECT {beat} FROM {owners} AS o WHERE o.id = {owner}), "
        "'-infinity'::timestamptz) + {lease}"
    ).format(
        lease=LEASE,
        beat=beat,
        owners=owners_table(contract, owners),
        owner=own_column(contract, owners.column),
    )


def judged_condition(contract: Contract) -> sql.Composable:
    """The rows the predicate reads: claimed or queued.

    With a status column, one IN over both lists together, the same rows as two ORed: the
    planner then makes one scan of the status index, not a BitmapOr of two.
    """
    if contract.has_status_column:
        return _status_in(contract, *_status_lists(contract))
    claimed, queued = claim_conditions(contract)
    return sql.SQL("{} OR {}").format(claimed, queued)


def claim_conditions(contract: Contract) -> tuple[sql.Composable, sql.Composable]:
    """(row is claimed, row is queued) as SQL conditions, by the contract's claim rule.

    The status rule compares the column natively: each status is bound as a parameter of
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
    if contract.claim_rule in (ADVISORY_LOCK_RULE, PROCESS_LOCK_RULE):
        return lock_conditions(contract)
    if contract.claim_rule == VISIBILITY_RULE:
        # pgmq: read() counts every read in read_ct; a message never read is queued (a
        # delayed send's vt lies ahead too, but nobody holds it).
        read_ct = sql.Identifier("read_ct")
        return sql.SQL("{} > 0").format(read_ct), sql.SQL("{} = 0").format(read_ct)
    claimed, queued = _status_lists(contract)
    return _status_in(contract, claimed), _status_in(contract, queued)


def _status_lists(contract: Contract) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The status lists the predicate reads, each with the stem of its parameters' names."""
    return (("claimed", contract.claimed_statuses), ("queued", contract.queued_statuses))


def _status_in(contract: Contract, *lists: tuple[str, tuple[str, ...]]) -> sql.Composable:
    """`status IN (%(claimed_0)s, ...)`: whether the status is one of these lists' (false
    for none). One bound parameter per status."""
    names = [_status_param(stem, i) for stem, statuses in lists for i in range(len(statuses))]
    if not names:
        return sql.SQL("false")
    return sql.SQL("{} IN ({})").format(
        sql.Identifier(contract.status_column),
        sql.SQL(", ").join(sql.Placeholder(name) for name in names),
    )


def _status_param(stem: str, index: int) -> str:
    return f"{stem}_{index}"


def counts_query(contract: Contract) -> sql.Composed:
    """Per subject, in the order bound: the clock, whether the server is a standby (asked
    on every poll: a server can be demoted under a long drain), the subject's number and its
    rows per class (`Counts`' fields); one row per subject even when nothing is judged.

    OFFSET 0 keeps the judged rows a subquery, so each row's class (with Que's and
    good_job's lock tests) is computed once, not once per FILTER.
    """
    return sql.SQL(
        """
        SELECT {now} AS checked_at,
               pg_catalog.pg_is_in_recovery() AS in_recovery,
               lg_subject.lg_n AS subject,
               count(j.class) FILTER (WHERE j.class = 'live') AS live,
               count(j.class) FILTER (WHERE j.class = 'stale') AS stale,
               count(j.class) FILTER (WHERE j.class = 'orphaned') AS orphaned,
               count(j.class) FILTER (WHERE j.class = 'queued') AS queued
        FROM {subjects}
        LEFT JOIN ({judged} OFFSET 0) AS j ON j.lg_n = lg_subject.lg_n
        GROUP BY lg_subject.lg_n
        ORDER BY lg_subject.lg_n
        """
    ).format(now=_NOW, judged=_judged_rows(contract), subjects=_SUBJECTS)


def live_claims_query(contract: Contract) -> sql.Composed:
    """Each subject's live rows, longest remaining lease first (NULL expiry first:
    unbounded), at most `live_limit` per subject.

    An infinite time is no Python datetime and no interval: 'infinity' - now() is SQLSTATE
    22008. Such a time is listed as NULL, and `never_expires` says which rows it concerns.
    """
    return sql.SQL(
        """
        SELECT j.lg_n,
               j.id,
               CASE WHEN isfinite(j.claimed_at) THEN j.claimed_at END,
               CASE WHEN isfinite(j.lease_expires_at) THEN j.lease_expires_at END,
               CASE WHEN isfinite(j.lease_expires_at)
                    THEN extract(epoch FROM j.lease_expires_at - {now})::float8 END
                   AS remaining_s,
               j.lease_expires_at = 'infinity' AS never_expires,
               j.expiry_null
        FROM (SELECT l.*, row_number() OVER (PARTITION BY l.lg_n
                  ORDER BY l.lease_expires_at DESC NULLS FIRST, l.id) AS lg_rank
              FROM ({judged}) AS l
              WHERE l.class = 'live') AS j
        WHERE j.lg_rank <= %(live_limit)s
        ORDER BY j.lg_n, j.lg_rank
        """
    ).format(now=_NOW, judged=_judged_rows(contract))


def orphan_cutoff(
    contract: Contract, runtime_started_at: datetime | None, tolerance_s: float | None = None
) -> datetime | None:
    """Claims before this are orphans (None: the start is unknown, so none is); the
    tolerance is clock_skew_s unless a measured clock offset gives its own."""
    if runtime_started_at is None:
        return None
    tolerance = contract.clock_skew_s if tolerance_s is None else tolerance_s
    return runtime_started_at - timedelta(seconds=tolerance)


def predicate_params(
    contract: Contract,
    *,
    lease_s: float | None,
    runtime_started_at: datetime | None,
    as_of: datetime | None = None,
    tolerance_s: float | None = None,
    live_limit: int = 100,
) -> dict[str, Any]:
    """Bind values for both queries, for one subject."""
    cutoff = orphan_cutoff(contract, runtime_started_at, tolerance_s)
    return subjects_params(contract, [(lease_s, cutoff)], as_of=as_of, live_limit=live_limit)


def subjects_params(
    contract: Contract,
    subjects: Sequence[tuple[float | None, datetime | None]],
    *,
    as_of: datetime | None = None,
    live_limit: int = 100,
) -> dict[str, Any]:
    """Bind values for both queries: each subject's (lease seconds, orphan cut-off), in the
    order its rows come back (`subject` 1, 2, ...)."""
    return {
        "as_of": as_of,
        **{
            _status_param(stem, i): status
            for stem, statuses in _status_lists(contract)
            for i, status in enumerate(statuses)
        },
        "subject_leases": [
            timedelta(seconds=lease_s) if lease_s is not None else None for lease_s, _ in subjects
        ],
        "subject_cutoffs": [cutoff for _, cutoff in subjects],
        "live_limit": live_limit,
        **kind_params(contract),
    }
