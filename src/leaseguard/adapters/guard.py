"""Evaluate the lease predicate against the protected system's database."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from leaseguard.adapters.catalog import StatusColumn, check_statuses, standby_message, verify_schema
from leaseguard.adapters.db import guard_transaction
from leaseguard.core.clock_offset import ClockOffset, controller_offset, controller_warning
from leaseguard.core.contract import Contract
from leaseguard.core.errors import ConfigError, NotPrimary, SchemaMismatch
from leaseguard.core.fleet import in_database_clock
from leaseguard.core.predicate import (
    counts_query,
    live_claims_query,
    orphan_cutoff,
    subjects_params,
)
from leaseguard.core.verdict import Counts, LiveClaim, TaskTimeout, Verdict

Connection = psycopg.Connection[tuple[object, ...]]


def lease_seconds(contract: Contract, task_timeout: TaskTimeout | None) -> float | None:
    """multiplier x task timeout; None when the rows carry their own expiry column."""
    if contract.rows_carry_expiry:
        return None
    if task_timeout is None:
        raise ConfigError("a task timeout is required to derive the lease")
    return contract.lease.multiplier * task_timeout.seconds


@dataclass(frozen=True)
class Subject:
    """Whom a verdict is for (a host, or a fleet by the fleet rule) and its facts; the clock
    offset (host minus database) moves the runtime's start into the database clock."""

    host: str | None
    task_timeout: TaskTimeout | None
    lease_s: float | None
    runtime_started_at: datetime | None
    clock_offset: ClockOffset | None = None
    warnings: tuple[str, ...] = ()

    def bound(self, contract: Contract) -> tuple[float | None, datetime | None]:
        """(lease seconds, orphan cut-off in the database clock), as the query binds them."""
        started, tolerance_s = self.runtime_started_at, None
        if self.clock_offset is not None:  # its uncertainty widens the orphan tolerance
            started = in_database_clock(started, self.clock_offset.offset_s)
            tolerance_s = self.clock_offset.tolerance_s(contract.clock_skew_s)
        return self.lease_s, orphan_cutoff(contract, started, tolerance_s)


def evaluate(conn: Connection, contract: Contract, **judged: Any) -> Verdict:
    """`judge_table`'s verdict only."""
    return judge_table(conn, contract, **judged)[0]


def judge_table(
    conn: Connection,
    contract: Contract,
    *,
    as_of: datetime | None = None,
    status_column: StatusColumn | None = None,
    **subject: Any,
) -> tuple[Verdict, StatusColumn]:
    """`judge_subjects` for one subject built from the other keywords (Subject's fields)."""
    subject.setdefault("host", None)
    verdicts, column = judge_subjects(
        conn, contract, [Subject(**subject)], as_of=as_of, status_column=status_column
    )
    return verdicts[0], column


def judge_subjects(
    conn: Connection,
    contract: Contract,
    subjects: Sequence[Subject],
    *,
    as_of: datetime | None = None,
    status_column: StatusColumn | None = None,
) -> tuple[list[Verdict], StatusColumn]:
    """Every subject's verdict from one snapshot (one transaction, each query run once for all
    subjects), every status classified in it; also the status column's catalog facts.

    `status_column` (from an earlier check on this connection) skips the schema pre-flight;
    a table or column that vanished since still fails, and is then named. `as_of` replaces
    now() for tests that pin a boundary.
    """
    params = subjects_params(contract, [s.bound(contract) for s in subjects], as_of=as_of)
    sent_at = time.time()
    try:
        with guard_transaction(conn, contract) as cur:
            if status_column is None:
                status_column = verify_schema(conn, contract)
            # The counts first: they say whether the server is a standby, named before all.
            rows = cur.execute(counts_query(contract), params).fetchall()
            assert rows and cur.description is not None
            checked_at = rows[0][0]
            assert isinstance(checked_at, datetime)
            if rows[0][1]:
                raise NotPrimary(standby_message("the guard's connection"))
            names = [column.name for column in cur.description[3:]]
            counts = [
                Counts(**{k: int(str(n)) for k, n in zip(names, r[3:], strict=True)}) for r in rows
            ]
            here: tuple[str, ...] = ()
            if as_of is None:  # now() ran between these two instants of this machine's clock
                offset = controller_offset(checked_at.timestamp(), sent_at, time.time())
                here = controller_warning(offset)
            check_statuses(cur, contract, status_column)
            # Only when something is live: the listing reads the queued rows again, and a
            # backlog can hold far more of them than there are workers.
            live: dict[int, list[LiveClaim]] = {}
            if any(c.live for c in counts):
                cur.execute(live_claims_query(contract), params)
                for n, row_id, claimed_at, expires, remaining, never, null in cur.fetchall():
                    live.setdefault(int(str(n)), []).append(
                        LiveClaim(
                            id=str(row_id),
                            claimed_at=claimed_at,  # type: ignore[arg-type]
                            lease_expires_at=expires,  # type: ignore[arg-type]
                            remaining_s=None if remaining is None else float(remaining),  # type: ignore[arg-type]
                            never_expires=bool(never),
                            expiry_null=bool(null),
                        )
                    )
    except SchemaMismatch:
        if status_column is None:
            raise
        # The pre-flight was skipped: let it name the table or column that vanished.
        with guard_transaction(conn, contract):
            verify_schema(conn, contract)
        raise
    verdicts = [
        _verdict(contract, subject, counts[n], tuple(live.get(n + 1, ())), checked_at, here)
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
    offset = subject.clock_offset
    clock: tuple[str, ...] = ()
    if offset is not None and offset.exceeds(contract.clock_skew_s):
        clock = (offset.warning(subject.host or "-", contract.clock_skew_s),)
    bound, bound_known = _wait_upper_bound(live, subject.lease_s, counts.live)
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
        clock_offset_s=offset.offset_s if offset else None,
        warnings=(
            *subject.warnings,
            *clock,
            *controller,
            *_expiry_warnings(contract, live, subject.lease_s),
        ),
        wait_upper_bound_known=bound_known,
    )


def _expiry_warnings(
    contract: Contract, live: tuple[LiveClaim, ...], lease_s: float | None
) -> tuple[str, ...]:
    """What the live rows' expiry values mean, named: NULL (no lease known) and infinity."""
    said = []
    if nulls := [c.id for c in live if c.expiry_null]:
        lease = f"claimed_at + {lease_s:g}s" if lease_s is not None else "unknown: no task timeout"
        said.append(
            f"table {contract.table_label}: {contract.lease.expires_at_column} is NULL on live "
            f"row(s) {_ids(nulls)}: no lease known, so each is judged by the task-timeout "
            f"lease ({lease})"
        )
    if never := [c.id for c in live if c.never_expires]:
        said.append(
            f"table {contract.table_label}: the lease of live row(s) {_ids(never)} never "
            "expires (expiry 'infinity'): the wait bound is unknown (never)"
        )
    return tuple(said)


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def _wait_upper_bound(
    live: tuple[LiveClaim, ...], lease_s: float | None, live_count: int
) -> tuple[float, bool]:
    """The longest remaining lease, and whether it bounds every live row.

    A live row with no computable expiry (a held advisory lock: Que, good_job) is bounded by
    one full lease when one is known; so is a live count the listing no longer showed
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
