"""Every status classified: the catalog and index-walk queries behind statuses.py.

The predicate reads only claimed and queued rows, so a status the contract does not name
(a typo, 'Running', a new state the system grew) would silently drop out of the judgment.
These queries find the statuses present in the table that are in none of the contract's
lists, without reading the table: the catalog says which index can answer, and a "loose
index scan" over that index visits each distinct status once (O(distinct x log n)).
"""

from __future__ import annotations

from psycopg import sql

from leaseguard.core.contract import Contract
from leaseguard.core.predicate import table_identifier


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
        WHERE c.oid = to_regclass(%(relation)s)
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
