"""The lease predicate judged in one snapshot: counts, every status classified, live claims."""

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from psycopg import sql

from leaseguard.adapters import catalog
from leaseguard.adapters.db import Connection, Cursor, guard_transaction
from leaseguard.core import errors, fleet, predicate, presets
from leaseguard.core.contract import Contract
from leaseguard.core.verdict import Counts, LiveClaim, TaskTimeout, Verdict

MAX_NAMED = 10  # statuses named in one message; more are "and more"
COUNT_CAP = 10_000  # rows counted per unclassified status; beyond, "more than"

# An enum label in none of the lists (on every check: one added since could be on a row).
_UNLISTED_LABELS = sql.SQL(
    "SELECT EXISTS (SELECT FROM pg_enum WHERE enumtypid = %(type_oid)s "
    "AND enumlabel <> ALL(%(classified)s::text[]))"
)
# The relations judged (the table, the owners', a view's bases; their partitions and children)
# whose file changed after this snapshot was taken, or that it does not know (a copy renamed in
# its place): ALTER TABLE's rewrite and TRUNCATE are not MVCC-safe, a snapshot older than them
# reads the table as empty once their lock is gone. The snapshot's pg_class row has the old file;
# names resolve, and pg_relation_filenode() reads, in the catalog as of now.
_REWRITTEN = sql.SQL("""
    {rel}, tree(oid) AS (
        SELECT oid FROM rel
      UNION
        SELECT i.inhrelid FROM tree JOIN pg_catalog.pg_inherits AS i ON i.inhparent = tree.oid
    )
    SELECT string_agg(tree.oid::regclass::text, ', ' ORDER BY tree.oid::regclass::text)
    FROM tree LEFT JOIN pg_catalog.pg_class AS c ON c.oid = tree.oid
    WHERE tree.oid IS NOT NULL AND (c.oid IS NULL OR c.relfilenode <> 0
      AND c.relfilenode IS DISTINCT FROM pg_catalog.pg_relation_filenode(c.oid))""").format(
    rel=catalog.READ_RELATIONS
)


def lease_seconds(contract: Contract, task_timeout: TaskTimeout | None) -> float | None:
    """multiplier x task timeout; None when the rows carry their own expiry column."""
    if contract.rows_carry_expiry:
        return None
    if task_timeout is None:
        raise errors.ConfigError("a task timeout is required to derive the lease")
    return contract.lease.multiplier * task_timeout.seconds


@dataclass(frozen=True)
class Subject:
    """Whom a verdict is for (a host, or a fleet by the fleet rule) and its facts."""

    host: str | None
    task_timeout: TaskTimeout | None
    lease_s: float | None
    runtime_started_at: datetime | None
    clock_offset: fleet.ClockOffset | None = None
    warnings: tuple[str, ...] = ()

    def bound(self, contract: Contract) -> tuple[float | None, datetime | None]:
        """(lease seconds, orphan cut-off in the database clock, None if the start is unknown)."""
        started, tolerance = self.runtime_started_at, contract.clock_skew_s
        if self.clock_offset is not None:  # host minus database; its uncertainty widens tolerance
            started = self.clock_offset.in_database_clock(started)
            tolerance = self.clock_offset.tolerance_s(contract.clock_skew_s)
        if started is None:
            return self.lease_s, None
        try:
            return self.lease_s, started - timedelta(seconds=tolerance)
        except OverflowError:
            raise errors.ConfigError(
                f"clock_skew_s ({tolerance:g} s) reaches past year 1 from the runtime's start"
            ) from None


def judge_subjects(
    conn: Connection,
    contract: Contract,
    subjects: Sequence[Subject],
    *,
    as_of: datetime | None = None,
    status_column: catalog.StatusColumn | None = None,
) -> tuple[list[Verdict], catalog.StatusColumn]:
    """Every subject's verdict from one snapshot, and the status column (given: no pre-flight);
    judged again, once, in a new snapshot (pre-flight too) when a table was rewritten under it."""
    bounds = [s.bound(contract) for s in subjects]
    params = predicate.subjects_params(contract, bounds, as_of=as_of)
    for column in (status_column, None):
        sent_at = time.time()
        try:
            with guard_transaction(conn, contract) as cur:
                if column is None:
                    column = catalog.verify_schema(conn, contract)
                # The counts first: they say whether the server is a standby, named before all.
                rows = cur.execute(predicate.counts_query(contract), params).fetchall()
                assert rows and cur.description is not None
                checked_at = rows[0][0]
                if rows[0][1]:
                    raise errors.NotPrimary(catalog.standby_message("the guard's connection"))
                now = as_of or checked_at
                for subject, (_, cutoff) in zip(subjects, bounds, strict=True):
                    if cutoff is not None and cutoff > now:  # every claim would look orphaned
                        raise errors.LookupFailed(
                            f"host {subject.host or '-'}: the runtime's start time "
                            f"({subject.runtime_started_at}) is after the database's clock now "
                            f"({now:%Y-%m-%d %H:%M:%S%z}): every claim would look orphaned by a "
                            "restart that has not happened, so nothing is judged; fix that host's "
                            "clock (NTP) or the start time given (runtime.started_at, "
                            "--runtime-started-at, --host-facts)"
                        )
                names = [d.name for d in cur.description[3:]]
                counts = [Counts(**dict(zip(names, map(int, r[3:]), strict=True))) for r in rows]
                # now() ran between these two instants of this machine's clock
                taken = fleet.controller_offset(checked_at.timestamp(), sent_at, time.time())
                here = taken.controller_warning() if as_of is None else ()
                check_statuses(cur, contract, column)
                # Only when something is live: a backlog can hold far more rows than workers.
                live: dict[int, list[LiveClaim]] = {}
                if any(c.live for c in counts):
                    query = predicate.live_claims_query(contract)
                    for n, row_id, claimed, expires, left, *flags in cur.execute(query, params):
                        left_s = None if left is None else float(left)  # flags: never, null
                        claim = LiveClaim(str(row_id), claimed, expires, left_s, *map(bool, flags))
                        live.setdefault(int(str(n)), []).append(claim)
                # The locks of the reads held: was a table read rewritten since the snapshot?
                owners = presets.OWNERS.get(contract.claim_rule)
                table = predicate.table_identifier(contract).as_string(cur)
                owned = owners and predicate.table_identifier(contract, owners.table).as_string(cur)
                [(rewritten,)] = cur.execute(_REWRITTEN, {"relation": table, "owners": owned})
        except errors.SchemaMismatch:
            if column is None:
                raise
            # The pre-flight was skipped: let it name the table or column that vanished.
            with guard_transaction(conn, contract):
                catalog.verify_schema(conn, contract)
            raise
        if rewritten is None:
            break
    else:  # the table rewritten under both snapshots: the class every front names
        raise errors.GuardQueryFailed(
            f"table {rewritten} was rewritten or replaced (ALTER TABLE, TRUNCATE, a renamed "
            "copy) while the guard read it, twice in a row: a read begun before a rewrite "
            "sees the table empty, so nothing is judged; run the guard again once the "
            "migration is over"
        )
    verdicts = []
    for n, subject in enumerate(subjects):
        claims, offset, lease_s = tuple(live.get(n + 1, ())), subject.clock_offset, subject.lease_s
        warnings = list(subject.warnings)
        if offset is not None and offset.exceeds(contract.clock_skew_s):
            warnings.append(offset.warning(subject.host or "-", contract.clock_skew_s))
        warnings += here
        if nulls := [c.id for c in claims if c.expiry_null]:
            lease = "unknown: no task timeout" if lease_s is None else f"claimed_at + {lease_s:g}s"
            warnings.append(
                f"table {contract.table_label}: {contract.lease.expires_at_column} is NULL on live "
                f"row(s) {_ids(nulls)}: no lease known, so each is judged by the task-timeout "
                f"lease ({lease})"
            )
        if never := [c.id for c in claims if c.never_expires]:
            warnings.append(
                f"table {contract.table_label}: the lease of live row(s) {_ids(never)} never "
                "expires (expiry 'infinity'): the wait bound is unknown (never)"
            )
        # The wait: the longest remaining lease, a full one for a live row without a known end.
        unknown = any(c.remaining_s is None and not c.never_expires for c in claims)
        unbounded = unknown or bool(counts[n].live and not claims)
        bound = max([c.remaining_s for c in claims if c.remaining_s is not None], default=0.0)
        if unbounded and lease_s is not None:
            bound = max(bound, lease_s)
        verdicts.append(
            Verdict(
                counts=counts[n],
                live=claims,
                checked_at=checked_at,
                lease_s=lease_s,
                task_timeout=subject.task_timeout,
                runtime_started_at=subject.runtime_started_at,
                wait_upper_bound_s=max(bound, 0.0),
                table=contract.table_label,
                host=subject.host,
                clock_offset_s=offset.offset_s if offset else None,
                warnings=tuple(warnings),
                wait_upper_bound_known=not never and (lease_s is not None or not unbounded),
            )
        )
    return verdicts, column


def _ids(ids: list[str]) -> str:
    return ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def _key(contract: Contract, index_key: str | None) -> sql.Composable:
    status = sql.Identifier(contract.status_column)
    return status if index_key == "column" else sql.SQL("{}::text").format(status)


def unclassified_walk_query(contract: Contract, index_key: str) -> sql.Composed:
    """The unlisted statuses (as text), by a loose index scan, stopping after %(max_named)s + 1."""
    return sql.SQL("""
        WITH RECURSIVE walk(v, unknown) AS (
            (SELECT {key}, 0 FROM {table} WHERE {key} IS NOT NULL ORDER BY {key} LIMIT 1)
          UNION ALL
            SELECT (SELECT {key} FROM {table} WHERE {key} > w.v ORDER BY {key} LIMIT 1),
                   w.unknown + (w.v::text <> ALL(%(classified)s::text[]))::int
            FROM walk AS w WHERE w.v IS NOT NULL
              AND w.unknown + (w.v::text <> ALL(%(classified)s::text[]))::int <= %(max_named)s)
        SELECT w.v::text FROM walk AS w
        WHERE w.v IS NOT NULL AND w.v::text <> ALL(%(classified)s::text[])
        UNION ALL
        SELECT NULL WHERE NOT %(not_null)s AND EXISTS (SELECT FROM {table} WHERE {key} IS NULL)
    """).format(key=_key(contract, index_key), table=predicate.table_identifier(contract))


def status_rows_query(contract: Contract, index_key: str, status: str | None) -> sql.Composed:
    """Rows up to %(count_cap)s holding `status` (bound as %(status)s), through the index."""
    key = _key(contract, index_key)
    match = sql.SQL("{} IS NULL" if status is None else "{} = %(status)s").format(key)
    return sql.SQL(
        "SELECT count(*) FROM (SELECT FROM {} WHERE {} LIMIT %(count_cap)s) AS r"
    ).format(predicate.table_identifier(contract), match)


def check_statuses(cur: Cursor, contract: Contract, column: catalog.StatusColumn) -> None:
    """Fail (UnclassifiedStatus) naming the statuses rows hold that are in none of the lists."""
    if not contract.has_status_column:
        return
    classified = list(contract.classified_statuses)
    if column.enum_labels is not None:
        # Compared natively, a status that is no label of the enum is no value of its type.
        classified = [s for s in classified if s in column.enum_labels]
    params = dict(classified=classified, max_named=MAX_NAMED, count_cap=COUNT_CAP + 1)
    params |= dict(not_null=column.not_null, type_oid=column.type_oid)
    if not column.reads_rows(contract):
        row = cur.execute(_UNLISTED_LABELS, params).fetchone()
        if row is not None and row[0] is False:
            return
        # The enum gained a label the contract does not classify: the rows decide.
    found: list[tuple[object, int]] = []
    if column.index_key is None:
        # Exact counts in one pass; compared natively (`classified` holds values of its type).
        scan = sql.SQL(
            "SELECT {s}::text, count(*) FROM {table} WHERE {s} IS NULL OR {s} <> ALL("
            "%(classified)s) GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT %(max_named)s + 1"
        )
        status = sql.Identifier(contract.status_column)
        cur.execute(scan.format(s=status, table=predicate.table_identifier(contract)), params)
        found = [(value, int(str(n))) for value, n in cur.fetchall()]
    else:
        cur.execute(unclassified_walk_query(contract, column.index_key), params)
        for (value,) in cur.fetchall():  # text or NULL; each counted only when the check fails
            query = status_rows_query(contract, column.index_key, value)
            counted = cur.execute(query, params | {"status": value}).fetchone()
            found.append((value, int(str(counted[0])) if counted else 0))
        found.sort(key=lambda f: -f[1])
    if found:
        named = [f"{catalog.quoted_status(v)} ({_rows(n)})" for v, n in found[:MAX_NAMED]]
        more = ", and more" if len(found) > MAX_NAMED else ""
        raise errors.UnclassifiedStatus(
            f"table {contract.table_label} holds rows whose {contract.status_column} is in "
            f"none of claimed_statuses, queued_statuses or finished_statuses: "
            f"{', '.join(named)}{more}; the guard cannot tell whether they are live, so it "
            "does not proceed. Add each to the list it belongs to"
        )


def _rows(n: int) -> str:
    return f"more than {COUNT_CAP:,} rows" if n > COUNT_CAP else f"{n:,} row" + "s" * (n != 1)
