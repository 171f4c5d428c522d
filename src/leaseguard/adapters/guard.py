"""Evaluate the lease predicate against the protected system's database."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from leaseguard.adapters.db import guard_transaction
from leaseguard.adapters.relation import (
    check_relation,
    check_rows_visible,
    check_view_bases,
    naive_zone_refusal,
    standby_message,
)
from leaseguard.adapters.statuses import StatusColumn, check_statuses, read_status_column
from leaseguard.core.contract import Contract
from leaseguard.core.errors import ConfigError, NotPrimary, SchemaMismatch
from leaseguard.core.fleet import (
    ClockOffset,
    controller_offset,
    controller_warning,
    in_database_clock,
)
from leaseguard.core.predicate import (
    columns_query,
    counts_query,
    live_claims_query,
    orphan_cutoff,
    owners_table,
    subjects_params,
    table_identifier,
)
from leaseguard.core.presets import ADVISORY_LOCK_RULES, OWNERS, Owners
from leaseguard.core.verdict import Counts, LiveClaim, TaskTimeout, Verdict

# format_type() spells a precision when the column has one: ActiveRecord 7 and Ecto write
# timestamp(6). Any precision, with or without time zone, is a timestamp.
_TIME_TYPE = re.compile(r"timestamp(\(\d+\))? with(out)? time zone")
_NAIVE_TIME_TYPE = re.compile(r"timestamp(\(\d+\))? without time zone")

Connection = psycopg.Connection[tuple[object, ...]]
Cursor = psycopg.Cursor[tuple[object, ...]]


def lease_seconds(contract: Contract, task_timeout: TaskTimeout | None) -> float | None:
    """multiplier x task timeout; None when the rows carry their own expiry column."""
    if contract.rows_carry_expiry:
        return None
    if task_timeout is None:
        raise ConfigError("a task timeout is required to derive the lease")
    return contract.lease.multiplier * task_timeout.seconds


def evaluate(conn: Connection, contract: Contract, **judged: Any) -> Verdict:
    """`judge_table`'s verdict only."""
    return judge_table(conn, contract, **judged)[0]


@dataclass(frozen=True)
class Subject:
    """Whom a verdict is for (a host, or a fleet by the fleet rule) and its facts.

    `clock_offset` (host minus database) moves the runtime's start into the database clock;
    its uncertainty widens the orphan tolerance.
    """

    host: str | None
    task_timeout: TaskTimeout | None
    lease_s: float | None
    runtime_started_at: datetime | None
    clock_offset: ClockOffset | None = None
    warnings: tuple[str, ...] = ()

    def bound(self, contract: Contract) -> tuple[float | None, datetime | None]:
        """(lease seconds, orphan cut-off in the database clock), as the query binds them."""
        started, tolerance_s = self.runtime_started_at, None
        if self.clock_offset is not None:
            started = in_database_clock(started, self.clock_offset.offset_s)
            tolerance_s = self.clock_offset.tolerance_s(contract.clock_skew_s)
        return self.lease_s, orphan_cutoff(contract, started, tolerance_s)

    def clock_warnings(self, contract: Contract) -> tuple[str, ...]:
        offset = self.clock_offset
        if offset is None or not offset.exceeds(contract.clock_skew_s):
            return ()
        return (offset.warning(self.host or "-", contract.clock_skew_s),)


def judge_table(
    conn: Connection,
    contract: Contract,
    *,
    task_timeout: TaskTimeout | None,
    lease_s: float | None,
    runtime_started_at: datetime | None,
    host: str | None = None,
    as_of: datetime | None = None,
    clock_offset: ClockOffset | None = None,
    warnings: tuple[str, ...] = (),
    status_column: StatusColumn | None = None,
) -> tuple[Verdict, StatusColumn]:
    """`judge_subjects` for one subject built from these keywords."""
    subject = Subject(host, task_timeout, lease_s, runtime_started_at, clock_offset, warnings)
    verdicts, status_column = judge_subjects(
        conn, contract, [subject], as_of=as_of, status_column=status_column
    )
    return verdicts[0], status_column


def judge_subjects(
    conn: Connection,
    contract: Contract,
    subjects: Sequence[Subject],
    *,
    as_of: datetime | None = None,
    status_column: StatusColumn | None = None,
) -> tuple[list[Verdict], StatusColumn]:
    """Every subject's verdict from one snapshot (one transaction, the table read once per
    query whatever the number of subjects); also the status column's catalog facts.

    Every status in the table is checked against the contract's lists in the same snapshot.
    `status_column` (from an earlier check on this connection) skips the schema pre-flight;
    a table or column that vanished since still fails the query, and is then named. `as_of`
    replaces now() for tests that pin a boundary.
    """
    params = subjects_params(contract, [s.bound(contract) for s in subjects], as_of=as_of)
    sent_at = time.time()
    try:
        with guard_transaction(conn, contract) as cur:
            if status_column is None:
                status_column = verify_schema(conn, contract)
            # The counts first: they say whether the server is a standby, named before all.
            checked_at, counts = _read_counts(cur.execute(counts_query(contract), params))
            here: tuple[str, ...] = ()
            if as_of is None:  # now() ran between these two instants of this machine's clock
                here = controller_warning(
                    controller_offset(checked_at.timestamp(), sent_at, time.time())
                )
            check_statuses(cur, contract, status_column)
            # Only when something is live: the listing reads the queued rows again, and
            # a backlog can hold far more of them than there are workers.
            any_live = any(c.live for c in counts)
            live = _live_claims(cur, contract, params) if any_live else {}
    except SchemaMismatch:
        if status_column is None:
            raise
        # The pre-flight was skipped: let it name the table or column that vanished.
        with guard_transaction(conn, contract):
            verify_schema(conn, contract)
        raise
    verdicts = [
        _verdict(contract, subject, counts[n], live.get(n + 1, ()), checked_at, here)
        for n, subject in enumerate(subjects)
    ]
    return verdicts, status_column


def _verdict(
    contract: Contract,
    subject: Subject,
    counts: Counts,
    live: tuple[LiveClaim, ...],
    checked_at: datetime,
    controller: tuple[str, ...],
) -> Verdict:
    bound, bound_known = _wait_upper_bound(live, subject.lease_s, counts.live)
    warnings = (*subject.warnings, *subject.clock_warnings(contract), *controller)
    return Verdict(
        counts=counts,
        live=live,
        checked_at=checked_at,
        lease_s=subject.lease_s,
        task_timeout=subject.task_timeout,
        runtime_started_at=subject.runtime_started_at,
        wait_upper_bound_s=bound,
        table=contract.table_label,
        host=subject.host,
        clock_offset_s=subject.clock_offset.offset_s if subject.clock_offset else None,
        warnings=(*warnings, *expiry_warnings(contract, live, subject.lease_s)),
        wait_upper_bound_known=bound_known,
    )


def verify_schema(conn: Connection, contract: Contract) -> StatusColumn:
    """Fail with a message naming the server, relation or column before the predicate runs
    (in this order: a standby first, then what the relation is)."""
    table = table_identifier(contract).as_string(conn)
    relation = check_relation(conn, table, contract)
    check_rows_visible(conn, table, contract.table_label)
    if contract.relation_kind == "view":
        check_view_bases(conn, table, contract.table_label)
    owners = OWNERS.get(contract.claim_rule)
    if owners:
        _check_owners(conn, contract, owners, relation.database_zone)
    if contract.claim_rule in ADVISORY_LOCK_RULES:
        _check_locks(conn, contract)
    types = _column_types(conn.execute(columns_query(), {"relation": table}))
    for key, column in contract.columns().items():
        if column not in types:
            raise SchemaMismatch(
                f"column {column} ({key}) does not exist in table {contract.table_label}"
            )
    for key in ("claimed_at_column", "lease.expires_at_column"):
        time_column = contract.columns().get(key)
        if time_column and not _TIME_TYPE.fullmatch(types[time_column]):
            raise SchemaMismatch(
                f"column {time_column} ({key}) of table {contract.table_label} has type "
                f"{types[time_column]}, expected a timestamp"
            )
        if time_column and _naive_undeclared(contract, types[time_column]):
            raise SchemaMismatch(
                naive_zone_refusal(time_column, key, contract.table_label, relation.database_zone)
            )
    return read_status_column(conn, contract, table)


def _naive_undeclared(contract: Contract, column_type: str) -> bool:
    """A `timestamp without time zone` column, and no zone declared to read it in."""
    return contract.timestamp_zone is None and bool(_NAIVE_TIME_TYPE.fullmatch(column_type))


def _first(cur: Cursor) -> object:
    row = cur.fetchone()
    return None if row is None else row[0]


def _column_types(cur: Cursor) -> dict[str, str]:
    return {str(name): str(kind) for name, kind in cur.fetchall()}


def _check_owners(conn: Connection, contract: Contract, owners: Owners, database_zone: str) -> None:
    """Solid Queue, good_job: the owners' table is read too, so it must exist, have the
    columns that say an owner is alive, and show the guard every row: a hidden owner would
    make its live claim look owner-less, which the rule judges dead ("proceed" on live work).
    """
    table = owners_table(contract, owners).as_string(conn)
    label = f"{contract.schema}.{owners.table}" if contract.schema else owners.table
    if _first(conn.execute("SELECT to_regclass(%s)::oid", (table,))) is None:
        raise SchemaMismatch(
            f"table {label} (the owners of the claims in {contract.table_label}) does "
            "not exist (or is not visible)"
        )
    check_rows_visible(conn, table, label)
    types = _column_types(conn.execute(columns_query(), {"relation": table}))
    beat = owners.heartbeat_column
    missing = [c for c in ("id", owners.lock_type_column) if c and c not in types]
    if missing or not _TIME_TYPE.fullmatch(types.get(beat, "")):
        needed = ", ".join(c for c in ("id", owners.lock_type_column) if c)
        raise SchemaMismatch(
            f"table {label} lacks {needed} or a timestamp column {beat}, which decide "
            f"whether the owner of a claim in {contract.table_label} is alive"
        )
    if _naive_undeclared(contract, types[beat]):
        refusal = naive_zone_refusal(beat, "the owners' heartbeat", label, database_zone)
        raise SchemaMismatch(refusal)


def _check_locks(conn: Connection, contract: Contract) -> None:
    """Que, good_job: claims are advisory locks, which only pg_locks shows: name the grant."""
    readable = conn.execute(
        "SELECT has_table_privilege('pg_catalog.pg_locks', 'SELECT') "
        "AND has_function_privilege('pg_catalog.pg_lock_status()', 'EXECUTE')",
    )
    if not _first(readable):
        raise SchemaMismatch(
            f"the guard's role cannot read pg_catalog.pg_locks, where the claims of "
            f"{contract.table_label} are (advisory locks); GRANT SELECT ON "
            "pg_catalog.pg_locks TO <guard role> (and EXECUTE ON FUNCTION "
            "pg_catalog.pg_lock_status())"
        )


def _read_counts(cur: Cursor) -> tuple[datetime, list[Counts]]:
    """The counts query's rows (one per subject, in order), on `cur`."""
    rows = cur.fetchall()
    assert rows and cur.description is not None
    checked_at, in_recovery = rows[0][0], rows[0][1]
    assert isinstance(checked_at, datetime)
    if in_recovery:
        raise NotPrimary(standby_message("the guard's connection"))
    names = [column.name for column in cur.description[3:]]
    return checked_at, [
        Counts(**{name: int(str(n)) for name, n in zip(names, row[3:], strict=True)})
        for row in rows
    ]


def _live_claims(
    cur: Cursor, contract: Contract, params: dict[str, object]
) -> dict[int, tuple[LiveClaim, ...]]:
    """Each subject's live rows, by its number (1, 2, ...)."""
    cur.execute(live_claims_query(contract), params)
    listed: dict[int, list[LiveClaim]] = {}
    for n, row_id, claimed_at, expires, remaining, never, null in cur.fetchall():
        listed.setdefault(int(str(n)), []).append(
            LiveClaim(
                id=str(row_id),
                claimed_at=claimed_at,  # type: ignore[arg-type]
                lease_expires_at=expires,  # type: ignore[arg-type]
                remaining_s=None if remaining is None else float(remaining),  # type: ignore[arg-type]
                never_expires=bool(never),
                expiry_null=bool(null),
            )
        )
    return {n: tuple(claims) for n, claims in listed.items()}


def expiry_warnings(
    contract: Contract, live: tuple[LiveClaim, ...], lease_s: float | None
) -> tuple[str, ...]:
    """What the live rows' expiry values mean, named: NULL (no lease known) and infinity."""
    column = contract.lease.expires_at_column
    said = []
    if nulls := [c.id for c in live if c.expiry_null]:
        lease = f"claimed_at + {lease_s:g}s" if lease_s is not None else "unknown: no task timeout"
        said.append(
            f"table {contract.table_label}: {column} is NULL on live row(s) {_ids(nulls)}: no "
            f"lease known, so each is judged by the task-timeout lease ({lease})"
        )
    if never := [c.id for c in live if c.never_expires]:
        said.append(
            f"table {contract.table_label}: the lease of live row(s) {_ids(never)} never "
            "expires (expiry 'infinity'): the wait bound is unknown (never)"
        )
    return tuple(said)


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:10])
    return shown + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def _wait_upper_bound(
    live: tuple[LiveClaim, ...], lease_s: float | None, live_count: int = 0
) -> tuple[float, bool]:
    """The longest remaining lease, and whether it bounds every live row.

    A live row with no computable expiry (a held advisory lock: Que, good_job) is bounded
    by one full lease when one is known; so is a live count the listing no longer showed
    (pg_locks is read anew by each query). An 'infinity' lease bounds nothing.
    """
    known = [c.remaining_s for c in live if c.remaining_s is not None]
    unbounded = any(c.remaining_s is None and not c.never_expires for c in live)
    unbounded = unbounded or bool(live_count and not live)
    bound = max(known, default=0.0)
    if unbounded and lease_s is not None:
        bound = max(bound, lease_s)
    bound_known = not any(c.never_expires for c in live) and (lease_s is not None or not unbounded)
    return max(bound, 0.0), bound_known
