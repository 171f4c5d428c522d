"""The lease predicate and the guard's other SQL: identifiers quoted, every value bound. Time
arithmetic is in the database clock, which wrote claimed_at (the guard's would add its skew)."""

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from leaseguard.core import presets
from leaseguard.core.contract import Contract

# The database clock, or the instant a test pins.
_NOW = sql.SQL("coalesce(%(as_of)s::timestamptz, now())")
# One row per subject (a host, or a fleet by the fleet rule) with its lease and orphan cut-off,
# bound as arrays; named apart from any job table's columns.
_SUBJECTS = sql.SQL(
    "unnest(%(subject_leases)s::interval[], %(subject_cutoffs)s::timestamptz[]) "
    "WITH ORDINALITY AS lg_subject(lg_lease, lg_orphan_cutoff, lg_n)"
)
LEASE = sql.SQL("lg_subject.lg_lease")
Subject = tuple[float | None, datetime | None]  # (lease seconds, orphan cut-off)
# The one-bigint advisory lock keys (objsubid 1) other sessions of this database hold right now
# (pg_locks is no MVCC snapshot: a session that died has released everything); no waiters.
_HELD_KEYS = sql.SQL(
    "ARRAY(SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_catalog.pg_locks AS l "
    "WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted "
    "AND l.pid IS DISTINCT FROM pg_backend_pid() AND l.database = "
    "(SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database()))"
)


def table_identifier(contract: Contract, table: str | None = None) -> sql.Identifier:
    return sql.Identifier(*filter(None, (contract.schema, table or contract.table)))


def own_column(contract: Contract, column: str) -> sql.Composable:
    """A column of the judged table, qualified: it is read inside subqueries over others."""
    return sql.SQL("{}.{}").format(table_identifier(contract), sql.Identifier(column))


def _judged_rows(contract: Contract) -> sql.Composed:
    """Every claimed or queued row, classed per subject. A NULL claimed_at (or expiry) cannot
    prove a claim dead: live. A row whose lock a live session holds is live before any time test."""
    claimed_at = (
        sql.SQL("{}::timestamptz").format(sql.Identifier(contract.claimed_at_column))
        if contract.has_claimed_at
        else sql.SQL("NULL::timestamptz")  # Que's lock records no time
    )
    col = contract.lease.expires_at_column
    expiry_null = sql.SQL("{} IS NULL").format(sql.Identifier(col)) if col else sql.SQL("false")
    claimed, queued = claim_conditions(contract)
    # With a status column one IN: one index scan, not a BitmapOr.
    judged: sql.Composable = sql.SQL("{} OR {}").format(claimed, queued)
    if contract.has_status_column:
        judged = _status_in(contract, "claimed", "queued")
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
                   WHEN {claimed_at} < lg_subject.lg_orphan_cutoff THEN 'orphaned'
                   WHEN {expires} <= {now} THEN 'stale'
                   ELSE 'live'
               END AS class
        FROM {table} CROSS JOIN {subjects}
        WHERE {judged}
        """
    ).format(
        id=sql.Identifier(contract.id_column),
        judged=judged,
        queued=queued,
        held=held_condition(contract),
        claimed_at=claimed_at,
        expires=expiry(contract),
        expiry_null=expiry_null,
        now=_NOW,
        table=table_identifier(contract),
        subjects=_SUBJECTS,
    )


def expiry(contract: Contract) -> sql.Composable:
    """When a claimed row's lease ends (NULL: unknown, live); NULL expiry: claimed_at + lease."""
    claimed_at = sql.Identifier(contract.claimed_at_column)
    rule = contract.claim_rule
    if contract.lease.expires_at_column:
        return sql.SQL("coalesce({}::timestamptz, {}::timestamptz + {})").format(
            sql.Identifier(contract.lease.expires_at_column), claimed_at, LEASE
        )
    if rule == presets.ROW_EXPIRY_RULE:
        # pg-boss (src/plans.ts failJobsByTimeout, failJobsByHeartbeat): whichever comes first
        # of its own expiry and its heartbeat's; least() skips NULLs (no heartbeat).
        return sql.SQL(
            "least({}::timestamptz + {} * interval '1 second', "
            "{}::timestamptz + {} * interval '1 second')"
        ).format(claimed_at, *map(sql.Identifier, presets.RULE_COLUMNS[rule]))
    if rule == presets.ADVISORY_LOCK_RULE:
        # Que: no time lease; the lock is held until the work ends or the session dies.
        return sql.SQL("NULL::timestamptz")
    if owners := presets.OWNERS.get(rule):
        # The owner's last heartbeat + the lease. An owner row gone (or unnamed), or holding a
        # lock_type but not its lock, is one the queue itself fails or unlocks: stale.
        beat = sql.SQL("o.{}::timestamptz").format(sql.Identifier(owners.heartbeat_column))
        if owners.lock_type_column:
            beat = sql.SQL("CASE WHEN o.{} IS NULL THEN {} END").format(
                sql.Identifier(owners.lock_type_column), beat
            )
        ends = sql.SQL(
            "coalesce((SELECT {beat} FROM {owners} AS o WHERE o.id = {owner}), "
            "'-infinity'::timestamptz) + {lease}"
        ).format(
            lease=LEASE,
            beat=beat,
            owners=table_identifier(contract, owners.table),
            owner=own_column(contract, owners.column),
        )
        if rule == presets.PROCESS_LOCK_RULE:  # good_job: no end while a session holds its lock
            ends = sql.SQL("CASE WHEN {} THEN NULL ELSE {} END").format(
                held_condition(contract), ends
            )
        return ends
    if contract.kind_timeouts:
        # River (internal/maintenance/job_rescuer.go): a job whose cancel was attempted ends at
        # the lease; else a kind whose Timeout() is -1 is never rescued, one with its own once
        # both it and RescueStuckJobsAfter (the lease) passed, others at the lease. The unnest's
        # columns are named apart from the table's, so `kind` is the job's own.
        kind, metadata = map(sql.Identifier, presets.KIND_COLUMNS[contract.preset or ""])
        return sql.SQL(
            "CASE WHEN jsonb_typeof({metadata} -> 'cancel_attempted_at') = 'string' "
            "THEN {claimed_at}::timestamptz + {lease} "
            "WHEN {kind} = ANY(%(unlimited_kinds)s::text[]) THEN NULL::timestamptz "
            "ELSE {claimed_at}::timestamptz + coalesce((SELECT greatest(k.kind_timeout, {lease}) "
            "FROM unnest(%(kinds)s::text[], %(kind_timeouts)s::interval[]) "
            "AS k(job_kind, kind_timeout) WHERE k.job_kind = {kind}), {lease}) END"
        ).format(kind=kind, metadata=metadata, claimed_at=claimed_at, lease=LEASE)
    return sql.SQL("{}::timestamptz + {}").format(claimed_at, LEASE)


def _good_job_key(table: str, id_column: sql.Composable) -> sql.Composable:
    """good_job's advisory lock key of a row: the first 64 bits of md5('<table>-<id>')."""
    return sql.SQL("('x' || substr(md5({} || '-' || {}::text), 1, 16))::bit(64)::bigint").format(
        sql.Literal(table), id_column
    )


def held_condition(contract: Contract) -> sql.Composable:
    """Whether a live session holds the row's lock now (`false` for time-lease rules): Que's
    id, good_job's md5 key, or that of an owner with a lock_type (alive while it holds it)."""
    own_id = own_column(contract, contract.id_column)
    if contract.claim_rule == presets.ADVISORY_LOCK_RULE:
        return sql.SQL("({} = ANY({}))").format(own_id, _HELD_KEYS)
    if contract.claim_rule != presets.PROCESS_LOCK_RULE:
        return sql.SQL("false")
    owners = presets.OWNERS[presets.PROCESS_LOCK_RULE]
    return sql.SQL(
        "({job} = ANY({held}) OR EXISTS (SELECT FROM {owners} AS o WHERE o.id = {owner} "
        "AND o.{lock_type} IS NOT NULL AND {owner_key} = ANY({held})))"
    ).format(
        job=_good_job_key(contract.table, own_id),
        held=_HELD_KEYS,
        owners=table_identifier(contract, owners.table),
        owner=own_column(contract, owners.column),
        lock_type=sql.Identifier(str(owners.lock_type_column)),
        owner_key=_good_job_key(owners.table, sql.SQL("o.id")),
    )


def claim_conditions(contract: Contract) -> tuple[sql.Composable, sql.Composable]:
    rule, claimed_at = contract.claim_rule, sql.Identifier(contract.claimed_at_column)
    if rule == presets.LOCKED_AT_RULE:
        # graphile-worker (sql/000011.sql, is_available): unlocked with attempts left is
        # queued; unlocked with none left is finished, read by neither.
        attempts, max_attempts = map(sql.Identifier, presets.RULE_COLUMNS[rule])
        queued = sql.SQL("({} IS NULL AND {} < {})").format(claimed_at, attempts, max_attempts)
        return sql.SQL("{} IS NOT NULL").format(claimed_at), queued
    if rule == presets.OWNER_HEARTBEAT_RULE:
        # Solid Queue: every row of the claims table is a claim (deleted when the job ends).
        return sql.SQL("true"), sql.SQL("false")
    if rule in (presets.ADVISORY_LOCK_RULE, presets.PROCESS_LOCK_RULE):
        # Both start with "not done", answered from the queue's partial index over unfinished
        # jobs: the lock test runs on the backlog only. Que: claimed iff its lock is held
        # (expired_at: retries exhausted). good_job: iff locked_by_id is set or its lock held.
        held = held_condition(contract)
        finished, other = map(sql.Identifier, presets.RULE_COLUMNS[rule])
        if rule == presets.ADVISORY_LOCK_RULE:
            not_done = sql.SQL("{} IS NULL AND {} IS NULL").format(finished, other)
        else:
            not_done = sql.SQL("{} IS NULL").format(finished)
            held = sql.SQL("({} IS NOT NULL OR {})").format(other, held)
        return (
            sql.SQL("({} AND {})").format(not_done, held),
            sql.SQL("({} AND NOT {})").format(not_done, held),
        )
    if rule == presets.VISIBILITY_RULE:
        # pgmq: read() counts every read in read_ct; a message never read is queued.
        read_ct = sql.Identifier("read_ct")
        return sql.SQL("{} > 0").format(read_ct), sql.SQL("{} = 0").format(read_ct)
    return _status_in(contract, "claimed"), _status_in(contract, "queued")


def _status_in(contract: Contract, *stems: str) -> sql.Composable:
    """`status IN (%(claimed_0)s, ...)` (false for none). Bound untyped, each status takes the
    column's own type: a `::text` cast would hide the queue's indexes from the planner."""
    statuses = {"claimed": contract.claimed_statuses, "queued": contract.queued_statuses}
    names = [f"{stem}_{i}" for stem in stems for i in range(len(statuses[stem]))]
    if not names:
        return sql.SQL("false")
    placeholders = sql.SQL(", ").join(map(sql.Placeholder, names))
    return sql.SQL("{} IN ({})").format(sql.Identifier(contract.status_column), placeholders)


def counts_query(contract: Contract) -> sql.Composed:
    """Per subject: the clock, whether a standby, its rows per class (OFFSET 0: each once)."""
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
    """Each subject's live rows, longest lease first (NULL first), at most `live_limit` each;
    an infinite time ('infinity' - now() is SQLSTATE 22008) is NULL, with `never_expires`."""
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


def _interval(seconds: float) -> timedelta:
    """At most ~1000 years: claimed_at + it stays a timestamp PostgreSQL and Python can hold."""
    return timedelta(seconds=min(seconds, 365_250 * 86_400))


def subjects_params(
    contract: Contract, subjects: Sequence[Subject], *, as_of: datetime | None = None
) -> dict[str, Any]:
    """Bind values for both queries: each subject's (lease seconds, orphan cut-off), in order."""
    params: dict[str, Any] = {
        "as_of": as_of,
        "subject_leases": [None if s is None else _interval(s) for s, _ in subjects],
        "subject_cutoffs": [cutoff for _, cutoff in subjects],
        "live_limit": 100,
    }
    for stem in ("claimed", "queued"):
        statuses = getattr(contract, f"{stem}_statuses")
        params |= {f"{stem}_{i}": status for i, status in enumerate(statuses)}
    if kinds := contract.kind_timeouts:
        timed = {kind: _interval(s) for kind, s in kinds.items() if s is not None}
        params["unlimited_kinds"] = [kind for kind, s in kinds.items() if s is None]
        params |= {"kinds": list(timed), "kind_timeouts": list(timed.values())}
    return params
