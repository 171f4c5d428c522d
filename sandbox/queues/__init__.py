"""Stock schemas of real job queues: our own DDL, reconstructed from each system's source.

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
- good_job.sql: good_job 4.19.2's good_jobs and good_job_processes, reconstructed by hand
  from its install migration as ActiveRecord creates it (see the file's header).
- procrastinate.sql: procrastinate 3.x's procrastinate_jobs and procrastinate_workers,
  reconstructed by hand from its procrastinate/sql/schema.sql (see the file's header).
- pgmq.sql: a pgmq 1.11 queue's message table pgmq.q_jobs, reconstructed by hand from
  pgmq-extension/sql/pgmq.sql's create_non_partitioned (see the file's header).
- solid_queue.sql: Solid Queue's jobs, processes, claimed and ready executions,
  reconstructed by hand from its queue_schema.rb as ActiveRecord creates it (see the file's
  header).
"""

from __future__ import annotations

import hashlib
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


def create_solid_queue(conn: psycopg.Connection[Any]) -> None:
    """Solid Queue's tables, in the public schema (its default: the app's own database)."""
    conn.execute((HERE / "solid_queue.sql").read_text())


def create_que(conn: psycopg.Connection[Any]) -> None:
    """Que's que_jobs as schema version 7 leaves it, in the public schema."""
    conn.execute((HERE / "que.sql").read_text())


def create_good_job(conn: psycopg.Connection[Any]) -> None:
    """good_job's tables, in the public schema (its default: the app's own database)."""
    conn.execute((HERE / "good_job.sql").read_text())


def create_procrastinate(conn: psycopg.Connection[Any]) -> None:
    """procrastinate's tables, in the search path's schema (procrastinate's default)."""
    conn.execute((HERE / "procrastinate.sql").read_text())


def create_pgmq(conn: psycopg.Connection[Any]) -> None:
    """The schema pgmq with one queue, `jobs` (pgmq.q_jobs), as pgmq.create('jobs') makes it."""
    conn.execute((HERE / "pgmq.sql").read_text())
