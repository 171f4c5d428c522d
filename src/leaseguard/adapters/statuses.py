"""Every status in the table is classified: claimed, queued or finished.

The judgment reads only claimed and queued rows, so without this check a typo in the
contract (`runing`, `Running`) or a status the protected system grew later would make live
work invisible: "nothing is live", proceed. Here the statuses present in the table are
compared with the contract's three lists, in the guard's own READ ONLY transaction, on
every check, and any status in none of them fails the check and is named with its rows.

It stays cheap on a large table through the catalog: a NOT NULL enum column whose every
label is classified cannot hold an unclassified status, so the check reads no row at all
(the stock schemas of River, Oban and pg-boss); otherwise an index leading with the status
column lets a loose index scan visit each distinct status once (predicate.py); without one
the check still runs, as one sequential pass, and the session's plan warning
(indexing.py) says which index to build. A contract without a status column
(graphile-worker's locked_at rule) has nothing to classify.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg

from leaseguard.core.contract import Contract
from leaseguard.core.errors import ConfigError, SchemaMismatch, UnclassifiedStatus
from leaseguard.core.status_queries import (
    status_column_query,
    status_rows_query,
    unclassified_scan_query,
    unclassified_walk_query,
    unlisted_labels_query,
)

Cursor = psycopg.Cursor[tuple[object, ...]]

# Statuses named in one message; more are summarised as "and more".
MAX_NAMED = 10
# Rows counted per unclassified status; beyond it the message says "more than".
COUNT_CAP = 10_000
# Status values are data, not secrets, but one can be any length.
_MAX_SHOWN_CHARS = 64


@dataclass(frozen=True)
class StatusColumn:
    """What the catalog says about the status column, read once per connection."""

    enum_labels: tuple[str, ...] | None  # None: not an enum
    not_null: bool
    index_key: str | None  # 'column' / 'text': an index can walk it; None: none can
    type_oid: int | None = None  # the enum type, to re-read its labels on every check

    def reads_rows(self, contract: Contract) -> bool:
        """Whether the check must read the table (else the catalog alone answers it)."""
        if not contract.has_status_column:
            return False
        if self.enum_labels is None or not self.not_null:
            return True
        return not set(self.enum_labels) <= set(contract.classified_statuses)


# The status facts of a contract that has no status column (graphile-worker's rule).
NO_STATUS_COLUMN = StatusColumn(enum_labels=None, not_null=True, index_key=None)


def read_status_column(
    conn: psycopg.Connection[tuple[object, ...]], contract: Contract, relation: str
) -> StatusColumn:
    """The column's catalog facts (`relation`: the table's qualified name). An enum must
    have every status the contract names."""
    if not contract.has_status_column:
        return NO_STATUS_COLUMN
    column_of = {"relation": relation, "column": contract.status_column}
    row = conn.execute(status_column_query(), column_of).fetchone()
    if row is None:  # the schema pre-flight found the column; it vanished since
        raise SchemaMismatch(
            f"column {contract.status_column} (status_column) does not exist in table "
            f"{contract.table_label}"
        )
    is_enum, labels, not_null, index_key, type_oid = row
    column = StatusColumn(
        enum_labels=tuple(str(label) for label in labels) if is_enum else None,  # type: ignore[attr-defined]
        not_null=bool(not_null),
        index_key=index_key if isinstance(index_key, str) else None,
        type_oid=int(str(type_oid)) if is_enum else None,
    )
    if column.enum_labels is not None:
        _require_labels(contract, column.enum_labels)
    return column


def _require_labels(contract: Contract, labels: tuple[str, ...]) -> None:
    """A configured status an enum cannot hold is a typo: a usage error, named.

    The default finished statuses are not checked: an enum without a 'failed' label
    simply has no failed rows.
    """
    for key, statuses in (
        ("claimed_statuses", contract.claimed_statuses),
        ("queued_statuses", contract.queued_statuses),
        ("finished_statuses", contract.finished_statuses or ()),
    ):
        missing = [s for s in statuses if s not in labels]
        if missing:
            raise ConfigError(
                f"{key} names {_shown(missing)}, not a label of the enum type of column "
                f"{contract.status_column} in table {contract.table_label} "
                f"(its labels: {_shown(list(labels))})"
            )


def check_statuses(cur: Cursor, contract: Contract, column: StatusColumn) -> None:
    """Fail (UnclassifiedStatus) when rows hold a status in none of the contract's lists."""
    if not contract.has_status_column:
        return
    classified = list(contract.classified_statuses)
    if column.enum_labels is not None:
        # The scan compares the column natively: a status that is no label of the enum
        # (a default finished one) is no value of its type, and no row can hold it.
        classified = [s for s in classified if s in column.enum_labels]
    params: dict[str, object] = {
        "classified": classified,
        "max_named": MAX_NAMED,
        "count_cap": COUNT_CAP + 1,
        "not_null": column.not_null,
        "type_oid": column.type_oid,
    }
    if not column.reads_rows(contract):
        row = cur.execute(unlisted_labels_query(), params).fetchone()
        if row is not None and row[0] is False:
            return
        # The enum gained a label the contract does not classify: the rows decide.
    if column.index_key is None:
        cur.execute(unclassified_scan_query(contract), params)
        found = [(value, int(str(n))) for value, n in cur.fetchall()]
    else:
        cur.execute(unclassified_walk_query(contract, column.index_key), params)
        walked = [v for (v,) in cur.fetchall()]
        found = _counted(cur, contract, column.index_key, walked, params)
    if found:
        raise UnclassifiedStatus(_message(contract, found))


def _counted(
    cur: Cursor,
    contract: Contract,
    index_key: str,
    statuses: list[object],
    params: dict[str, object],
) -> list[tuple[object, int]]:
    """Rows per status found by the walk (only ever run when the check fails anyway)."""
    if not statuses:
        return []
    named = [None if s is None else str(s) for s in statuses]
    values = {f"s{i}": s for i, s in enumerate(named) if s is not None}
    cur.execute(status_rows_query(contract, index_key, named), {**params, **values})
    rows = {int(str(i)): int(str(n)) for i, n in cur.fetchall()}
    return sorted(((status, rows[i]) for i, status in enumerate(named)), key=lambda f: -f[1])


def _message(contract: Contract, found: list[tuple[object, int]]) -> str:
    named = [f"{_value(v)} ({_rows(n)})" for v, n in found[:MAX_NAMED]]
    more = ", and more" if len(found) > MAX_NAMED else ""
    return (
        f"table {contract.table_label} holds rows whose {contract.status_column} is in none "
        f"of claimed_statuses, queued_statuses or finished_statuses: {', '.join(named)}{more}; "
        "the guard cannot tell whether they are live, so it does not proceed. Add each to "
        "the list it belongs to"
    )


def _value(value: object) -> str:
    if value is None:
        return "NULL"
    text = str(value)
    if len(text) > _MAX_SHOWN_CHARS:
        text = text[:_MAX_SHOWN_CHARS] + "..."
    return json.dumps(text, ensure_ascii=False)


def _rows(n: int) -> str:
    if n > COUNT_CAP:
        return f"more than {COUNT_CAP:,} rows"
    return f"{n:,} row" + ("" if n == 1 else "s")


def _shown(values: list[str]) -> str:
    shown = ", ".join(_value(v) for v in values[:MAX_NAMED])
    return shown + (", ..." if len(values) > MAX_NAMED else "")
