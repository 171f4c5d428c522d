"""Claims proven by a lock that a live session holds right now (Que, good_job), and the
names the predicate and these rules share (the judged table, the owners' table)."""

from __future__ import annotations

from psycopg import sql

from leaseguard.core.contract import Contract
from leaseguard.core.presets import ADVISORY_LOCK_RULE, OWNERS, PROCESS_LOCK_RULE, Owners


def table_identifier(contract: Contract) -> sql.Identifier:
    if contract.schema:
        return sql.Identifier(contract.schema, contract.table)
    return sql.Identifier(contract.table)


def owners_table(contract: Contract, owners: Owners) -> sql.Identifier:
    """The owners' table (Solid Queue's, good_job's processes), in the claims table's schema."""
    if contract.schema:
        return sql.Identifier(contract.schema, owners.table)
    return sql.Identifier(owners.table)


def own_column(contract: Contract, column: str) -> sql.Composable:
    """A column of the judged table, qualified: it is read inside subqueries over others."""
    return sql.SQL("{}.{}").format(table_identifier(contract), sql.Identifier(column))


# The keys of the one-bigint advisory locks (pg_try_advisory_lock(bigint): objsubid 1, the
# key's high half in classid, its low half in objid) that other sessions of this database
# hold right now. pg_locks is no MVCC snapshot: it says who holds what at this instant, and
# a session that died has released everything. The guard's own session is left out (it
# takes no advisory locks, but a caller sharing its connection could), and so are waiters.
_HELD_KEYS = sql.SQL(
    "ARRAY(SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_catalog.pg_locks AS l "
    "WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted "
    "AND l.pid IS DISTINCT FROM pg_backend_pid() "
    "AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d "
    "WHERE d.datname = current_database()))"
)


def _good_job_key(table: str, id_column: sql.Composable) -> sql.Composable:
    """good_job's advisory lock key of a row (AdvisoryLockable#advisory_lock_bigint_sql with
    its default md5 hash): the first 64 bits of md5('<table>-<id>')."""
    return sql.SQL("('x' || substr(md5({} || '-' || {}::text), 1, 16))::bit(64)::bigint").format(
        sql.Literal(table), id_column
    )


def held_condition(contract: Contract) -> sql.Composable:
    """Whether a live session holds the row's lock right now (`false` for time-lease rules).

    Que (lib/que/poller.rb) locks a job with pg_try_advisory_lock(id). good_job locks a job
    on md5('good_jobs-<id>') (its :advisory and :hybrid strategies), and an owner process
    registered with an advisory lock (lock_type set) on md5('good_job_processes-<id>'):
    such an owner is alive exactly while its lock is held (GoodJob::Process.active).
    """
    own_id = own_column(contract, contract.id_column)
    if contract.claim_rule == ADVISORY_LOCK_RULE:
        return sql.SQL("({} = ANY({}))").format(own_id, _HELD_KEYS)
    if contract.claim_rule == PROCESS_LOCK_RULE:
        owners = OWNERS[PROCESS_LOCK_RULE]
        return sql.SQL(
            "({job} = ANY({held}) OR EXISTS (SELECT FROM {owners} AS o WHERE o.id = {owner} "
            "AND o.{lock_type} IS NOT NULL AND {owner_key} = ANY({held})))"
        ).format(
            job=_good_job_key(contract.table, own_id),
            held=_HELD_KEYS,
            owners=owners_table(contract, owners),
            owner=own_column(contract, owners.column),
            lock_type=sql.Identifier(str(owners.lock_type_column)),
            owner_key=_good_job_key(owners.table, sql.SQL("o.id")),
        )
    return sql.SQL("false")


def lock_conditions(contract: Contract) -> tuple[sql.Composable, sql.Composable]:
    """Que and good_job: only a job that is not done can be worked (Que's poller and
    good_job's perform take no other), so both conditions start with "not done", which the
    planner factors out of the OR and answers from the queue's own partial index over
    unfinished jobs; the lock test then runs on the backlog only, not on the history.

    Que: claimed iff a session holds its lock; an unlocked job that is not done is queued
    (scheduled, or an errored one awaiting its retry: Que sets expired_at once retries are
    exhausted). good_job: claimed iff locked_by_id names a process or its lock is held.
    """
    held = held_condition(contract)
    if contract.claim_rule == ADVISORY_LOCK_RULE:
        not_done = sql.SQL("{} IS NULL AND {} IS NULL").format(
            sql.Identifier("finished_at"), sql.Identifier("expired_at")
        )
        return (
            sql.SQL("({} AND {})").format(not_done, held),
            sql.SQL("({} AND NOT {})").format(not_done, held),
        )
    owner = sql.Identifier(OWNERS[PROCESS_LOCK_RULE].column)
    not_done = sql.SQL("{} IS NULL").format(sql.Identifier("finished_at"))
    return (
        sql.SQL("({} AND ({} IS NOT NULL OR {}))").format(not_done, owner, held),
        sql.SQL("({} AND {} IS NULL AND NOT {})").format(not_done, owner, held),
    )
