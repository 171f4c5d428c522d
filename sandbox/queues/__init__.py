"""Stock schemas of real job queues, created from the systems' own migration files.

- river.sql: River's job table and state enum, reconstructed by hand from riverqueue/river
  riverdriver/riverpgxv5/migration/main/*.up.sql (commit
  fdf6cdf12567a5b70c003f5ff850273f09e7efcf): only what the guard reads (see its header).
- graphile_worker.sql: our reconstruction of graphile-worker's _private_jobs, _private_tasks
  and _private_job_queues (RLS on, no policy), from graphile/worker sql/000011.sql and
  000016.sql (see the file's header), plus a two-argument add_job of our own for the tests.
- pg_boss.sql: our reconstruction of pg-boss's schema 37 job table (PARTITION BY LIST (name),
  its DEFAULT partition job_common), from timgit/pg-boss src/plans.ts (see the file's header);
  create_pg_boss adds a partition per queue as pgboss.create_queue does.
- oban/oban_jobs.sql: Oban's job table and state enum, reconstructed by hand from
  oban-bg/oban's Ecto migrations V01..V14 (see its header).
- que.sql: Que's que_jobs at schema version 7, reconstructed by hand from que-rb/que
  lib/que/migrations/N/up.sql (commit 17fb2c3b75b37599bf17043dbb692555f582f249, Que 2.4.1):
  only what the guard reads, and the version comment Que::Migrations keeps (see its header).
- good_job/create_good_jobs.rb.erb: bensheldon/good_job lib/generators/good_job/templates/
  install/migrations/create_good_jobs.rb.erb, verbatim (commit
  81db22b7cfde2579b2d735e076fa6eaacc65affa, good_job 4.19.2). An ActiveRecord migration,
  not SQL: `good_job_ddl` renders it as ActiveRecord 7's PostgreSQL adapter does (uuid ids
  defaulting to gen_random_uuid(), `t.datetime` and `t.timestamps` as `timestamp(6)`
  without time zone, `limit: 2` as smallint, add_index with its where/order/using/name),
  for the statements this file uses.
- solid_queue/queue_schema.rb: rails/solid_queue lib/generators/solid_queue/install/
  templates/db/queue_schema.rb, verbatim (commit 29e818d9c1181195736ffc5d7c1d1c03757b7752).
  It is an ActiveRecord schema, not SQL: `solid_queue_ddl` renders it as ActiveRecord 7.1's
  PostgreSQL adapter does (bigserial id, `t.datetime` as `timestamp(6)` without time zone,
  `t.string` as varchar), for the few statements this file uses.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

HERE = Path(__file__).parent


def create_river(conn: psycopg.Connection[Any]) -> None:
    """River's job table, in the search path's schema (as River's default schema is)."""
    conn.execute((HERE / "river.sql").read_text())


def create_oban(conn: psycopg.Connection[Any]) -> None:
    conn.execute((HERE / "oban" / "oban_jobs.sql").read_text())


def create_graphile_worker(conn: psycopg.Connection[Any]) -> None:
    conn.execute((HERE / "graphile_worker.sql").read_text())


# The indexes src/plans.ts createQueueFunction gives a queue's partition under the standard
# policy, named as its job_table_format names them (job_iN -> <partition>_iN).
_PG_BOSS_QUEUE_INDEXES = {
    "i5": "CREATE INDEX {index} ON {table} (name, start_after)"
    " WHERE state < 'active' AND NOT blocked",
    "i4": "CREATE UNIQUE INDEX {index} ON {table} (name, singleton_on, COALESCE(singleton_key, ''))"
    " WHERE state <> 'cancelled' AND singleton_on IS NOT NULL",
    "i7": "CREATE INDEX {index} ON {table} (name, group_id)"
    " WHERE state = 'active' AND group_id IS NOT NULL",
    "i9": "CREATE INDEX {index} ON {table} (name, id) WHERE blocking AND state = 'completed'",
}


def create_pg_boss(conn: psycopg.Connection[Any], queues: tuple[str, ...] = ("q1",)) -> None:
    """The schema, then each queue as pgboss.create_queue makes a partitioned one: a table
    named 'j' + sha224(name) in hex, its indexes, a partition FOR VALUES IN (name)."""
    conn.execute((HERE / "pg_boss.sql").read_text())
    for name in queues:
        partition = "j" + hashlib.sha224(name.encode()).hexdigest()
        table = sql.Identifier("pgboss", partition)
        conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF pgboss.job FOR VALUES IN ({})").format(
                table, sql.Literal(name)
            )
        )
        for suffix, statement in _PG_BOSS_QUEUE_INDEXES.items():
            index = sql.Identifier(f"{partition}_{suffix}")
            conn.execute(sql.SQL(statement).format(index=index, table=table))


# ActiveRecord 7.1's PostgreSQL column types for the `t.<type>` calls queue_schema.rb uses.
_AR_TYPES = {
    "bigint": "bigint",
    "integer": "integer",
    "string": "character varying",
    "text": "text",
    "boolean": "boolean",
    "datetime": "timestamp(6) without time zone",
}
_TABLE = re.compile(r'^\s*create_table "(\w+)"')
_COLUMN = re.compile(r'^\s*t\.(\w+) "(\w+)"(.*)$')
_INDEX = re.compile(r'^\s*t\.index \[([^\]]*)\], name: "(\w+)"(, unique: true)?')
_FOREIGN_KEY = re.compile(
    r'^\s*add_foreign_key "(\w+)", "(\w+)", column: "(\w+)", on_delete: :cascade'
)


def solid_queue_ddl(schema_rb: str) -> str:
    """queue_schema.rb as the DDL ActiveRecord runs for it on PostgreSQL."""
    statements: list[str] = []
    columns: list[str] = []
    indexes: list[str] = []
    table = ""
    for line in schema_rb.splitlines():
        if match := _TABLE.match(line):
            table, columns, indexes = match[1], ["id bigserial PRIMARY KEY"], []
        elif table and (match := _INDEX.match(line)):
            keys = ", ".join(re.findall(r'"(\w+)"', match[1]))
            unique = "UNIQUE " if match[3] else ""
            indexes.append(f"CREATE {unique}INDEX {match[2]} ON {table} ({keys})")
        elif table and (match := _COLUMN.match(line)):
            columns.append(_column(match[1], match[2], match[3]))
        elif table and line.strip() == "end":
            statements += [f"CREATE TABLE {table} ({', '.join(columns)})", *indexes]
            table = ""
        elif match := _FOREIGN_KEY.match(line):
            statements.append(
                f"ALTER TABLE {match[1]} ADD FOREIGN KEY ({match[3]}) "
                f"REFERENCES {match[2]} (id) ON DELETE CASCADE"
            )
    return "".join(f"{statement};\n" for statement in statements)


def _column(kind: str, name: str, options: str) -> str:
    """One `t.<kind> "name", null: false, default: X, limit: N` as a column definition."""
    limit = re.search(r"limit: (\d+)", options)
    column_type = f"character varying({limit[1]})" if limit else _AR_TYPES[kind]
    column = f"{name} {column_type}"
    if default := re.search(r"default: (\w+)", options):
        column += f" DEFAULT {default[1]}"
    if "null: false" in options:
        column += " NOT NULL"
    return column


def create_solid_queue(conn: psycopg.Connection[Any]) -> None:
    """Solid Queue's tables, in the public schema (its default: the app's own database)."""
    conn.execute(solid_queue_ddl((HERE / "solid_queue" / "queue_schema.rb").read_text()))


def create_que(conn: psycopg.Connection[Any]) -> None:
    """Que's que_jobs as schema version 7 leaves it, in the public schema."""
    conn.execute((HERE / "que.sql").read_text())


# ActiveRecord 7's PostgreSQL types for the `t.<type> :name` calls of good_job's migration.
_AR_MIGRATION_TYPES = {**_AR_TYPES, "uuid": "uuid", "jsonb": "jsonb", "interval": "interval"}
_CREATE = re.compile(r"^create_table :(\w+), id: :uuid do \|t\|$")
_MIGRATION_COLUMN = re.compile(r"^t\.(\w+) :(\w+)(.*)$")
_ADD_INDEX = re.compile(r"^add_index :(\w+), (\[[^\]]*\]|:\w+)(.*)$")


def good_job_ddl(migration_rb: str) -> str:
    """good_job's install migration as the DDL ActiveRecord runs for it on PostgreSQL."""
    statements: list[str] = []
    columns: list[str] = []
    indexes: list[str] = []
    table = ""
    for line in _logical_lines(migration_rb):
        if match := _CREATE.match(line):
            table, columns = match[1], ["id uuid DEFAULT gen_random_uuid() PRIMARY KEY"]
        elif table and line == "t.timestamps":
            columns += [f"{c} timestamp(6) without time zone NOT NULL" for c in _TIMESTAMPS]
        elif table and line.startswith("t.index "):
            indexes.append(_add_index(table, re.findall(r":(\w+)", line)[:1], line))
        elif table and (match := _MIGRATION_COLUMN.match(line)):
            columns.append(_migration_column(match[1], match[2], match[3]))
        elif table and line == "end":
            statements += [f"CREATE TABLE {table} ({', '.join(columns)})", *indexes]
            table, indexes = "", []
        elif match := _ADD_INDEX.match(line):
            statements.append(_add_index(match[1], re.findall(r":(\w+)", match[2]), match[3]))
    return "".join(f"{statement};\n" for statement in statements)


_TIMESTAMPS = ("created_at", "updated_at")


def _logical_lines(ruby: str) -> list[str]:
    """Stripped lines, a statement continued after a trailing comma joined into one."""
    lines: list[str] = []
    for raw in ruby.splitlines():
        line = raw.strip()
        if lines and lines[-1].endswith(","):
            lines[-1] += " " + line
        else:
            lines.append(line)
    return lines


def _migration_column(kind: str, name: str, options: str) -> str:
    """`t.<kind> :name, limit: 2, array: true, null: false` as a column definition."""
    column_type = "smallint" if "limit: 2" in options else _AR_MIGRATION_TYPES[kind]
    column = f"{name} {column_type}{'[]' if 'array: true' in options else ''}"
    return column + (" NOT NULL" if "null: false" in options else "")


def _add_index(table: str, keys: list[str], options: str) -> str:
    """`add_index :table, [:a, :b], where: "...", name: :n, order: {...}, using: :gin`."""
    name = re.search(r'name: :?"?(\w+)"?', options)
    order = re.search(r"order: \{([^}]*)\}", options)
    orders = {
        key: (text or symbol).upper()
        for key, text, symbol in re.findall(
            r'(\w+): (?:"([^"]+)"|:(\w+))', order[1] if order else ""
        )
    }
    parts = [f"{key} {orders[key]}" if key in orders else key for key in keys]
    using = re.search(r"using: :(\w+)", options)
    where = re.search(r'where: "([^"]+)"', options)
    index = name[1] if name else f"index_{table}_on_{'_and_'.join(keys)}"
    unique = "UNIQUE " if "unique: true" in options else ""
    return (
        f"CREATE {unique}INDEX {index} ON {table}{f' USING {using[1]}' if using else ''} "
        f"({', '.join(parts)}){f' WHERE {where[1]}' if where else ''}"
    )


def create_good_job(conn: psycopg.Connection[Any]) -> None:
    """good_job's tables, in the public schema (its default: the app's own database)."""
    conn.execute(good_job_ddl((HERE / "good_job" / "create_good_jobs.rb.erb").read_text()))
