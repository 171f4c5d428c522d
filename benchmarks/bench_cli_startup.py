"""7. CLI start-up (issue 16): `leaseguard check` on a DSN with given facts vs the floor of any
Python database client (`import psycopg; connect; select 1`), and `leaseguard --help`.

Each command runs as its own process, rotated, `reps` times; medians side by side. The
database is a PostgreSQL of its own on 127.0.0.1 (TCP, as a user's DSN), with an empty runs
table: the guard's own queries cost ~1 ms there, so the figures are start-up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.common import Finding, Section, fmt_ratio, fmt_s, median, run, spread
from sandbox.pgcluster import PG_BASE_DIR, PgCluster
from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env

CHECK_RATIO_TARGET = 1.5
HELP_TARGET_S = 0.150
LEASEGUARD = str(Path(sys.executable).parent / "leaseguard")
FLOOR = "import sys, psycopg; psycopg.connect(sys.argv[1]).execute('select 1')"


def commands(dsn: str) -> dict[str, list[str]]:
    started = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    facts = ["--task-timeout-s", "3600", "--runtime-started-at", started]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "psycopg connect + select 1": [sys.executable, "-c", FLOOR, dsn],
        "leaseguard check (DSN, given facts)": [LEASEGUARD, "check", "--dsn", dsn, *facts],
        "leaseguard --help": [LEASEGUARD, "--help"],
        "leaseguard --version": [LEASEGUARD, "--version"],
    }


def timed_run(argv: Sequence[str]) -> float:
    start = time.perf_counter()
    done = run(argv, env=clean_env(), timeout=60)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:2]} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return elapsed


def run_bench(reps: int, log: Callable[[str], None]) -> tuple[Section, list[Finding]]:
    # PG_BASE_DIR: traversable by the postgres OS user; the cluster removes its own directory.
    with PgCluster(PG_BASE_DIR) as cluster:
        with cluster.connect() as conn:
            create_runs_table(conn)
        argvs = commands(cluster.dsn())
        for argv in argvs.values():  # warm the page cache: the first run reads every .pyc
            timed_run(argv)
        times: dict[str, list[float]] = {name: [] for name in argvs}
        for rep in range(reps):
            for name, argv in argvs.items():
                times[name].append(timed_run(argv))
            log(f"7. cli start-up: round {rep + 1}/{reps}")
    return report(times, reps)


def report(times: dict[str, list[float]], reps: int) -> tuple[Section, list[Finding]]:
    floor = median(times["psycopg connect + select 1"])
    check = median(times["leaseguard check (DSN, given facts)"])
    help_s = median(times["leaseguard --help"])
    section = Section(
        "7. CLI start-up: `leaseguard check` vs psycopg's floor, `--help`",
        ["command", "median wall time", "min..max", "vs psycopg connect + select 1"],
        [
            [name, fmt_s(median(v)), spread(v), fmt_ratio(median(v) / floor)]
            for name, v in times.items()
        ],
        [
            f"{reps} rounds, each command once per round, as separate processes (rotated); "
            "the installed console script `leaseguard`, a PostgreSQL on 127.0.0.1 over TCP.",
            "check imports psycopg and the guard only (no Fabric, paramiko, invoke, jinja2, "
            "Ansible nor budgets code: tests/unit/test_cli_startup.py); --help and --version "
            "import no psycopg.",
        ],
    )
    findings = [
        Finding(
            "7",
            "leaseguard check / psycopg connect + select 1",
            fmt_ratio(check / floor),
            f"<= {CHECK_RATIO_TARGET}x",
            check / floor <= CHECK_RATIO_TARGET,
            f"{fmt_s(check)} vs {fmt_s(floor)}",
        ),
        Finding(
            "7",
            "leaseguard --help",
            fmt_s(help_s),
            f"<= {fmt_s(HELP_TARGET_S)}",
            help_s <= HELP_TARGET_S,
        ),
    ]
    return section, findings


if __name__ == "__main__":  # python -m benchmarks.bench_cli_startup [REPS]: this item alone
    found_section, found = run_bench(int(sys.argv[1]) if sys.argv[1:] else 9, print)
    print(found_section.markdown())
    for finding in found:
        print(finding)
