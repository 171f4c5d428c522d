"""Item 1: the predicate at scale - execution_runs with 10^4 .. 10^7 rows, with and without
the recommended partial index.

One table grows in place (10^4 -> 10^5 -> 10^6 -> 10^7 rows, one INSERT ... SELECT
generate_series per step, then VACUUM ANALYZE). The active set stays what a real system
has - bounded by its workers, not by its history: 8 live and 2 stale running rows and 20
open ones; the rest is done (~2% failed). At 10^4 rows that is the issue's ~0.1% running.
A last row measures 10^7 rows of which 0.1% (10^4) are running, to show what the cost
follows: the claimed rows, not the table.

At every size, first without the index (dropped), then with it (built with the statement
`leaseguard index-sql` prints): the guard query's server time (EXPLAIN ANALYZE: planning +
execution), its client time on an open connection, and a `select 1` round trip on the
same connection, interleaved with it so that both see the same machine. Two connections:
TCP to the database directly, and through the guard's own SSH tunnel
(leaseguard.adapters.ssh.database_tunnel over a fleet host's sshd) - the way `fab guard` and the
Ansible modules reach a database. Also: the whole check on an open connection
(leaseguard.adapters.guard.evaluate: budgets, schema check, counts, live claims) and whether
`leaseguard check` warns about a sequential scan.
"""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from benchmarks.common import Finding, Section, fmt_ratio, fmt_s, median, timed
from benchmarks.fleet_control import SHELL_GUARD_QUERY
from benchmarks.infra import (
    LIVE_ROWS,
    Fleet,
    create_active_rows,
    create_database,
    drop_database,
    grow_history,
    vacuum_and_index,
)
from leaseguard.adapters.db import GuardConnection, composed, set_local_limits
from leaseguard.adapters.db import connect as guard_connect
from leaseguard.adapters.guard import evaluate, judge_table, verify_schema
from leaseguard.adapters.indexing import index_name, recommended_index_sql
from leaseguard.adapters.ssh import (
    DatabaseAddress,
    SshOptions,
    database_tunnel,
    make_connection,
    open_connection,
)
from leaseguard.adapters.statuses import StatusColumn, check_statuses
from leaseguard.core.contract import Contract
from leaseguard.core.predicate import counts_query, live_claims_query, predicate_params
from leaseguard.core.verdict import TaskTimeout
from leaseguard.orchestration.session import local_session

DBNAME = "bench_scale"
SIZES = (10**4, 10**5, 10**6, 10**7)
QUICK_SIZES = (10**4, 10**5)
PROPORTIONAL_RUNNING = 0.001
CONTRACT = Contract()
# A 10^4-row copy with the index, measured beside every configuration: the flatness ratio.
REF_ROWS = 10**4
REF_CONTRACT = Contract(table="execution_runs_ref")
TIMEOUT = TaskTimeout(3600.0, "given")
LEASE_S = 7200.0
BUDGET_S = 2.5  # per measured configuration and path: as many interleaved pairs as fit
MIN_PAIRS, MAX_PAIRS = 5, 400
EXPLAINS = 5
WARM_UP_S = 0.3
PREPARED_ROUNDS = 400
TARGET_PREPARED = 2.0
TUNNEL = "SSH tunnel"
TUNNEL_NODELAY = "SSH tunnel + TCP_NODELAY"
# Item 5's control: the least judgment a poll runs, prepared, with its values bound.
SHELL_QUERY_PREPARED = "the shell guard's one query, prepared, values bound (control)"

Conn = psycopg.Connection[Any]


def run_bench(
    fleet: Fleet, *, quick: bool, log: Callable[[str], None]
) -> tuple[list[Section], list[Finding]]:
    db = fleet.db
    create_database(db, DBNAME)
    try:
        with (
            db.connect(DBNAME, socket=True) as admin,
            _paths(fleet) as paths,
        ):
            create_active_rows(admin)
            create_active_rows(admin, table=REF_CONTRACT.table)
            grow_history(admin, REF_ROWS, table=REF_CONTRACT.table)
            vacuum_and_index(admin, REF_CONTRACT)
            rows = _measure_sizes(admin, paths, QUICK_SIZES if quick else SIZES, log)
            candidate = _candidate_rewrite(paths, rows[-1]["size"])
            prepared, prepared_findings = _prepared_poll(paths, rows[-1]["size"])
            if not quick:
                rows.append(_measure_proportional(admin, paths, SIZES[-1], log))
    finally:
        drop_database(db, DBNAME)
    section, findings = _report(rows, quick=quick)
    return [section, candidate, prepared], findings + prepared_findings


@contextmanager
def _paths(fleet: Fleet) -> Iterator[dict[str, str]]:
    """conninfo per path: direct TCP; the guard's SSH tunnel via host app1 as leaseguard
    opens it; and the same with TCP_NODELAY set once more (a control: leaseguard sets it)."""
    db, host = fleet.db, fleet.hosts[0]
    direct = make_conninfo(db.dsn(dbname=DBNAME), application_name="leaseguard-bench")
    options = SshOptions(key_filename=str(fleet.key_path), known_hosts=str(fleet.known_hosts))
    address = DatabaseAddress(fleet.db_addr, db.port)
    paths = {"TCP": direct}
    with ExitStack() as stack:
        for name, nodelay in ((TUNNEL, False), (TUNNEL_NODELAY, True)):
            connection = make_connection(f"root@{host.addr}", options)
            stack.callback(connection.close)
            # As the guard opens it (Nagle off among its tuning): Fabric's own open() would
            # leave paramiko's Nagle on, and pipelined statements would wait out delayed ACKs.
            open_connection(connection)
            if nodelay:
                set_nodelay(connection)
            port = stack.enter_context(database_tunnel(connection, address))
            paths[name] = make_conninfo(direct, host="127.0.0.1", port=str(port))
        yield paths


def set_nodelay(connection: Any) -> None:
    """TCP_NODELAY on the SSH connection's socket, as OpenSSH sets it for forwardings.

    paramiko leaves Nagle's algorithm on: a query sent as two SSH packets then waits for
    the server's delayed ACK (40 ms on Linux) before the second one leaves.
    """
    sock = connection.client.get_transport().sock
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _measure_sizes(
    admin: Conn, paths: dict[str, str], sizes: tuple[int, ...], log: Callable[[str], None]
) -> list[dict[str, Any]]:
    rows = []
    for size in sizes:
        admin.execute(
            sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index_name(CONTRACT)))
        )
        load_s = timed(lambda size=size: grow_history(admin, size))
        vacuum_s = timed(lambda: admin.execute("VACUUM ANALYZE execution_runs"))
        log(f"  {size:>10,} rows: loaded in {load_s:.1f} s, vacuumed in {vacuum_s:.1f} s")
        for indexed in (False, True):
            build_s = None
            if indexed:
                build_s = timed(lambda: admin.execute(recommended_index_sql(CONTRACT)))
                admin.execute("ANALYZE execution_runs")
            row = _measure_config(paths, size, indexed)
            row.update(load_s=load_s, build_s=build_s, running=LIVE_ROWS + 2)
            rows.append(row)
            log(f"    {'with' if indexed else 'without'} index: " + _brief(row))
    return rows


def _measure_proportional(
    admin: Conn, paths: dict[str, str], size: int, log: Callable[[str], None]
) -> dict[str, Any]:
    running = int(size * PROPORTIONAL_RUNNING)
    admin.execute(
        "UPDATE execution_runs SET status = 'running', claimed_at = now() - interval '1 min' "
        "WHERE id IN (SELECT id FROM execution_runs WHERE id > 100 AND status = 'done' "
        "ORDER BY id DESC LIMIT %s)",
        (running,),
    )
    admin.execute("VACUUM ANALYZE execution_runs")
    row = _measure_config(paths, size, True)
    row.update(load_s=None, build_s=None, running=running + LIVE_ROWS + 2)
    log(f"    with index, {running:,} running: " + _brief(row))
    return row


def _brief(row: dict[str, Any]) -> str:
    tcp, ssh = row["paths"]["TCP"], row["paths"][TUNNEL]
    return (
        f"{row['scan']}, server {fmt_s(row['server_s'])}, TCP {fmt_s(tcp['guard_s'])} "
        f"({fmt_ratio(tcp['ratio'])} select 1), tunnel {fmt_s(ssh['guard_s'])} "
        f"({fmt_ratio(ssh['ratio'])}), warning={row['warned']}"
    )


def _measure_config(paths: dict[str, str], size: int, indexed: bool) -> dict[str, Any]:
    params = predicate_params(CONTRACT, lease_s=LEASE_S, runtime_started_at=None)
    row: dict[str, Any] = {"size": size, "indexed": indexed, "paths": {}}
    with psycopg.connect(paths["TCP"], autocommit=True) as conn:
        server, scan = _explain_analyze(conn, params)
        row.update(server_s=server, scan=scan)
    for name, conninfo in paths.items():
        if name == TUNNEL_NODELAY and not indexed:
            continue
        row["paths"][name] = _side_by_side(conninfo, params)
    row["warned"] = _warns(paths["TCP"])
    return row


def _explain_analyze(conn: Conn, params: dict[str, Any]) -> tuple[float, str]:
    """Median planning + execution time of EXPLAIN ANALYZE, and the scan of the table."""
    query = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + counts_query(CONTRACT)
    times, scan = [], "-"
    conn.execute(query, params).fetchall()  # warm-up: catalog caches
    for _ in range(EXPLAINS):
        [[[plan]]] = conn.execute(query, params).fetchall()
        times.append((plan["Planning Time"] + plan["Execution Time"]) / 1000)
        scan = _scan_of(plan["Plan"])
    return median(times), scan


def _scan_of(node: dict[str, Any]) -> str:
    """How the plan reads the table: `Seq Scan (parallel)`, `Index Only Scan`, ..."""
    if node.get("Relation Name") == CONTRACT.table:
        return node["Node Type"] + (" (parallel)" if node.get("Parallel Aware") else "")
    for child in node.get("Plans", []):
        found = _scan_of(child)
        if found != "-":
            return found
    return "-"


def _side_by_side(conninfo: str, params: dict[str, Any]) -> dict[str, float]:
    """select 1, the guard query, and the guard query on the 10^4-row reference table,
    rotating on one connection; their medians and ratios."""
    ref_params = predicate_params(REF_CONTRACT, lease_s=LEASE_S, runtime_started_at=None)
    samples: dict[str, list[float]] = {
        "select 1": [],
        "guard": [],
        "reference": [],
        "status": [],
        "status reference": [],
    }
    with psycopg.connect(conninfo, autocommit=True) as conn:
        status = _status_check(conn, CONTRACT)
        status_ref = _status_check(conn, REF_CONTRACT)
        guard = composed(conn, counts_query, CONTRACT)  # as the guard sends it
        reference = composed(conn, counts_query, REF_CONTRACT)
        steps: dict[str, Callable[[], object]] = {
            "select 1": lambda: conn.execute("SELECT 1").fetchall(),
            "guard": lambda: conn.execute(guard, params).fetchall(),
            "reference": lambda: conn.execute(reference, ref_params).fetchall(),
            "status": status,
            "status reference": status_ref,
        }
        # Warm-up (catalog caches, the first plans, the tunnel's threads), then one probe each.
        warm_until = time.perf_counter() + WARM_UP_S
        while time.perf_counter() < warm_until:
            for step in steps.values():
                step()
        probe = sum(timed(step) for step in steps.values())
        rounds = max(MIN_PAIRS, min(MAX_PAIRS, int(BUDGET_S / max(probe, 1e-6))))
        names = list(steps)
        for i in range(rounds):
            shift = i % len(names)
            for name in names[shift:] + names[:shift]:
                samples[name].append(timed(steps[name]))
        checks = []
        with guard_connect(conninfo, CONTRACT.connect_timeout_s) as guard_conn:
            for _ in range(max(MIN_PAIRS * 2, min(60, rounds // 4))):
                checks.append(
                    timed(
                        lambda gc=guard_conn: evaluate(
                            gc,
                            CONTRACT,
                            task_timeout=TIMEOUT,
                            lease_s=LEASE_S,
                            runtime_started_at=None,
                        )
                    )
                )
    select_1, guard, reference, status_s, status_ref_s = (median(samples[n]) for n in names)
    return {
        "status_s": status_s,
        "status_vs_reference": status_s / status_ref_s,
        "select_1_s": select_1,
        "guard_s": guard,
        "ratio": guard / select_1,
        "vs_reference": guard / reference,
        "check_s": median(checks),
        "check_p90_s": sorted(checks)[int(len(checks) * 0.9)],
        "pairs": rounds,
    }


def _status_check(conn: Conn, contract: Contract) -> Callable[[], object]:
    """The status check as the guard runs it (statuses.check_statuses), on its own cursor:
    a loose index scan when an index leads with the status, else one pass over the table."""
    column = verify_schema(conn, contract)

    def run() -> object:
        with conn.cursor() as cur:
            check_statuses(cur, contract, column)
        return column

    return run


def _warns(conninfo: str) -> str:
    """Does a `leaseguard check` session on this table warn about a sequential scan?"""
    started = datetime(2000, 1, 1, tzinfo=UTC)
    with local_session(CONTRACT, conninfo, task_timeout_s=3600.0, runtime_started_at=started) as s:
        warnings = s.judge().warnings
    return "yes" if any("sequential scan" in w for w in warnings) else "no"


def _report(rows: list[dict[str, Any]], *, quick: bool) -> tuple[Section, list[Finding]]:
    section = Section(
        "1. Predicate at scale",
        [
            "rows",
            "running",
            "index",
            "plan",
            "server (EXPLAIN ANALYZE)",
            "path",
            "select 1",
            "guard query",
            "guard / select 1",
            "guard / 10^4-row table",
            "status check",
            "status / 10^4-row table",
            "whole check: median (p90)",
            "seq-scan warning",
            "load / index build",
        ],
    )
    for row in rows:
        build = fmt_s(row["build_s"]) if row["build_s"] is not None else "-"
        load = fmt_s(row["load_s"]) if row["load_s"] is not None else "-"
        for i, (path, m) in enumerate(row["paths"].items()):
            first = i == 0
            section.rows.append(
                [
                    f"{row['size']:,}" if first else "",
                    f"{row['running']:,}" if first else "",
                    ("yes" if row["indexed"] else "no") if first else "",
                    row["scan"] if first else "",
                    fmt_s(row["server_s"]) if first else "",
                    path,
                    fmt_s(m["select_1_s"]),
                    fmt_s(m["guard_s"]),
                    fmt_ratio(m["ratio"]),
                    fmt_ratio(m["vs_reference"]),
                    fmt_s(m["status_s"]),
                    fmt_ratio(m["status_vs_reference"]),
                    f"{fmt_s(m['check_s'])} ({fmt_s(m['check_p90_s'])})",
                    row["warned"] if first else "",
                    (f"{load} / {build}" if row["indexed"] else load) if first else "",
                ]
            )
    section.notes += [
        "Guard query = the predicate's counts query (leaseguard.core.predicate.counts_query), "
        "composed and bound as the guard does it, on an autocommit connection; select 1 "
        f"and the guard query alternate on the same connection ({MIN_PAIRS}..{MAX_PAIRS} "
        f"rounds, ~{BUDGET_S:g} s per configuration and path), rotating with the same query "
        f"on a {REF_ROWS:,}-row copy of the table with the index (`guard / 10^4-row table`: "
        "the flatness ratio, side by side); medians. Server time: median "
        f"planning + execution time of {EXPLAINS} EXPLAIN ANALYZE runs.",
        "Status check: every status in the table classified (leaseguard.adapters.statuses."
        "check_statuses, as the guard runs it in its transaction): with the index, a loose "
        "index scan (one probe per distinct status); without, one pass over the table. It "
        f"rotates with the others and with the same check on the {REF_ROWS:,}-row copy "
        "(`status / 10^4-row table`: its flatness ratio).",
        "Whole check: leaseguard.adapters.guard.evaluate on an open guard connection - read-only "
        "transaction, its five settings (budgets, zone, no parallel workers) in one "
        "statement, the schema check (4 catalog queries), the status check, the counts query "
        "and, when something is live, the live-claims query: 10 round trips (11 before the "
        "settings were merged).",
        f"Paths: `TCP` connects to the database directly; `{TUNNEL}` goes through "
        "leaseguard.adapters.ssh.database_tunnel (Fabric's forward_local over paramiko) via a "
        "fleet host's sshd, as `fab guard` does (leaseguard sets TCP_NODELAY on the SSH socket, "
        f"as OpenSSH does); `{TUNNEL_NODELAY}` sets it once more explicitly, a control that "
        "should agree with it.",
        "The table: 8 live + 2 stale running rows and 20 open ones whatever its size (the "
        "active set follows the workers, not the history); done/failed history fills the "
        "rest. The last row turns 0.1% of 10^7 rows into running claims: the cost follows "
        "the claimed rows, not the table.",
        "PostgreSQL 15 from the test harness (fsync off, shared_buffers 32MB); the table "
        "(~1 GB at 10^7 rows) is read from the OS page cache; autovacuum is off for it so "
        "that no vacuum starts during a measurement. Load = INSERT ... SELECT generate_series "
        "up to that size (synchronous_commit off) + VACUUM ANALYZE; index build = the "
        "statement `leaseguard index-sql` prints (CREATE INDEX CONCURRENTLY).",
    ]
    if quick:
        section.notes.append("--quick: sizes 10^4 and 10^5 only.")
    return section, _findings(rows)


def _findings(rows: list[dict[str, Any]]) -> list[Finding]:
    indexed = [r for r in rows if r["indexed"] and r["running"] == LIVE_ROWS + 2]
    largest = indexed[-1]
    tcp, ssh = largest["paths"]["TCP"], largest["paths"][TUNNEL]
    nodelay = largest["paths"][TUNNEL_NODELAY]
    flat_tcp, flat_ssh = tcp["vs_reference"], ssh["vs_reference"]
    size = f"{largest['size']:,}"
    unindexed = [r for r in rows if not r["indexed"]]
    warned_right = all(r["warned"] == ("yes" if r["size"] >= 100_000 else "no") for r in unindexed)
    warned_right = warned_right and all(r["warned"] == "no" for r in rows if r["indexed"])
    return [
        Finding(
            "1. predicate",
            f"guard query / select 1 at {size} rows, with index, through the guard's SSH tunnel",
            fmt_ratio(ssh["ratio"]),
            "<= 2.00x",
            ssh["ratio"] <= 2.0,
            f"{fmt_s(ssh['guard_s'])} vs {fmt_s(ssh['select_1_s'])}; with TCP_NODELAY "
            f"{fmt_ratio(nodelay['ratio'])}",
        ),
        Finding(
            "1. predicate",
            f"guard query / select 1 at {size} rows, with index, direct TCP",
            fmt_ratio(tcp["ratio"]),
            "<= 2.00x",
            tcp["ratio"] <= 2.0,
            f"{fmt_s(tcp['guard_s'])} vs {fmt_s(tcp['select_1_s'])}: ~{fmt_s(largest['server_s'])}"
            " of server time (mostly planning) against a loopback round trip",
        ),
        Finding(
            "1. predicate",
            f"flat: guard query at {size} rows / on a {REF_ROWS:,}-row table, with index",
            f"{fmt_ratio(flat_tcp)} (TCP), {fmt_ratio(flat_ssh)} (tunnel)",
            "flat (within 25%)",
            max(flat_tcp, flat_ssh) <= 1.25,
            "measured side by side on the same connection; without the index: "
            + ", ".join(
                f"{r['size']:,} rows {fmt_ratio(r['paths']['TCP']['vs_reference'])}"
                for r in rows
                if not r["indexed"]
            ),
        ),
        Finding(
            "1. predicate",
            f"flat: status check at {size} rows / on a {REF_ROWS:,}-row table, with index",
            f"{fmt_ratio(tcp['status_vs_reference'])} (TCP), "
            f"{fmt_ratio(ssh['status_vs_reference'])} (tunnel)",
            "flat (within 25%)",
            max(tcp["status_vs_reference"], ssh["status_vs_reference"]) <= 1.25,
            "every status classified by a loose index scan; "
            + ", ".join(
                f"{r['size']:,} rows {fmt_s(r['paths']['TCP']['status_s'])}"
                for r in rows
                if r["indexed"]
            )
            + " (TCP)",
        ),
        Finding(
            "1. predicate",
            "seq-scan warning: large table without index only",
            "as expected" if warned_right else "UNEXPECTED",
            "warn iff >= 100,000 rows and no index",
            warned_right,
        ),
    ]


# --- what would make the guard query cheaper ------------------------------------------------

# A candidate rewrite of the counts query, measured for comparison only: leaseguard does not
# run it. One pass, one aggregate, no CTEs; the same classes as leaseguard.core.predicate (queued,
# orphaned, stale, live - a claimed row without claimed_at is live), checked equal below.
CANDIDATE_ONE_SCAN = """
SELECT coalesce(%(as_of)s::timestamptz, now()) AS checked_at,
       count(*) FILTER (WHERE q) AS queued,
       count(*) FILTER (WHERE NOT q AND orphan) AS orphaned,
       count(*) FILTER (WHERE NOT q AND NOT orphan AND expired) AS stale,
       count(*) FILTER (WHERE NOT q AND NOT orphan AND NOT expired) AS live
FROM (
    SELECT status = ANY(%(queued)s) AS q,
           coalesce(claimed_at < %(orphan_cutoff)s::timestamptz, false) AS orphan,
           coalesce(claimed_at + %(lease)s::interval
                    <= coalesce(%(as_of)s::timestamptz, now()), false) AS expired
    FROM execution_runs
    WHERE status = ANY(%(judged)s)
) AS rows
"""


def _candidate_rewrite(paths: dict[str, str], size: int) -> Section:
    """The shipped counts query against a single-pass rewrite, side by side."""
    params = predicate_params(CONTRACT, lease_s=LEASE_S, runtime_started_at=None)
    params["queued"] = list(CONTRACT.queued_statuses)  # the rewrite's lists (as arrays)
    params["judged"] = [*CONTRACT.claimed_statuses, *CONTRACT.queued_statuses]
    shipped = counts_query(CONTRACT)
    candidate = sql.SQL(CANDIDATE_ONE_SCAN)  # type: ignore[arg-type]
    results: dict[str, dict[str, float]] = {}
    with psycopg.connect(paths["TCP"], autocommit=True) as conn:
        _, *counts = conn.execute(shipped, params).fetchone()  # type: ignore[misc]
        _, queued, orphaned, stale, live = conn.execute(candidate, params).fetchone()  # type: ignore[misc]
        same = counts == [live, stale, orphaned, queued]
        for name, query in (("shipped counts query", shipped), ("single-pass rewrite", candidate)):
            plans, execs = [], []
            for _ in range(EXPLAINS * 4):
                [[[plan]]] = conn.execute(
                    sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + query, params
                ).fetchall()
                plans.append(plan["Planning Time"] / 1000)
                execs.append(plan["Execution Time"] / 1000)
            results[name] = {"plan": median(plans), "exec": median(execs)}
    for path in ("TCP", TUNNEL):
        with psycopg.connect(paths[path], autocommit=True) as conn:
            samples: dict[str, list[float]] = {"select 1": [], "shipped": [], "candidate": []}
            sent = {
                name: query.as_bytes(conn)
                for name, query in (("shipped", shipped), ("candidate", candidate))
            }  # composed once, as shipped
            for _ in range(300):
                samples["select 1"].append(timed(lambda: conn.execute("SELECT 1").fetchall()))
                for name, query in sent.items():
                    samples[name].append(timed(lambda q=query: conn.execute(q, params).fetchall()))
        one = median(samples["select 1"])
        results["shipped counts query"][path] = median(samples["shipped"]) / one
        results["single-pass rewrite"][path] = median(samples["candidate"]) / one
    section = Section(
        f"1b. What the guard query's fixed cost is made of (at {size:,} rows, with index)",
        ["query", "planning", "execution", "/ select 1 (TCP)", f"/ select 1 ({TUNNEL})"],
        rows=[
            [
                name,
                fmt_s(r["plan"]),
                fmt_s(r["exec"]),
                fmt_ratio(r["TCP"]),
                fmt_ratio(r[TUNNEL]),
            ]
            for name, r in results.items()
        ],
        notes=[
            "With the index the guard query reads ~30 index entries; what it costs beyond a "
            "round trip is mostly planning. The shipped query counts the judged rows (one "
            "subquery, computing each row's class once; it was three CTEs, planned in "
            "~113 us) with a FILTER per class, no GROUP BY and its sort, and reads claimed "
            "and queued rows in one index scan (one `= ANY` over both lists; two ORed made a "
            "BitmapOr of two scans, ~30 µs more). The rewrite beside it "
            "(benchmarks/bench_predicate.py, CANDIDATE_ONE_SCAN) filters on per-row tests "
            "written out instead of the class; leaseguard does not run it, since the "
            "live-claims query shares the class expression. Same counts from both: "
            + ("yes." if same else "NO - the rewrite is wrong."),
        ],
    )
    return section


# --- a drain poll's query, prepared (issue 16, item 5) ---------------------------------------


def _literal_statuses(conn: Conn) -> sql.SQL:
    """The counts query with the contract's status lists written in (benchmark-only).

    What a generic plan needs to use the index: PostgreSQL cannot estimate `status IN ($1, $2)`
    without the values, so a generic plan of the shipped query scans the table, and the plan
    cache keeps re-planning custom plans. leaseguard binds every value as a parameter
    (STYLE.md), so it does not ship this.
    """
    text = counts_query(CONTRACT).as_string(conn)
    params = predicate_params(CONTRACT, lease_s=LEASE_S, runtime_started_at=None)
    for name, value in params.items():
        if isinstance(value, str):  # a status (the other values are not strings)
            text = text.replace(f"%({name})s", sql.Literal(value).as_string(conn))
    return sql.SQL(text)  # type: ignore[arg-type]


def _cached_status_column(conn: Conn) -> StatusColumn:
    with conn.transaction():
        return verify_schema(conn, CONTRACT)


def _whole_poll_shipped(conn: Conn, column: StatusColumn) -> object:
    """A drain's poll as shipped (judge_table), the schema pre-flight done on an earlier one."""
    return judge_table(
        conn,
        CONTRACT,
        task_timeout=TIMEOUT,
        lease_s=LEASE_S,
        runtime_started_at=None,
        status_column=column,
    )


def _whole_poll_one_by_one(conn: Conn, column: StatusColumn) -> object:
    """The same poll as the guard sent it before issue 16: a round trip per statement."""
    params = predicate_params(CONTRACT, lease_s=LEASE_S, runtime_started_at=None)
    with conn.transaction(), conn.cursor() as cur:
        set_local_limits(
            cur,
            statement_timeout=CONTRACT.statement_timeout_ms,
            lock_timeout=CONTRACT.effective_lock_timeout_ms,
            idle_in_transaction_session_timeout=CONTRACT.statement_timeout_ms * 2,
        )
        cur.execute(
            "SELECT set_config('TimeZone', %s, true), "
            "set_config('max_parallel_workers_per_gather', '0', true)",
            (CONTRACT.timestamp_zone,),
        )
        check_statuses(cur, CONTRACT, column)
        counts = cur.execute(counts_query(CONTRACT), params).fetchone()
        assert counts is not None
        _, live, *_ = counts
        if live:
            return cur.execute(live_claims_query(CONTRACT), params).fetchall()
        return counts


WHOLE_POLLS: dict[str, Callable[[Conn, StatusColumn], object]] = {
    "a drain's whole poll (as shipped)": _whole_poll_shipped,
    "a drain's whole poll, a round trip per statement (before)": _whole_poll_one_by_one,
}


def _prepared_poll(paths: dict[str, str], size: int) -> tuple[Section, list[Finding]]:
    """The counts query never prepared, prepared as a drain's connection does, the
    literal-status candidate prepared, and the shell guard's one query prepared with its
    values bound (the control); each against select 1, rotating, on every path."""
    params = predicate_params(CONTRACT, lease_s=LEASE_S, runtime_started_at=None)
    variants = {
        "never prepared (one-shot connections)": None,
        "prepared (a drain's connection, as shipped)": 0,
        "prepared, statuses written in (candidate)": 0,
        SHELL_QUERY_PREPARED: 0,
    }
    # Any start before the live claims (made minutes ago) counts them live.
    started = datetime.now(UTC) - timedelta(hours=1)
    args: dict[str, Any] = {name: params for name in variants}
    args[SHELL_QUERY_PREPARED] = (CONTRACT.claimed_statuses[0], started, LEASE_S)
    with guard_connect(paths["TCP"], CONTRACT.connect_timeout_s, prepare=True) as shipped:
        shipped_threshold = shipped.prepare_threshold
    results: dict[str, dict[str, Any]] = {name: {} for name in variants}
    for path in ("TCP", TUNNEL):
        with ExitStack() as stack:
            conns = {}
            for name, threshold in variants.items():
                conn = stack.enter_context(GuardConnection.connect(paths[path], autocommit=True))
                conn.prepare_threshold = threshold
                conns[name] = conn
            # Composed once, as the guard sends them (adapters.db.composed).
            literal = "prepared, statuses written in (candidate)"
            queries = {
                name: composed(conns[name], counts_query, CONTRACT)
                for name in variants
                if name not in (literal, SHELL_QUERY_PREPARED)
            }
            queries[literal] = _literal_statuses(conns[literal]).as_bytes(conns[literal])
            queries[SHELL_QUERY_PREPARED] = SHELL_GUARD_QUERY.encode()
            one_conn = conns["never prepared (one-shot connections)"]
            steps: dict[str, Callable[[], object]] = {
                "select 1": lambda c=one_conn: c.execute("SELECT 1").fetchall()
            }
            for name, threshold in variants.items():
                # A drain's guard connection keeps its cursor; a one-shot check opens one.
                cursor = conns[name].cursor if threshold is None else conns[name].kept_cursor
                steps[name] = lambda c=cursor, q=queries[name], a=args[name]: (
                    c().execute(q, a).fetchall()
                )
            for name, poll in WHOLE_POLLS.items():
                guard = stack.enter_context(guard_connect(paths[path], 5, prepare=True))
                steps[name] = functools.partial(poll, guard, _cached_status_column(guard))
            samples: dict[str, list[float]] = {name: [] for name in steps}
            names = list(steps)
            for i in range(40 + PREPARED_ROUNDS):
                shift = i % len(names)
                for name in names[shift:] + names[:shift]:
                    elapsed = timed(steps[name])
                    if i >= 40:  # after the plan cache has made up its mind (5 custom plans)
                        samples[name].append(elapsed)
            one = median(samples["select 1"])
            for name in variants:
                plans = (
                    conns[name]
                    .execute(
                        "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) "
                        "FROM pg_prepared_statements"
                    )
                    .fetchone()
                )
                results[name][path] = (median(samples[name]), median(samples[name]) / one)
                results[name]["plans"] = plans
            for name in WHOLE_POLLS:
                results.setdefault(name, {})[path] = (
                    median(samples[name]),
                    median(samples[name]) / one,
                )
            results.setdefault("select 1", {})[path] = (one, 1.0)
    section = Section(
        f"1c. A drain poll's guard query, prepared (at {size:,} rows, with index)",
        ["query", "TCP", "/ select 1 (TCP)", TUNNEL, f"/ select 1 ({TUNNEL})", "plans"],
    )
    for name, r in results.items():
        plans = r.get("plans")
        section.rows.append(
            [
                name,
                fmt_s(r["TCP"][0]),
                fmt_ratio(r["TCP"][1]),
                fmt_s(r[TUNNEL][0]),
                fmt_ratio(r[TUNNEL][1]),
                f"{plans[0]} generic, {plans[1]} custom" if plans and sum(plans) else "-",
            ]
        )
    section.notes += [
        f"{PREPARED_ROUNDS} rounds after 40 warm-up rounds, all rows rotating; each variant on "
        "its own autocommit connection (prepare_threshold per connection). A drain's guard "
        "connection (leaseguard.adapters.db.connect(prepare=True), directly connected: "
        f"prepare_threshold={shipped_threshold}) prepares every statement on its first "
        "execution, and keeps one cursor for all its polls (GuardConnection: psycopg adapts "
        "a list parameter, such as the status check's, once per cursor); "
        "one-shot connections prepare nothing and open a cursor per check. Plans: the "
        "server's plan cache counts for the prepared statements (pg_prepared_statements).",
        "Prepared as shipped, the plan cache keeps choosing custom plans (planned at every "
        "execution): with the statuses as parameters, a generic plan cannot use the "
        "index (PostgreSQL cannot estimate `status IN ($1, $2)`), so only parsing is saved. "
        "With the statuses written into the query text, the plan cache switches to a generic "
        "plan after 5 executions and a poll no longer plans; leaseguard does not ship that, "
        "as every value is bound as a parameter (STYLE.md). Nor does it force a generic "
        "plan with the statuses bound (plan_cache_mode = force_generic_plan): that plan "
        "cannot tell the claimed statuses from the history either and reads the table "
        "sequentially, with or without the index, at 10^5 as at 10^7 rows.",
        f"{SHELL_QUERY_PREPARED}: the hand-written judgment of benchmarks/shell_guard.sh "
        "(count the running rows claimed since the start whose lease has not expired), "
        "prepared like the shipped query, with its values (the status, the start, the "
        "lease) bound as parameters: the least a poll that binds its values runs. Its "
        "status bound, it is planned at every execution too; where it alone takes more "
        f"than {TARGET_PREPARED:.1f}x select 1, no guard that binds its values meets the "
        "target on this machine (the summary says so).",
        "A drain's whole poll: adapters.guard.judge_table on a drain's guard connection "
        "(prepared, the status column's facts cached): the read-only transaction, its "
        "settings, the status check, the counts query and, as the table holds live claims, "
        "the live-claims query. As shipped (adapters.db.read_transaction, psycopg's "
        "pipeline mode): BEGIN, the settings, the status check and the counts in one round "
        "trip, the live claims in a second, COMMIT in a third; a poll with nothing live "
        "needs two. Before: the statements the guard sent before issue 16 (BEGIN, limits, "
        "zone, status check, counts, live claims, COMMIT: seven round trips). "
        "psycopg's own transaction() in pipeline mode syncs at both of its ends (three "
        "round trips of its own), so BEGIN and COMMIT are statements of the pipeline. The "
        "tunnel is opened as the guard opens it, Nagle off: with it on, each batch sent as "
        "several SSH packets waits out the server's delayed ACK (~40 ms).",
    ]
    tcp = results["prepared (a drain's connection, as shipped)"]["TCP"][1]
    candidate = results["prepared, statuses written in (candidate)"]["TCP"][1]
    never = results["never prepared (one-shot connections)"]["TCP"][1]
    control = results[SHELL_QUERY_PREPARED]["TCP"][1]
    whole, before = (results[name]["TCP"][1] for name in WHOLE_POLLS)
    out_of_reach = control > TARGET_PREPARED
    findings = [
        Finding(
            "1c. prepared poll",
            f"prepared guard query / select 1 at {size:,} rows, with index, direct TCP",
            fmt_ratio(tcp),
            f"<= {TARGET_PREPARED:.2f}x",
            tcp <= TARGET_PREPARED,
            f"{SHELL_QUERY_PREPARED} {fmt_ratio(control)}"
            + (": out of reach here with values bound" if out_of_reach else "")
            + f"; never prepared {fmt_ratio(never)}; with the statuses written in (generic "
            f"plan, not shipped) {fmt_ratio(candidate)}; a drain's whole poll {fmt_ratio(whole)}"
            f", before issue 16 {fmt_ratio(before)}",
            out_of_reach=out_of_reach,
        )
    ]
    return section, findings
