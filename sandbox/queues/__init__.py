"""Stock schemas of real job queues, created from the systems' own migration files.

- river/: riverqueue/river riverdriver/riverpgxv5/migration/main/*.up.sql, verbatim (commit
  fdf6cdf12567a5b70c003f5ff850273f09e7efcf); `/* TEMPLATE: schema */` is replaced with
  nothing, as River's migrator does for its default (search_path) schema.
- graphile_worker/: graphile/worker sql/0000NN.sql, verbatim (commit
  abfb4cff30747ad423046d117dfb88470f03ae00); `:GRAPHILE_WORKER_SCHEMA` is replaced as
  src/migrate.ts does, after its installSchema bootstrap (schema + migrations table).
- pg_boss/create.sql: pg-boss's schema 37 exactly as its own src/plans.ts create() renders
  it (bundled with esbuild, run with node; see the file's header): pg-boss keeps its DDL in
  TypeScript, not in SQL files.
- oban/oban_jobs.sql: translated by hand from Oban's Ecto migrations V01..V14 (see the file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).parent


def create_river(conn: psycopg.Connection[Any]) -> None:
    for path in sorted((HERE / "river").glob("*.up.sql")):
        text = path.read_text().replace("/* TEMPLATE: schema */", "")
        conn.execute(text)


def create_oban(conn: psycopg.Connection[Any]) -> None:
    conn.execute((HERE / "oban" / "oban_jobs.sql").read_text())


GRAPHILE_SCHEMA = "graphile_worker"
# graphile/worker src/migrate.ts installSchema, before the numbered migrations.
_GRAPHILE_BOOTSTRAP = """
create schema if not exists graphile_worker;
create table if not exists graphile_worker.migrations(
  id int primary key,
  ts timestamptz default now() not null
);
alter table graphile_worker.migrations add column if not exists breaking boolean not null
  default false;
"""


def create_graphile_worker(conn: psycopg.Connection[Any]) -> None:
    conn.execute(_GRAPHILE_BOOTSTRAP)
    for number, path in enumerate(sorted((HERE / "graphile_worker").glob("*.sql")), start=1):
        text = path.read_text().replace(":GRAPHILE_WORKER_SCHEMA", GRAPHILE_SCHEMA)
        with conn.transaction():
            conn.execute(text)
            conn.execute("insert into graphile_worker.migrations (id) values (%s)", (number,))


def create_pg_boss(conn: psycopg.Connection[Any], queues: tuple[str, ...] = ("q1",)) -> None:
    """The schema, then queues through pgboss.create_queue: partitioned ones get a table."""
    conn.execute((HERE / "pg_boss" / "create.sql").read_text())
    for name in queues:
        conn.execute(
            "SELECT pgboss.create_queue(%s, %s::jsonb)",
            (name, '{"policy": "standard", "partition": true}'),
        )
