"""Every status in the table is claimed, queued or finished: the judgment reads only claimed
and queued rows, so a typo (`runing`) or a status the system grew later would hide live work.

Cheaply, on every check: a NOT NULL enum whose labels are all classified reads no row, an
index leading with the status is walked once per distinct status, else one seq scan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg
from psycopg import sql

from leaseguard.core.contract import Contract
from leaseguard.core.errors import ConfigError, SchemaMismatch, UnclassifiedStatus
from leaseguard.core.predicate import table_identifier

Cursor = psycopg.Cursor[tuple[object, ...]]

MAX_NAMED = 10  # statuses named in one message; more are "and more"
COUNT_CAP = 10_000  # rows counted per unclassified status; beyond, "more than"
_MAX_SHOWN_CHARS = 64  # a status value can be any length

# The column's enum labels, NOT NULL, type, and an index that can walk it: a valid,
# non-partial, default-opclass btree whose first key is the column ('column') or
# `status::text` ('text') in the comparison's collation, the plain column preferred.
_COLUMN = sql.SQL(
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
    WHERE c.oid = to_regclass(%(relation)s)
    """
)

# An enum label in none of the lists (on every check: one added since could be on a row).
_UNLISTED_LABELS = sql.SQL(
    "SELECT EXISTS (SELECT FROM pg_enum WHERE enumtypid = %(type_oid)s "
    "AND enumlabel <> ALL(%(classified)s::text[]))"
)


def _key(contract: Contract, index_key: str | None) -> sql.Composable:
    status = sql.Identifier(contract.status_column)
    return status if index_key == "column" else sql.SQL("{}::text").format(status)


def unclassified_walk_query(contract: Contract, index_key: str) -> sql.Composed:
    """The statuses (as text; NULL for NULL) in none of the lists, by a loose index scan (each
    step asks the index for the next greater status), stopping after %(max_named)s + 1."""
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
    ).format(key=_key(contract, index_key), table=table_identifier(contract))


def status_rows_query(
    contract: Contract, index_key: str, statuses: list[str | None]
) -> sql.Composed:
    """(position, rows up to %(count_cap)s) per status, each its own branch and bound value,
    so the planner picks the index for a rare one, a short scan for a common one."""
    key = _key(contract, index_key)
    return sql.SQL(" UNION ALL ").join(
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
    )


@dataclass(frozen=True)
class StatusColumn:
    """The status column's catalog facts, read once per connection."""

    enum_labels: tuple[str, ...] | None  # None: not an enum
    not_null: bool
    index_key: str | None  # 'column' / 'text': an index can walk it; None: none can
    type_oid: int | None = None  # the enum type, to re-read its labels on every check

    def reads_rows(self, contract: Contract) -> bool:
        """Whether the check must read rows (else the enum's labels answer it)."""
        if not contract.has_status_column:
            return False
        if self.enum_labels is None or not self.not_null:
            return True
        return not set(self.enum_labels) <= set(contract.classified_statuses)


def read_status_column(
    conn: psycopg.Connection[tuple[object, ...]], contract: Contract, relation: str
) -> StatusColumn:
    """The column's catalog facts. A configured status an enum cannot hold is a typo, a usage
    error (not the default finished ones: an enum without 'failed' has no failed rows)."""
    if not contract.has_status_column:
        return StatusColumn(enum_labels=None, not_null=True, index_key=None)
    row = conn.execute(_COLUMN, {"relation": relation, "column": contract.status_column}).fetchone()
    if row is None:  # the pre-flight found the column; it vanished since
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
    for key in ("claimed_statuses", "queued_statuses", "finished_statuses"):
        labels = column.enum_labels
        if labels is not None and (
            missing := [s for s in getattr(contract, key) or () if s not in labels]
        ):
            raise ConfigError(
                f"{key} names {_shown(missing)}, not a label of the enum type of column "
                f"{contract.status_column} in table {contract.table_label} "
                f"(its labels: {_shown(list(labels))})"
            )
    return column


def check_statuses(cur: Cursor, contract: Contract, column: StatusColumn) -> None:
    """Fail (UnclassifiedStatus) when rows hold a status in none of the contract's lists."""
    if not contract.has_status_column:
        return
    classified = list(contract.classified_statuses)
    if column.enum_labels is not None:
        # Compared natively, a status that is no label of the enum is no value of its type.
        classified = [s for s in classified if s in column.enum_labels]
    params: dict[str, object] = {
        "classified": classified,
        "max_named": MAX_NAMED,
        "count_cap": COUNT_CAP + 1,
        "not_null": column.not_null,
        "type_oid": column.type_oid,
    }
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
        cur.execute(scan.format(s=status, table=table_identifier(contract)), params)
        found = [(value, int(str(n))) for value, n in cur.fetchall()]
    else:
        cur.execute(unclassified_walk_query(contract, column.index_key), params)
        walked = [None if v is None else str(v) for (v,) in cur.fetchall()]
        if walked:  # rows per status (only ever counted when the check fails anyway)
            values = {f"s{i}": s for i, s in enumerate(walked) if s is not None}
            query = status_rows_query(contract, column.index_key, walked)
            rows = {int(str(i)): int(str(n)) for i, n in cur.execute(query, params | values)}
            found = sorted(((s, rows[i]) for i, s in enumerate(walked)), key=lambda f: -f[1])
    if found:
        named = [f"{_value(v)} ({_rows(n)})" for v, n in found[:MAX_NAMED]]
        more = ", and more" if len(found) > MAX_NAMED else ""
        raise UnclassifiedStatus(
            f"table {contract.table_label} holds rows whose {contract.status_column} is in "
            f"none of claimed_statuses, queued_statuses or finished_statuses: "
            f"{', '.join(named)}{more}; the guard cannot tell whether they are live, so it "
            "does not proceed. Add each to the list it belongs to"
        )


def _value(value: object) -> str:
    if value is None:
        return "NULL"
    text = str(value)
    cut = "..." if len(text) > _MAX_SHOWN_CHARS else ""
    return json.dumps(text[:_MAX_SHOWN_CHARS] + cut, ensure_ascii=False)


def _rows(n: int) -> str:
    if n > COUNT_CAP:
        return f"more than {COUNT_CAP:,} rows"
    return f"{n:,} row" + ("" if n == 1 else "s")


def _shown(values: list[str]) -> str:
    shown = ", ".join(_value(v) for v in values[:MAX_NAMED])
    return shown + (", ..." if len(values) > MAX_NAMED else "")
