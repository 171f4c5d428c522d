"""The catalog queries of the guard's pre-flight: what the named relation is, on which
server, its columns, and whether row-level security could hide rows from the guard.

A relation is found by name (`to_regclass`: one that is gone yields NULL, never an error).
Every value is a bound parameter; these queries name no table of the contract's.
"""

from __future__ import annotations

from psycopg import sql


def relation_query() -> sql.SQL:
    """The relation's oid and kind, whether the server is a standby, and the TimeZone a
    session starts with (the database's or role's), for the naive-timestamp message.

    Always one row: the oid and kind are NULL when no relation has the name.
    """
    return sql.SQL(
        """
        SELECT r.oid, c.relkind::text, pg_catalog.pg_is_in_recovery(),
               (SELECT s.reset_val FROM pg_catalog.pg_settings AS s WHERE s.name = 'TimeZone'),
               current_database(), host(inet_server_addr()), inet_server_port()
        FROM (SELECT to_regclass(%(relation)s)::oid AS oid) AS r
        LEFT JOIN pg_catalog.pg_class AS c ON c.oid = r.oid
        """
    )


def columns_query() -> sql.SQL:
    """The columns of a relation and their types, for the pre-flight schema check."""
    return sql.SQL(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_attribute a
        WHERE a.attrelid = to_regclass(%(relation)s) AND a.attnum > 0 AND NOT a.attisdropped
        """
    )


def rls_query() -> sql.SQL:
    """Whether row-level security applies to the current role on a relation, and why.

    row_security_active() is PostgreSQL's own answer (RLS enabled, and the role is neither a
    superuser, nor BYPASSRLS, nor the owner of a table that does not FORCE it): no view of
    the roles to expand. The second column only words the message: whether the role owns
    the table (then the table forces RLS on its owner).
    """
    return sql.SQL(
        """
        SELECT row_security_active(c.oid), pg_has_role(current_user, c.relowner, 'USAGE')
        FROM pg_class c
        WHERE c.oid = to_regclass(%(relation)s)
        """
    )


def policies_show_all_query() -> sql.SQL:
    """Whether a relation's policies show the current role every row (asked only where
    row-level security applies to it).

    A permissive policy `FOR SELECT ... USING (true)` that applies to the role (polroles
    {0} is PUBLIC), with no restrictive policy beside it, shows every row.
    """
    return sql.SQL(
        """
        SELECT EXISTS (
                   SELECT 1 FROM pg_policy p
                   WHERE p.polrelid = c.oid AND p.polpermissive
                     AND p.polcmd IN ('r', '*')
                     AND pg_get_expr(p.polqual, p.polrelid) = 'true'
                     AND (p.polroles = '{0}'::oid[]
                          OR EXISTS (SELECT 1 FROM unnest(p.polroles) AS pr(oid)
                                     WHERE pg_has_role(current_user, pr.oid, 'USAGE')))
               ) AND NOT EXISTS (
                   SELECT 1 FROM pg_policy p
                   WHERE p.polrelid = c.oid AND NOT p.polpermissive
               )
        FROM pg_class c
        WHERE c.oid = to_regclass(%(relation)s)
        """
    )


# A view named security_invoker reads its base tables with the privileges (and under the
# row-level security) of the role that queries it; any other view with its owner's.
_INVOKER = sql.SQL(
    "EXISTS (SELECT FROM pg_catalog.pg_options_to_table(c.reloptions) AS o "
    "WHERE o.option_name = 'security_invoker' "
    "AND lower(o.option_value) IN ('true', 'on', 'yes', '1', 't', 'y'))"
)


def view_bases_query() -> sql.Composed:
    """Every relation a view reads, through the views it reads in turn (pg_rewrite's
    dependencies in pg_depend), other than views, with each role that reads it: the
    guard's own, and the owner of every view on the way that is not security_invoker.
    Per pair: whether row-level security limits that role on it, and whether a policy
    still shows that role every row (as `policies_show_all_query`).

    Checking every owner against every base table asks more than PostgreSQL would (a base
    table is read by the owner of the view that names it only): more refusals, never fewer.
    """
    return sql.SQL(
        """
        WITH RECURSIVE rel(oid) AS (
            SELECT to_regclass(%(relation)s)::oid
          UNION
            SELECT d.refobjid
            FROM rel
            JOIN pg_catalog.pg_rewrite AS w ON w.ev_class = rel.oid
            JOIN pg_catalog.pg_depend AS d
              ON d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid = w.oid
             AND d.refclassid = 'pg_catalog.pg_class'::regclass AND d.refobjid <> rel.oid
        ), readers(oid) AS (
            SELECT a.oid FROM pg_catalog.pg_roles AS a WHERE a.rolname = current_user
          UNION
            SELECT c.relowner FROM rel JOIN pg_catalog.pg_class AS c ON c.oid = rel.oid
            WHERE c.relkind = 'v' AND NOT {invoker}
        )
        SELECT c.oid::regclass::text, c.relkind::text, a.rolname::text,
               c.relrowsecurity AND NOT a.rolsuper AND NOT a.rolbypassrls
                 AND (c.relforcerowsecurity OR NOT pg_has_role(a.oid, c.relowner, 'USAGE')),
               EXISTS (
                   SELECT FROM pg_catalog.pg_policy AS p
                   WHERE p.polrelid = c.oid AND p.polpermissive AND p.polcmd IN ('r', '*')
                     AND pg_get_expr(p.polqual, p.polrelid) = 'true'
                     AND (p.polroles = '{{0}}'::oid[]
                          OR EXISTS (SELECT FROM unnest(p.polroles) AS pr(oid)
                                     WHERE pg_has_role(a.oid, pr.oid, 'USAGE')))
               ) AND NOT EXISTS (
                   SELECT FROM pg_catalog.pg_policy AS p
                   WHERE p.polrelid = c.oid AND NOT p.polpermissive
               )
        FROM rel
        JOIN pg_catalog.pg_class AS c ON c.oid = rel.oid
        CROSS JOIN readers
        JOIN pg_catalog.pg_roles AS a ON a.oid = readers.oid
        WHERE c.relkind <> 'v'
        ORDER BY 1, 3
        """
    ).format(invoker=_INVOKER)
