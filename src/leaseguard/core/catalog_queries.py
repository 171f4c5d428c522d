"""The schema pre-flight's column read (the relation's own checks: adapters/relation.py)."""

from psycopg import sql


def columns_query() -> sql.SQL:
    """A relation's columns and their types; a relation gone yields no row, not an error."""
    return sql.SQL(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%(relation)s) AND a.attnum > 0 AND NOT a.attisdropped"
    )
