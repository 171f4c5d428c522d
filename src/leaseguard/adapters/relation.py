"""What the guard reads must be the primary's live rows, all of them.

Three ways a check could see fewer rows than the workers hold, each refused by name:
a standby (it replays the primary late, or not at all while replay is paused), a relation
that is not the table (a materialized view is a snapshot; a view reads base tables whose
row-level security may hide rows from the view's owner or from the guard), and
row-level security on the table itself. Each check runs in the guard's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from leaseguard.core.catalog_queries import (
    policies_show_all_query,
    relation_query,
    rls_query,
    view_bases_query,
)
from leaseguard.core.contract import Contract
from leaseguard.core.errors import NotPrimary, SchemaMismatch

Connection = psycopg.Connection[tuple[object, ...]]

# pg_class.relkind: the kinds that hold rows themselves.
TABLE_KINDS = ("r", "p")
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


@dataclass(frozen=True)
class Relation:
    """What the catalog says about the named relation and the server it lives on."""

    kind: str
    database_zone: str  # the TimeZone a session starts with on this database


def standby_message(where: str) -> str:
    return (
        f"the guard is connected to a standby ({where}: pg_is_in_recovery() is true); a "
        "standby replays the primary's claims late, or not at all while replay is paused, so "
        "it cannot say what is live now: connect the guard to the primary"
    )


def check_relation(conn: Connection, relation: str, contract: Contract) -> Relation:
    """The relation's kind and the server's role: a standby, a missing relation, or a kind
    the contract does not allow fails."""
    row = conn.execute(relation_query(), {"relation": relation}).fetchone()
    assert row is not None
    oid, kind, standby, zone, database, address, port = row
    if standby:
        server = f"{address}:{port}" if address else "a local socket"
        raise NotPrimary(standby_message(f"database {database} at {server}"))
    label = contract.table_label
    if oid is None:
        raise SchemaMismatch(f"table {label} does not exist (or is not visible)")
    kind = str(kind)
    if kind not in TABLE_KINDS and not (kind == "v" and contract.relation_kind == "view"):
        raise SchemaMismatch(_kind_refusal(label, kind))
    return Relation(kind=kind, database_zone=str(zone))


def _kind_refusal(label: str, kind: str) -> str:
    what = _KIND_NAMES.get(kind, f"a relation of kind {kind!r}")
    if kind == "v":
        return (
            f"table {label} is a view, not the table that holds the rows; name the table, or "
            "set relation_kind: view to judge through the view on purpose (its base tables' "
            "row-level security is then checked)"
        )
    if kind == "m":
        return (
            f"table {label} is a materialized view: a snapshot from its last refresh, not the "
            "live rows; name the table that holds them"
        )
    return f"table {label} is {what}, not a table that holds the rows; name that table"


def check_view_bases(conn: Connection, relation: str, label: str) -> None:
    """relation_kind: view. Every relation the view reads must be a table whose rows every
    role that reads it sees: the guard's role, and the owner of each view on the way that is
    not security_invoker."""
    bases = conn.execute(view_bases_query(), {"relation": relation}).fetchall()
    for base, kind, reader, limited, shows_all in bases:
        if kind not in TABLE_KINDS:
            what = _KIND_NAMES.get(str(kind), f"a relation of kind {kind!r}")
            raise SchemaMismatch(
                f"view {label} reads {base}, {what}, whose rows may not be the live ones; "
                "judge a view only over tables"
            )
        if limited and not shows_all:
            raise SchemaMismatch(
                f"view {label} reads table {base}, whose row-level security applies to "
                f"role {reader} (the view's owner or the guard's role), so the view could "
                "show only some of its rows and miss live work; let that role bypass it "
                f"or add a policy that shows it every row, or name table {base} itself"
            )


def check_rows_visible(conn: Connection, relation: str, label: str) -> None:
    """Fail when row-level security would hide rows of `relation` (a qualified name) from
    the guard's role.

    A hidden claimed row is a live job the guard never sees: "proceed" on live work.
    graphile-worker enables RLS on its jobs table with no policy at all. Superusers and
    BYPASSRLS roles see every row; so does the owner, unless the table FORCEs RLS; so does
    a role a `USING (true)` policy shows every row (asked only where RLS applies: rare).
    """
    row = conn.execute(rls_query(), {"relation": relation}).fetchone()
    if row is None or not row[0]:
        return
    shown = conn.execute(policies_show_all_query(), {"relation": relation}).fetchone()
    if shown is not None and shown[0]:
        return
    # Where RLS applies to its owner, the table forces it.
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
