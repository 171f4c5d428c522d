"""Item 7: one `leaseguard check` per preset, on the queue's stock schema, at 10^4 and 10^6 rows.

    .venv/bin/python -m benchmarks.bench_presets [--rows 1000000] [--repeat 15]

Each queue's stock schema is created by sandbox/queues (see its docstring). The table
grows with history the way each system keeps it (River, Oban, pg-boss: completed rows;
graphile-worker deletes completed jobs, so its history is permanently failed, exhausted
jobs; Solid Queue: finished jobs, its claims table holding only the live claims; Que:
finished and expired jobs, the live ones locked by a second session; good_job: finished
jobs), beside 10 live and 10 queued jobs. The guard reads through the queue's own index
where it has one (River, Oban: `(state, queue, priority, ...)`); pg-boss and
graphile-worker have none for it, so the statements `leaseguard index-sql --dsn` prints are
applied first (pg-boss: per partition). Figures: the median wall time of a whole check
(`GuardSession.judge()`: pre-flight + judgment on an open connection) and of the guard
query alone on the server (EXPLAIN ANALYZE planning + execution), and the plan's scans.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.common import markdown_table
from benchmarks.infra import create_database, drop_database
from leaseguard.adapters.indexing import index_advice, index_needed
from leaseguard.core.contract import Contract, contract_from_mapping
from leaseguard.core.predicate import counts_query, predicate_params
from leaseguard.orchestration.session import local_session
from sandbox.pgcluster import PG_BASE_DIR, PgCluster
from sandbox.queues import (
    create_good_job,
    create_graphile_worker,
    create_oban,
    create_pg_boss,
    create_que,
    create_river,
    create_solid_queue,
)

LIVE = 10


def _river(conn: psycopg.Connection[Any], history: int) -> None:
    create_river(conn)
    conn.execute(
        "INSERT INTO river_job (state, attempted_at, finalized_at, kind, args, max_attempts) "
        "SELECT 'completed', now() - interval '1 day', now(), 'k', '{}', 25 "
        "FROM generate_series(1, %s)",
        (history,),
    )
    conn.execute(
        "INSERT INTO river_job (state, attempted_at, kind, args, max_attempts) "
        "SELECT s, CASE s WHEN 'running' THEN now() END, 'k', '{}', 25 "
        "FROM generate_series(1, %s), unnest(ARRAY['running', 'available']::river_job_state[]) s",
        (LIVE,),
    )


def _oban(conn: psycopg.Connection[Any], history: int) -> None:
    create_oban(conn)
    conn.execute(
        "INSERT INTO oban_jobs (state, worker, attempted_at, completed_at) "
        "SELECT 'completed', 'W', timezone('UTC', now()) - interval '1 day', "
        "timezone('UTC', now()) FROM generate_series(1, %s)",
        (history,),
    )
    conn.execute(
        "INSERT INTO oban_jobs (state, worker, attempted_at) "
        "SELECT s, 'W', CASE s WHEN 'executing' THEN timezone('UTC', now()) END "
        "FROM generate_series(1, %s), unnest(ARRAY['executing', 'available']::oban_job_state[]) s",
        (LIVE,),
    )


def _pg_boss(conn: psycopg.Connection[Any], history: int) -> None:
    create_pg_boss(conn, ("q1", "q2"))
    conn.execute(
        "INSERT INTO pgboss.job (name, state, started_on, completed_on) "
        "SELECT 'q' || (1 + g %% 2), 'completed', now() - interval '1 day', now() "
        "FROM generate_series(1, %s) g",
        (history,),
    )
    conn.execute(
        "INSERT INTO pgboss.job (name, state, started_on) "
        "SELECT 'q1', s, CASE s WHEN 'active' THEN now() END "
        "FROM generate_series(1, %s), unnest(ARRAY['active', 'created']::pgboss.job_state[]) s",
        (LIVE,),
    )


def _graphile(conn: psycopg.Connection[Any], history: int) -> None:
    create_graphile_worker(conn)
    conn.execute("SELECT graphile_worker.add_job('task')")
    conn.execute(
        "INSERT INTO graphile_worker._private_jobs (task_id, attempts, max_attempts) "
        "SELECT (SELECT id FROM graphile_worker._private_tasks LIMIT 1), 1, 1 "
        "FROM generate_series(1, %s)",
        (history,),
    )
    conn.execute(
        "UPDATE graphile_worker._private_jobs SET locked_at = now(), attempts = 1 "
        "WHERE attempts = 0"
    )
    conn.execute(
        "INSERT INTO graphile_worker._private_jobs (task_id, locked_at, attempts, max_attempts) "
        "SELECT (SELECT id FROM graphile_worker._private_tasks LIMIT 1), "
        "CASE WHEN g <= %s THEN now() END, CASE WHEN g <= %s THEN 1 ELSE 0 END, 25 "
        "FROM generate_series(1, %s) g",
        (LIVE - 1, LIVE - 1, 2 * LIVE - 1),
    )


def _solid_queue(conn: psycopg.Connection[Any], history: int) -> None:
    """History is finished jobs; the claims table holds only the live claims (its design)."""
    create_solid_queue(conn)
    conn.execute(
        "INSERT INTO solid_queue_jobs (queue_name, class_name, finished_at, created_at, "
        "updated_at) SELECT 'default', 'Job', timezone('UTC', now()), "
        "timezone('UTC', now()) - interval '1 day', timezone('UTC', now()) "
        "FROM generate_series(1, %s)",
        (history,),
    )
    [worker] = conn.execute(
        "INSERT INTO solid_queue_processes (kind, last_heartbeat_at, pid, name, created_at) "
        "VALUES ('Worker', timezone('UTC', now()), 1, 'worker', timezone('UTC', now())) "
        "RETURNING id"
    ).fetchone()  # type: ignore[misc]
    conn.execute(
        "WITH j AS (INSERT INTO solid_queue_jobs (queue_name, class_name, created_at, "
        "updated_at) SELECT 'default', 'Job', timezone('UTC', now()), timezone('UTC', now()) "
        "FROM generate_series(1, %s) RETURNING id) "
        "INSERT INTO solid_queue_claimed_executions (job_id, process_id, created_at) "
        "SELECT id, %s, timezone('UTC', now()) FROM j",
        (LIVE, worker),
    )


def _que(conn: psycopg.Connection[Any], history: int) -> None:
    """History is finished and expired jobs (Que destroys succeeded ones by default); the
    live jobs' locks are held by a second session for the whole measurement (_held_locks)."""
    create_que(conn)
    conn.execute(
        "INSERT INTO que_jobs (job_class, job_schema_version, finished_at, expired_at) "
        "SELECT 'Job', 2, CASE WHEN g %% 2 = 0 THEN now() END, "
        "CASE WHEN g %% 2 = 1 THEN now() END FROM generate_series(1, %s) g",
        (history,),
    )
    conn.execute(
        "INSERT INTO que_jobs (job_class, job_schema_version) "
        "SELECT 'Job', 2 FROM generate_series(1, %s)",
        (2 * LIVE,),
    )


def _good_job(conn: psycopg.Connection[Any], history: int) -> None:
    """History is finished jobs (preserve_job_records); the live ones are locked by a
    beating process, half of them also by their advisory lock (_held_locks)."""
    create_good_job(conn)
    conn.execute(
        "INSERT INTO good_jobs (queue_name, job_class, created_at, updated_at, finished_at) "
        "SELECT 'default', 'Job', timezone('UTC', now()), timezone('UTC', now()), "
        "timezone('UTC', now()) FROM generate_series(1, %s)",
        (history,),
    )
    [worker] = conn.execute(
        "INSERT INTO good_job_processes (created_at, updated_at, state) VALUES "
        "(timezone('UTC', now()), timezone('UTC', now()), '{}') RETURNING id"
    ).fetchone()  # type: ignore[misc]
    conn.execute(
        "INSERT INTO good_jobs (queue_name, job_class, created_at, updated_at, locked_by_id, "
        "locked_at) SELECT 'default', 'Job', timezone('UTC', now()), timezone('UTC', now()), "
        "CASE WHEN g <= %s THEN %s::uuid END, CASE WHEN g <= %s THEN timezone('UTC', now()) END "
        "FROM generate_series(1, %s) g",
        (LIVE, worker, LIVE, 2 * LIVE),
    )


# The advisory locks a worker holds on its live jobs (Que: the id; good_job: its md5 key).
_HELD_LOCKS = {
    "que": "SELECT pg_advisory_lock(id) FROM que_jobs WHERE finished_at IS NULL "
    "AND expired_at IS NULL ORDER BY id LIMIT %s",
    "good_job": "SELECT pg_advisory_lock(('x' || substr(md5('good_jobs-' || id::text), 1, 16))"
    "::bit(64)::bigint) FROM good_jobs WHERE locked_by_id IS NOT NULL LIMIT %s",
}


@contextlib.contextmanager
def _held_locks(cluster: PgCluster, name: str, preset: str) -> Iterator[None]:
    """A second session holding the preset's live jobs' locks, as a worker would."""
    if preset not in _HELD_LOCKS:
        yield
        return
    with cluster.connect(name) as worker:
        worker.execute(_HELD_LOCKS[preset], (LIVE if preset == "que" else LIVE // 2,))
        yield


PRESETS: dict[str, Callable[[psycopg.Connection[Any], int], None]] = {
    "river": _river,
    "oban": _oban,
    "pg-boss": _pg_boss,
    "graphile_worker": _graphile,
    "solid_queue": _solid_queue,
    "que": _que,
    "good_job": _good_job,
}


def measure(cluster: PgCluster, preset: str, history: int, repeat: int) -> dict[str, Any]:
    contract = contract_from_mapping({"preset": preset})
    name = f"bench_presets_{secrets.token_hex(4)}"
    create_database(cluster, name)
    try:
        return _measure(cluster, name, contract, preset, history, repeat)
    finally:
        drop_database(cluster, name)


def _measure(
    cluster: PgCluster, name: str, contract: Contract, preset: str, history: int, repeat: int
) -> dict[str, Any]:
    started = datetime.now(UTC) - timedelta(days=2)
    with cluster.connect(name) as conn:
        PRESETS[preset](conn, history)
        advice = index_advice(conn, contract)  # type: ignore[arg-type]
        for statement in advice:
            if not statement.startswith("--"):
                conn.execute(statement)  # type: ignore[arg-type]
        conn.execute(
            sql.SQL("ANALYZE {}").format(
                sql.Identifier(contract.schema or "public", contract.table)
            )
        )
    # An index of the queue's that serves the guard as it stands (River's, Oban's), or the
    # partial index over unfinished jobs the lock presets read through (Que's, good_job's).
    own_index = any("already serve" in line or "own partial index" in line for line in advice)
    index = "queue's own" if own_index else "index-sql" if index_needed(contract) else "none"
    with (
        _held_locks(cluster, name, preset),
        local_session(contract, cluster.dsn(name), runtime_started_at=started) as session,
    ):
        verdict = session.judge()
        walls = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            session.judge()
            walls.append(time.perf_counter() - t0)
    params = predicate_params(contract, lease_s=verdict.lease_s, runtime_started_at=started)
    server, scans = [], set()
    with _held_locks(cluster, name, preset), cluster.connect(name) as conn:
        # What the guard's own transaction sets (leaseguard.adapters.db.guard_transaction).
        conn.execute("SET max_parallel_workers_per_gather = 0")
        for _ in range(repeat):
            [plan] = conn.execute(
                sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + counts_query(contract), params
            ).fetchone()
            server.append((plan[0]["Planning Time"] + plan[0]["Execution Time"]) / 1000)
            scans |= _scans(plan)
    return {
        "preset": preset,
        "rows": history + 2 * LIVE,
        "live": verdict.counts.live,
        "queued": verdict.counts.queued,
        "own_index": own_index,
        "index": index,
        "check_s": statistics.median(walls),
        "server_s": statistics.median(server),
        "scans": sorted(scans),
    }


def _scans(plan: Any) -> set[str]:
    found, stack = set(), [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if "Relation Name" in node:
                name = node.get("Index Name") or node["Relation Name"]
                # pg-boss names a partition j<sha224>: its head is enough to tell them apart.
                found.add(f"{node['Node Type']} {name if len(name) < 30 else name[:10] + '...'}")
            stack.extend(v for v in node.values() if isinstance(v, list | dict))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_presets")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    parser.add_argument("--only", default=",".join(PRESETS), help="comma-separated presets")
    args = parser.parse_args(argv)
    results = []
    with PgCluster(PG_BASE_DIR) as cluster:
        for preset in args.only.split(","):
            for history in (10_000, args.rows):
                row = measure(cluster, preset, history, args.repeat)
                print(json.dumps(row), file=sys.stderr, flush=True)
                results.append(row)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(render(results))
    return 0


def render(results: list[dict[str, Any]]) -> str:
    rows = [
        [
            r["preset"],
            f"{r['rows']:,}",
            f"{r['live']}/{r['queued']}",
            f"{r['check_s'] * 1000:.2f} ms",
            f"{r['server_s'] * 1000:.3f} ms",
            r["index"],
            ", ".join(r["scans"]),
        ]
        for r in results
    ]
    header = [
        "preset",
        "rows",
        "live/queued",
        "check (median)",
        "guard query (server)",
        "index",
        "plan",
    ]
    return markdown_table(header, rows)


if __name__ == "__main__":
    sys.exit(main())
