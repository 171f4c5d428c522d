"""The schema pre-flight: a standby, a relation not the table, rows RLS hides: refused by name."""

import json
import re
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from leaseguard.adapters.db import Connection
from leaseguard.core import predicate, presets
from leaseguard.core.contract import Contract
from leaseguard.core.errors import ConfigError, NotPrimary, SchemaMismatch

TABLE_KINDS = ("r", "p")  # pg_class.relkind: the kinds that hold rows themselves
_KIND_NAMES = dict(
    zip("vmfSciIt", ("a view", "a materialized view", "a foreign table", "a sequence",
        "a composite type", "an index", "a partitioned index", "a TOAST table"), strict=True)
)  # fmt: skip
# format_type() spells a precision when the column has one (ActiveRecord 7, Ecto: timestamp(6)).
_TIME_TYPE = re.compile(r"timestamp(\(\d+\))? with(out)? time zone")

# A permissive `USING (true)` SELECT policy on `c` applies to {role}; no restrictive one.
_SHOWS_ALL = sql.SQL("""
    EXISTS (SELECT FROM pg_catalog.pg_policy AS p WHERE p.polrelid = c.oid AND p.polpermissive
      AND p.polcmd IN ('r', '*') AND pg_get_expr(p.polqual, p.polrelid) = 'true'
      AND (p.polroles = '{{0}}'::oid[] OR EXISTS (SELECT FROM unnest(p.polroles) AS pr(oid)
                                                  WHERE pg_has_role({role}, pr.oid, 'USAGE'))))
    AND NOT EXISTS (SELECT FROM pg_catalog.pg_policy AS p
                    WHERE p.polrelid = c.oid AND NOT p.polpermissive)""")
# Where the rows of `c` come from: the table it is a partition or inheritance child of; the
# foreign tables, and the relations a logical replication subscription applies, among it and
# its descendants (partitions are pg_inherits rows too); whether it has children.
_DESCENDANTS = sql.SQL("""
    (WITH RECURSIVE d(oid) AS (SELECT c.oid UNION SELECT i.inhrelid FROM d
                               JOIN pg_catalog.pg_inherits AS i ON i.inhparent = d.oid)
     SELECT string_agg(d.oid::regclass::text, ', ' ORDER BY d.oid::regclass::text)
     FROM d JOIN pg_catalog.pg_class AS k ON k.oid = d.oid WHERE {which})""")
_LINEAGE = sql.SQL("""
    (SELECT i.inhparent::regclass::text FROM pg_catalog.pg_inherits AS i
     WHERE i.inhrelid = c.oid ORDER BY i.inhseqno LIMIT 1), c.relispartition, {foreign},
    {subscribed}, EXISTS (SELECT FROM pg_catalog.pg_inherits AS i WHERE i.inhparent = c.oid)
""").format(
    foreign=_DESCENDANTS.format(which=sql.SQL("k.relkind = 'f'")),
    subscribed=_DESCENDANTS.format(
        which=sql.SQL("k.oid IN (SELECT s.srrelid FROM pg_catalog.pg_subscription_rel AS s)")
    ),
)
# Always one row (oid NULL when no relation has the name): the server, the relation, whether
# pg_locks is readable, row-level security (row_security_active(): PostgreSQL's answer), the
# schemas of tables (not parts of one) named like it elsewhere, its columns and their types; the
# status column's enum labels, NOT NULL, and a plain btree leading with the column ('column',
# preferred) or `status::text` ('text') in the comparison's collation.
_RELATION = sql.SQL("""
    SELECT r.oid, c.relkind::text, pg_catalog.pg_is_in_recovery(),
      (SELECT s.reset_val FROM pg_catalog.pg_settings AS s WHERE s.name = 'TimeZone'),
      current_database(), host(inet_server_addr()), inet_server_port(),
      has_table_privilege('pg_catalog.pg_locks', 'SELECT')
        AND has_function_privilege('pg_catalog.pg_lock_status()', 'EXECUTE'),
      row_security_active(c.oid), pg_has_role(current_user, c.relowner, 'USAGE'), {shows},
      {lineage}, c.relnamespace::regnamespace::text, cn.nspname::text,
      (SELECT string_agg(n.nspname::text, ', ' ORDER BY n.nspname) FROM pg_catalog.pg_class AS o
       JOIN pg_catalog.pg_namespace AS n ON n.oid = o.relnamespace
       WHERE o.relname = c.relname AND o.oid <> c.oid AND o.relkind IN ('r', 'p', 'f')
         AND o.relpersistence <> 't'
         AND NOT EXISTS (SELECT FROM pg_catalog.pg_inherits AS i WHERE i.inhrelid = o.oid)),
      ARRAY(SELECT ARRAY[f.attname::text, format_type(f.atttypid, f.atttypmod)]
            FROM pg_attribute AS f
            WHERE f.attrelid = c.oid AND f.attnum > 0 AND NOT f.attisdropped),
      t.typtype = 'e', ARRAY(SELECT e.enumlabel::text FROM pg_enum e
                             WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder),
      a.attnotnull,
      (SELECT CASE WHEN i.indkey[0] = a.attnum THEN 'column' ELSE 'text' END FROM pg_index i
       JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
       JOIN pg_opclass oc ON oc.oid = i.indclass[0]
       WHERE i.indrelid = c.oid AND am.amname = 'btree' AND oc.opcdefault
         AND i.indisvalid AND i.indisready AND i.indpred IS NULL
         AND ((i.indkey[0] = a.attnum AND i.indcollation[0] = a.attcollation)
              OR (i.indkey[0] = 0
                  AND pg_get_indexdef(i.indexrelid, 1, false) = format('(%%I)::text', a.attname)
                  AND i.indcollation[0] = CASE a.attcollation WHEN 0
                      THEN 'pg_catalog.default'::regcollation ELSE a.attcollation END))
       ORDER BY i.indkey[0] = a.attnum DESC LIMIT 1),
      t.oid
    FROM (SELECT to_regclass(%(relation)s)::oid AS oid) AS r
    LEFT JOIN pg_catalog.pg_class AS c ON c.oid = r.oid
    LEFT JOIN pg_catalog.pg_namespace AS cn ON cn.oid = c.relnamespace
    LEFT JOIN pg_attribute AS a
      ON a.attrelid = c.oid AND a.attname = %(column)s AND NOT a.attisdropped
    LEFT JOIN pg_type AS t ON t.oid = a.atttypid""").format(
    shows=_SHOWS_ALL.format(role=sql.SQL("current_user")), lineage=_LINEAGE
)
# The relation (and the owners' table, when named) and every relation each reads, through the
# views it reads.
READ_RELATIONS = sql.SQL("""
    WITH RECURSIVE rel(oid) AS (
        SELECT unnest(ARRAY[pg_catalog.to_regclass(%(relation)s)::oid,
                            pg_catalog.to_regclass(%(owners)s)::oid])
      UNION
        SELECT d.refobjid FROM rel JOIN pg_catalog.pg_rewrite AS w ON w.ev_class = rel.oid
        JOIN pg_catalog.pg_depend AS d
          ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = w.oid
         AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid <> rel.oid
    )""")
# Every non-view relation a view reads, with each role reading it (the guard's, the definer
# views' owners; every owner against every base: more refusals than PostgreSQL, never fewer),
# and whether any of the views says ONLY (a base with children may then be read without them).
_VIEW_BASES = sql.SQL(r"""
    {rel}, readers(oid) AS (
        SELECT a.oid FROM pg_catalog.pg_roles AS a WHERE a.rolname = current_user
      UNION
        SELECT c.relowner FROM rel JOIN pg_catalog.pg_class AS c ON c.oid = rel.oid
        WHERE c.relkind = 'v' AND NOT EXISTS (
          SELECT FROM pg_catalog.pg_options_to_table(c.reloptions) AS o
          WHERE o.option_name = 'security_invoker'
            AND lower(o.option_value) IN ('true', 'on', 'yes', '1', 't', 'y')))
    SELECT c.oid::regclass::text, c.relkind::text, a.rolname::text,
      c.relrowsecurity AND NOT a.rolsuper AND NOT a.rolbypassrls
        AND (c.relforcerowsecurity OR NOT pg_has_role(a.oid, c.relowner, 'USAGE')), {shows},
      {lineage}, EXISTS (SELECT FROM rel AS v JOIN pg_catalog.pg_class AS vc ON vc.oid = v.oid
                         WHERE vc.relkind = 'v' AND pg_get_viewdef(v.oid) ~ '\mONLY\M')
    FROM rel JOIN pg_catalog.pg_class AS c ON c.oid = rel.oid
    CROSS JOIN readers JOIN pg_catalog.pg_roles AS a ON a.oid = readers.oid
    WHERE c.relkind <> 'v' ORDER BY 1, 3""").format(
    rel=READ_RELATIONS, shows=_SHOWS_ALL.format(role=sql.SQL("a.oid")), lineage=_LINEAGE
)
# The functions the views' queries call, themselves or as an operator's code (builtins are
# pinned: PostgreSQL records no dependency on them).
_VIEW_FUNCTIONS = sql.SQL("""
    {rel}
    SELECT DISTINCT p.oid::regprocedure::text
    FROM rel JOIN pg_catalog.pg_rewrite AS w ON w.ev_class = rel.oid
    JOIN pg_catalog.pg_depend AS d
      ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = w.oid
    LEFT JOIN pg_catalog.pg_operator AS o
      ON d.refclassid = 'pg_catalog.pg_operator'::regclass AND o.oid = d.refobjid
    JOIN pg_catalog.pg_proc AS p
      ON p.oid = CASE WHEN d.refclassid = 'pg_catalog.pg_proc'::regclass THEN d.refobjid
                      ELSE o.oprcode::oid END
    ORDER BY 1""").format(rel=READ_RELATIONS)


@dataclass(frozen=True)
class StatusColumn:
    """The status column's catalog facts, read once per connection."""

    enum_labels: tuple[str, ...] | None  # None: not an enum
    not_null: bool
    index_key: str | None  # 'column' / 'text': an index can walk it; None: none can
    type_oid: int | None = None  # the enum type, to re-read its labels on every check

    def reads_rows(self, contract: Contract) -> bool:
        """Whether the check must read rows (else the enum's labels answer it)."""
        labels, classified = set(self.enum_labels or ()), set(contract.classified_statuses)
        unanswered = self.enum_labels is None or not self.not_null or not labels <= classified
        return contract.has_status_column and unanswered


def standby_message(where: str) -> str:
    return (
        f"the guard is connected to a standby ({where}: pg_is_in_recovery() is true); a "
        "standby replays the primary's claims late, or not at all while replay is paused, so "
        "it cannot say what is live now: connect the guard to the primary"
    )


def verify_schema(conn: Connection, contract: Contract) -> StatusColumn:
    """Fail naming the server, relation or column (a standby first, then what the relation is)."""
    table, label = predicate.table_identifier(contract).as_string(conn), contract.table_label
    [relation] = conn.execute(_RELATION, {"relation": table, "column": contract.status_column})
    oid, kind, standby, zone, database, address, port, locks_readable = relation[:8]
    if standby:
        server = f"{address}:{port}" if address else "a local socket"
        raise NotPrimary(standby_message(f"database {database} at {server}"))
    if oid is None:
        raise SchemaMismatch(f"table {label} does not exist (or is not visible)")
    if kind == "v" and contract.relation_kind != "view":
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
    if kind not in (*TABLE_KINDS, "v"):
        raise SchemaMismatch(
            f"table {label} is {_kind_name(kind)}, not a table that holds the rows; name that table"
        )
    _check_lineage(relation[11:15], f"table {label}")
    _check_rows_visible(relation, label)
    if contract.relation_kind == "view":
        # Each relation the view reads is a table showing every row; it calls no function (which
        # may read anything: a materialized view, another server).
        reads = {"relation": table, "owners": None}
        bases = conn.execute(_VIEW_BASES, reads).fetchall()
        for base, base_kind, reader, limited, shows_all, *lineage, has_children, says_only in bases:
            _check_lineage(tuple(lineage), f"view {label} reads {base}, which")
            if has_children and says_only:
                raise SchemaMismatch(
                    f"view {label} reads {base}, which has partitions or inheritance children, "
                    "and says ONLY: the rows in them would be missed; read the table whole, "
                    f"or name table {base} itself"
                )
            if base_kind not in TABLE_KINDS:
                raise SchemaMismatch(
                    f"view {label} reads {base}, {_kind_name(base_kind)}, whose rows may not be "
                    "the live ones; judge a view only over tables"
                )
            if limited and not shows_all:
                raise SchemaMismatch(
                    f"view {label} reads table {base}, whose row-level security applies to "
                    f"role {reader} (the view's owner or the guard's role), so the view could "
                    "show only some of its rows and miss live work; let that role bypass it "
                    f"or add a policy that shows it every row, or name table {base} itself"
                )
        if functions := [str(f) for (f,) in conn.execute(_VIEW_FUNCTIONS, reads)]:
            raise SchemaMismatch(
                f"view {label} calls {', '.join(functions)}, which may read rows that are not "
                "the live ones; judge a view only over tables, or name the table itself"
            )
    if owners := presets.OWNERS.get(contract.claim_rule):
        # The owners' table exists, says who is alive, shows every row (hidden: a claim looks dead).
        owned = predicate.table_identifier(contract, owners.table).as_string(conn)
        owners_label = f"{contract.schema}.{owners.table}" if contract.schema else owners.table
        [row] = conn.execute(_RELATION, {"relation": owned, "column": None})
        what = f"table {owners_label} (the owners of the claims in {label})"
        if row[0] is None:
            raise SchemaMismatch(f"{what} does not exist (or is not visible)")
        if row[1] not in TABLE_KINDS:  # a view may filter them, a snapshot freezes them
            raise SchemaMismatch(
                f"{what} is {_kind_name(row[1])}, not the table the owners' heartbeats are "
                "written to: a live owner could look gone and its claims dead; name that table"
            )
        if row[16] != relation[16]:  # no `schema`: the search_path found another schema's
            raise SchemaMismatch(
                f"{what} is found in schema {row[16]}, not in {relation[16]} beside the claims: "
                f"another application's owners may be read; set schema: {relation[16]}"
            )
        _check_lineage(row[11:15], what)
        _check_rows_visible(row, owners_label)
        owner_types, beat = dict(row[19]), owners.heartbeat_column
        needed = [c for c in ("id", owners.lock_type_column) if c]
        beat_type = owner_types.get(beat, "")
        if any(c not in owner_types for c in needed) or not _TIME_TYPE.fullmatch(beat_type):
            raise SchemaMismatch(
                f"table {owners_label} lacks {', '.join(needed)} or a timestamp column {beat}, "
                f"which decide whether the owner of a claim in {label} is alive"
            )
        _check_instant(contract, beat, "the owners' heartbeat", owners_label, beat_type, str(zone))
    if contract.claim_rule in presets.ADVISORY_LOCK_RULES and not locks_readable:
        # Que, good_job: claims are advisory locks, which only pg_locks shows: name the grant.
        raise SchemaMismatch(
            f"the guard's role cannot read pg_catalog.pg_locks, where the claims of "
            f"{label} are (advisory locks); GRANT SELECT ON pg_catalog.pg_locks TO "
            "<guard role> (and EXECUTE ON FUNCTION pg_catalog.pg_lock_status())"
        )
    types = dict(relation[19])
    for key, column in contract.columns().items():
        if column not in types:
            raise SchemaMismatch(f"column {column} ({key}) does not exist in table {label}")
    # The contract keys of the judged table's columns read as instants (pg-boss's heartbeat too).
    for key in ("claimed_at_column", "lease.expires_at_column", "preset heartbeat_on"):
        if instant := contract.columns().get(key):
            _check_instant(contract, instant, key, label, types[instant], str(zone))
    status_column = StatusColumn(enum_labels=None, not_null=True, index_key=None)
    if contract.has_status_column:
        is_enum, labels, not_null, index_key, type_oid = relation[20:]
        for key in ("claimed_statuses", "queued_statuses", "finished_statuses") if is_enum else ():
            if missing := [s for s in getattr(contract, key) or () if s not in labels]:
                raise ConfigError(  # a configured status its enum cannot hold: a usage error
                    f"{key} names {_shown(missing)}, not a label of the enum type of column "
                    f"{contract.status_column} in table {label} (its labels: {_shown(labels)})"
                )
        enum = tuple(labels) if is_enum else None
        status_column = StatusColumn(enum, not_null, index_key, type_oid if is_enum else None)
    # No `schema`: the application's search_path (another role's, "$user") may find a namesake.
    if contract.schema is None and relation[18] is not None:
        raise SchemaMismatch(
            f"table {label} is found in schema {relation[17]} along the guard's "
            f"search_path, but schema(s) {relation[18]} also hold a table of that name: the "
            "application's search_path may find another one, whose live claims the guard "
            "would not see; set schema to the one the application writes"
        )
    return status_column


def _check_instant(
    contract: Contract, column: str, key: str, label: str, column_type: str, database_zone: str
) -> None:
    """A column read as an instant is a timestamp; one without time zone needs a declared zone."""
    if not _TIME_TYPE.fullmatch(column_type):
        raise SchemaMismatch(
            f"column {column} ({key}) of table {label} has type {column_type}, expected a timestamp"
        )
    if contract.timestamp_zone is None and column_type.endswith("without time zone"):
        raise SchemaMismatch(
            f"column {column} ({key}) of table {label} is a timestamp without time zone and the "
            "contract declares no timestamp_zone: the guard cannot know the zone it was written "
            f"in (this database's TimeZone is {database_zone}, which the writer may not have "
            "used; a wrong zone shifts every claim by hours); set timestamp_zone to the zone "
            "the application writes it in"
        )


def _kind_name(kind: object) -> str:
    return _KIND_NAMES.get(str(kind), f"a relation of kind {kind!r}")


def _check_lineage(lineage: tuple[Any, ...], what: str) -> None:
    """A part of a table (a partition, a child), foreign or subscribed rows: refused by name."""
    parent, partition, foreign, subscribed = lineage
    if parent is not None:
        part = "a partition" if partition else "an inheritance child"
        raise SchemaMismatch(
            f"{what} is {part} of {parent}: it holds only some of the rows, and live work "
            f"in the others would be missed; name {parent}, which holds them all"
        )
    if foreign is not None:
        raise SchemaMismatch(
            f"{what} has partitions or inheritance children that are foreign tables "
            f"({foreign}): their rows are another server's, whose live work the guard cannot "
            "vouch for from here; judge the database that holds them"
        )
    if subscribed is not None:
        raise NotPrimary(
            f"{what} is a logical replication subscriber's copy ({subscribed} in "
            "pg_subscription_rel): it applies the publisher's claims late, or not at all while "
            "the subscription is disabled, so it cannot say what is live now; point the "
            "guard at the publisher"
        )


def _check_rows_visible(relation: tuple[Any, ...], label: str) -> None:
    """Fail when row-level security would hide rows (live work) from the guard's role."""
    active, owns, shows_all = relation[8:11]
    if not active or shows_all:
        return
    why = "forces row-level security on its owner too" if owns else "has row-level security"
    raise SchemaMismatch(
        f"table {label} {why}, so the guard's role could see only some of its rows and "
        "miss live work; let the role bypass it (ALTER ROLE <guard role> BYPASSRLS) or add "
        "a policy that shows it every row (CREATE POLICY leaseguard_read ON "
        f"{label} FOR SELECT TO <guard role> USING (true))"
    )


def quoted_status(value: object) -> str:
    """A status as a message names it: JSON-quoted, cut to 64 characters; NULL."""
    if value is None:
        return "NULL"
    text = str(value)
    return json.dumps(text[:64] + ("..." if len(text) > 64 else ""), ensure_ascii=False)


def _shown(values: list[str]) -> str:
    shown = ", ".join(quoted_status(v) for v in values[:10])
    return shown + (", ..." if len(values) > 10 else "")
