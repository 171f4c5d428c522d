"""Item 3: a fleet - `fab -H <1, 5 or 20 hosts> guard`, all hosts checked in parallel.

Every host is its own network namespace with its own sshd; their SSH sessions share the one
podman engine (one `backend` container) and they all reach one PostgreSQL (in the root
namespace) through their own tunnels, as the app servers of a fleet share a database. The
three fleet sizes rotate within every repetition, so load drift hits them all alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Finding, Section, fmt_ratio, fmt_s, median, run, spread
from benchmarks.infra import (
    FAB_CWD,
    Fleet,
    create_active_rows,
    create_database,
    drop_database,
    fab_argv,
    fab_env,
    grow_history,
    vacuum_and_index,
    write_fabric_config,
)

DBNAME = "bench_fleet"
HISTORY_ROWS = 100_000


def run_bench(
    fleet: Fleet, workdir: Path, *, quick: bool, log: Callable[[str], None]
) -> tuple[Section, list[Finding]]:
    create_database(fleet.db, DBNAME)
    try:
        with fleet.db.connect(DBNAME, socket=True) as conn:
            create_active_rows(conn)
            grow_history(conn, HISTORY_ROWS)
            vacuum_and_index(conn)
        return _measure(fleet, workdir, 3 if quick else 6, log)
    finally:
        drop_database(fleet.db, DBNAME)


def _measure(
    fleet: Fleet, workdir: Path, reps: int, log: Callable[[str], None]
) -> tuple[Section, list[Finding]]:
    config = write_fabric_config(
        workdir / "fabric-fleet.yaml",
        dsn=f"dbname={DBNAME} user=postgres",
        known_hosts=fleet.known_hosts,
        db_host=fleet.db_addr,
        db_port=fleet.db.port,
    )
    sizes = sorted({1, min(5, len(fleet.hosts)), len(fleet.hosts)})
    times: dict[int, list[float]] = {n: [] for n in sizes}
    problems: list[str] = []

    def guard(n: int) -> float:
        argv = fab_argv(config, fleet.key_path, fleet.targets(n), "guard")
        start = time.perf_counter()
        done = run(argv, cwd=FAB_CWD, env=fab_env(), timeout=300)
        elapsed = time.perf_counter() - start
        lines = [line for line in done.stdout.splitlines() if "decision=" in line]
        defers = sum("decision=defer" in line for line in lines)
        if done.returncode != 75 or defers != n:
            failed = [line for line in lines if "decision=defer" not in line][:1]
            detail = failed[0].split(" leaseguard ", 1)[-1] if failed else done.stderr[-300:]
            problems.append(f"{n} hosts: exit {done.returncode}, {defers}/{n} defer: {detail}")
        return elapsed

    for n in sizes:  # warm-up
        guard(n)
    for rep in range(reps):
        order = sizes if rep % 2 == 0 else list(reversed(sizes))
        for n in order:
            times[n].append(guard(n))
    log("  fleet: " + ", ".join(f"{n} hosts {fmt_s(median(times[n]))}" for n in sizes))

    one, most = median(times[1]), median(times[sizes[-1]])
    section = Section(
        "3. A fleet: hosts checked in parallel by one `fab guard`",
        ["hosts", "median wall time", "min..max", "vs 1 host", "per host"],
    )
    for n in sizes:
        section.rows.append(
            [
                str(n),
                fmt_s(median(times[n])),
                spread(times[n]),
                fmt_ratio(median(times[n]) / one),
                fmt_s(median(times[n]) / n),
            ]
        )
    section.notes += [
        f"{reps} repetitions of each size, sizes rotated within each repetition, after one "
        "warm-up each. Each run is a whole `python -m fabric -H h1,...,hN guard` process: "
        "SSH connection, `docker inspect backend` and `date` on every host, a tunnel per "
        "host, one check per host; every host's decision must be defer (one live lease).",
        "All hosts, their sshd, the podman engine and PostgreSQL share this machine's "
        f"{_cpus()} CPUs: the fleet's N-fold SSH handshakes, `docker` CLI runs and podman API "
        "calls compete for them, where a real fleet would spread that work over N machines "
        "and leave only the controller's share (N handshakes, N tunnels) on one.",
    ]
    if problems:
        section.notes.append("Unexpected outcomes: " + "; ".join(sorted(set(problems))))
    findings = [
        Finding(
            "3. fleet",
            f"{sizes[-1]} hosts vs 1 host (median wall time)",
            f"{fmt_s(most)} vs {fmt_s(one)} ({fmt_ratio(most / one)})",
            "<= 2.00x",
            most / one <= 2.0 and not problems,
            "all decisions as expected" if not problems else "unexpected decisions",
        )
    ]
    return section, findings


def _cpus() -> int:
    import os

    return os.cpu_count() or 1
