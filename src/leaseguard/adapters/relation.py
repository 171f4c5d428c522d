"""The guard reads the primary's live rows, all of them: a standby, a relation that is not
the table (a materialized view is a snapshot; a view's base tables may hide rows) and
row-level security that hides rows are refused by name."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from leaseguard.core.contract import Contract
from leaseguard.core.errors import NotPrimary, SchemaMismatch

Connection = psycopg.Connection[tuple[object, ...]]

TABLE_KINDS = ("r", "p")  # pg_class.relkind: the kinds that hold rows themselves
_KIND_NAMES = {
    "v": "a view",
    "m": "a materialized view",
    "f": "a foreign table",
    "S": "a sequence",
    "c": "a composite type",
    "i": "an index",
    "I": "a partitioned index",
    "t": "a TOAST table",
}

# Always one row (oid NULL when no relation has the name); the TimeZone words a message.
_RELATION = sql.SQL(
    """
    SELECT r.oid, c.relkind::text, pg_catalog.pg_is_in_recovery(),
           (SELECT s.reset_val FROM pg_catalog.pg_settings AS s WHERE s.name = 'TimeZone'),
           current_database(), host(inet_server_addr()), inet_server_port()
    FROM (SELECT to_regclass(%(relation)s)::oid AS oid) AS r
    LEFT JOIN pg_catalog.pg_class AS c ON c.oid = r.oid
    """
)

# Whether a permissive `FOR SELECT ... USING (true)` policy on `c` applies to {role}
# (polroles {0} is PUBLIC) with no restrictive policy beside it.
_SHOWS_ALL = sql.SQL(
    """
    EXISTS (SELECT FROM pg_catalog.pg_policy AS p
            WHERE p.polrelid = c.oid AND p.polpermissive AND p.polcmd IN ('r', '*')
              AND pg_get_expr(p.polqual, p.polrelid) = 'true'
              AND (p.polroles = '{{0}}'::oid[] OR EXISTS (SELECT FROM unnest(p.polroles) AS
                   pr(oid) WHERE pg_has_role({role}, pr.oid, 'USAGE'))))
    AND NOT EXISTS (SELECT FROM pg_catalog.pg_policy AS p
                    WHERE p.polrelid = c.oid AND NOT p.polpermissive)"""
)

# row_security_active() is PostgreSQL's own answer; the second column words the message.
_ROW_SECURITY = sql.SQL(
    "SELECT row_security_active(c.oid), pg_has_role(current_user, c.relowner, 'USAGE'), "
    "{shows} FROM pg_catalog.pg_class AS c WHERE c.oid = to_regclass(%(relation)s)"
).format(shows=_SHOWS_ALL.format(role=sql.SQL("current_user")))

# Every non-view relation a view reads (through nested views), with each role that reads it:
# the guard's, and every non-security_invoker view's owner on the way (every owner against
# every base: more refusals than PostgreSQL would make, never fewer).
_VIEW_BASES = sql.SQL(
    """
    WITH RECURSIVE rel(oid) AS (
        SELECT to_regclass(%(relation)s)::oid
      UNION
        SELECT d.refobjid FROM rel
        JOIN pg_catalog.pg_rewrite AS w ON w.ev_class = rel.oid
        JOIN pg_catalog.pg_depend AS d
          ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = w.oid
         AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid <> rel.oid
    ), readers(oid) AS (
        SELECT a.oid FROM pg_catalog.pg_roles AS a WHERE a.rolname = current_user
      UNION
        SELECT c.relowner FROM rel JOIN pg_catalog.pg_class AS c ON c.oid = rel.oid
        WHERE c.relkind = 'v' AND NOT EXISTS (
            SELECT FROM pg_catalog.pg_options_to_table(c.reloptions) AS o
            WHERE o.option_name = 'security_invoker'
              AND lower(o.option_value) IN ('true', 'on', 'yes', '1', 't', 'y'))
    )
    SELECT c.oid::regclass::text, c.relkind::text, a.rolname::text,
           c.relrowsecurity AND NOT a.rolsuper AND NOT a.rolbypassrls
             AND (c.relforcerowsecurity OR NOT pg_has_role(a.oid, c.relowner, 'USAGE')),
           {shows}
    FROM rel JOIN pg_catalog.pg_class AS c ON c.oid = rel.oid
    CROSS JOIN readers JOIN pg_catalog.pg_roles AS a ON a.oid = readers.oid
    WHERE c.relkind <> 'v'
    ORDER BY 1, 3
    """
).format(shows=_SHOWS_ALL.format(role=sql.SQL("a.oid")))


@dataclass(frozen=True)
class Relation:
    database_zone: str  # the TimeZone a session starts with on this database


def standby_message(where: str) -> str:
    return (
        f"the guard is connected to a standby ({where}: pg_is_in_recovery() is true); a "
        "standby replays the primary's claims late, or not at all while replay is paused, so "
        "it cannot say what is live now: connect the guard to the primary"
    )


def _kind_name(kind: object) -> str:
    return _KIND_NAMES.get(str(kind), f"a relation of kind {kind!r}")


def check_relation(conn: Connection, relation: str, contract: Contract) -> Relation:
    """The relation's kind; a standby, a missing relation or a kind not allowed fails."""
    row = conn.execute(_RELATION, {"relation": relation}).fetchone()
    assert row is not None
    oid, kind, standby, zone, database, address, port = row
    if standby:
        server = f"{address}:{port}" if address else "a local socket"
        raise NotPrimary(standby_message(f"database {database} at {server}"))
    label = contract.table_label
    if oid is None:
        raise SchemaMismatch(f"table {label} does not exist (or is not visible)")
    kind = str(kind)
    if kind in TABLE_KINDS or (kind == "v" and contract.relation_kind == "view"):
        return Relation(database_zone=str(zone))
    if kind == "v":
        raise SchemaMismatch(
            f"table {label} is a view, not the table that holds the rows; name the table, or "
            "set relation_kind: view to judge through the view on purpose (its base tables' "
            "row-level security is then checked)"
        )
    if kind == "m":
        raise SchemaMismatch(
            f"table {label} is a materialized view: a snapshot from its last refresh, not the "
            "live rows; name the table that holds them"
        )
    raise SchemaMismatch(
        f"table {label} is {_kind_name(kind)}, not a table that holds the rows; name that table"
    )


def check_view_bases(conn: Connection, relation: str, label: str) -> None:
    """relation_kind: view. Every relation it reads must be a table showing all its rows."""
    for base, kind, reader, limited, shows_all in conn.execute(
        _VIEW_BASES, {"relation": relation}
    ).fetchall():
        if kind not in TABLE_KINDS:
            raise SchemaMismatch(
                f"view {label} reads {base}, {_kind_name(kind)}, whose rows may not be the live "
                "ones; judge a view only over tables"
            )
        if limited and not shows_all:
            raise SchemaMismatch(
                f"view {label} reads table {base}, whose row-level security applies to "
                f"role {reader} (the view's owner or the guard's role), so the view could "
                "show only some of its rows and miss live work; let that role bypass it "
                f"or add a policy that shows it every row, or name table {base} itself"
            )


def check_rows_visible(conn: Connection, relation: str, label: str) -> None:
    """Fail when row-level security would hide rows (live work never seen) from the guard's
    role (graphile-worker enables RLS on its jobs table with no policy at all)."""
    row = conn.execute(_ROW_SECURITY, {"relation": relation}).fetchone()
    if row is None or not row[0] or row[2]:
        return
    why = "forces row-level security on its owner too" if row[1] else "has row-level security"
    raise SchemaMismatch(
        f"table {label} {why}, so the guard's role could see only some of its rows and "
        "miss live work; let the role bypass it (ALTER ROLE <guard role> BYPASSRLS) or add "
        "a policy that shows it every row (CREATE POLICY leaseguard_read ON "
        f"{label} FOR SELECT TO <guard role> USING (true))"
    )


def naive_zone_refusal(column: str, key: str, label: str, database_zone: str) -> str:
    """Why a naive time column without a declared timestamp_zone fails the check."""
    return (
        f"column {column} ({key}) of table {label} is a timestamp without time zone and the "
        "contract declares no timestamp_zone: the guard cannot know the zone it was written "
        f"in (this database's TimeZone is {database_zone}, which the writer may not have "
        "used; a wrong zone shifts every claim by hours); set timestamp_zone to the zone the "
        "application writes it in"
    )
