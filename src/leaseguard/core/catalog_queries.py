"""The catalog query of the guard's schema pre-flight (the relation's own checks: relation.py)."""

from __future__ import annotations

from psycopg import sql


def columns_query() -> sql.SQL:
    """The columns of a relation and their types; a relation gone yields no row, not an error."""
    return sql.SQL(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        WHERE a.attrelid = to_regclass(%(relation)s) AND a.attnum > 0 AND NOT a.attisdropped
        """
    )
