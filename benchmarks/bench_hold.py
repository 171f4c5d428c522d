"""How long intake stays held around an action, and how soon it comes back after it.

    python -m benchmarks.bench_hold [--runs N]

While `leaseguard drain ... -- COMMAND` holds the pg_cron intake, nothing is claimed. On a
private PostgreSQL with pg_cron: the span the job is inactive (watched every 10 ms by an
independent connection), the command's own duration (it records its start and end), and
the gap between the command's end and the job's coming back. The restart role's figures
come from `make demo`, step 5.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import median, run, spread
from sandbox.pgcluster import PG_BASE_DIR, PgCluster
from sandbox.runs_table import create_runs_table
from sandbox.subprocess_env import clean_env

JOB = "bench_intake"
COMMAND_S = 1.0
# The command: the wall clock when it starts and ends, into a file.
TIMED = (
    "import sys, time, json; t0 = time.time(); time.sleep(float(sys.argv[2])); "
    "json.dump([t0, time.time()], open(sys.argv[1], 'w'))"
)


def one_run(cluster: PgCluster, work: Path) -> tuple[float, float, float]:
    """(held_s, command_s, back_after_end_s) of one `leaseguard drain -- COMMAND`."""
    out, done = work / "ran.json", threading.Event()
    spans: list[tuple[float, float]] = []

    def watch() -> None:  # every span the job is inactive, in wall-clock seconds
        since = None
        with cluster.connect(socket=True) as conn:
            while not done.wait(0.01):
                row = conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (JOB,))
                active, now = row.fetchone() == (True,), time.time()
                if not active and since is None:
                    since = now
                elif active and since is not None:
                    spans.append((since, now))
                    since = None

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    argv = [
        sys.executable, "-m", "leaseguard", "drain", "--dsn", cluster.dsn(dbname="app"),
        "--task-timeout-s", "3600", "--runtime-started-at", "2000-01-01T00:00:00Z",
        "--pause-cron-job", JOB, "--cron-database", "postgres",
        "--", sys.executable, "-c", TIMED, str(out), str(COMMAND_S),
    ]  # fmt: skip
    run(argv, env=clean_env(), check=True, timeout=120)
    deadline = time.monotonic() + 5
    while not spans and time.monotonic() < deadline:
        time.sleep(0.01)
    done.set()
    watcher.join()
    (start, end), (paused, resumed) = json.loads(out.read_text()), spans[0]
    return resumed - paused, end - start, resumed - end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_hold")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lgbench-") as tmp, PgCluster(PG_BASE_DIR) as cluster:
        cluster.psql("CREATE DATABASE app")
        with cluster.connect("app") as conn:
            create_runs_table(conn)
        cluster.psql(f"SELECT cron.schedule('{JOB}', '0 0 1 1 *', 'SELECT 1')")
        runs = [one_run(cluster, Path(tmp)) for _ in range(args.runs)]
    held, command, back = ([run[i] for run in runs] for i in range(3))
    print(f"leaseguard drain -- COMMAND ({args.runs} runs, COMMAND sleeps {COMMAND_S:g} s):")
    print(f"  intake held        {median(held):.2f} s  ({spread(held)})")
    print(f"  the command        {median(command):.2f} s  ({spread(command)})")
    print(f"  held beyond it     {median(held) - median(command):.2f} s")
    print(f"  back after its end {median(back) * 1000:.0f} ms  ({spread(back)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
