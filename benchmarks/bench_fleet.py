"""Item 3: a fleet - what a deploy guard costs the protected database and the operator, for
1, 20 and 50 hosts, on both fronts, side by side in one run. The hosts are sandbox/fleet.py's
(sshd in namespaces, one shared PostgreSQL); the lookups are real and run on each host.

Measured, per front and fleet size: backends held on the database while a drain waits
(pg_stat_activity); polls per second at the database (the drain database's committed
transactions over the drain's span); the time until every host has its first verdict (the
status file); the per-extra-host cost of `fab guard` and `fab drain` against Fabric alone
running `true`, and running the lookups' own reads at once (the control), on the same hosts.
"""

from __future__ import annotations

import functools
import json
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from benchmarks.common import REPO, Finding, Section, fmt_ratio, fmt_s, median
from benchmarks.infra import (
    FAB_CWD,
    create_active_rows,
    create_database,
    drop_database,
    fab_argv,
    fab_env,
    fleet_fab_config,
)
from sandbox.ansible_env import ansible_env
from sandbox.fleet import Fleet

DBNAME = "bench_fleet"
FRONTS = ("fab", "ansible")
POLL_S = 0.5
DRAIN_S = 4.0  # each measured drain waits this long on a live claim, then ends (exit 75)
FORKS = 25
# Fabric alone: a ThreadingGroup running a command on the same hosts, key and known_hosts.
FABRIC_ALONE = """
import sys
from fabric import ThreadingGroup
hosts, key, known_hosts, command = sys.argv[1].split(","), *sys.argv[2:5]
group = ThreadingGroup(*hosts, connect_kwargs={"key_filename": key})
for connection in group:
    connection.client.load_host_keys(known_hosts)
group.run(command, hide=True)
"""


def run_bench(
    fleet: Fleet,
    workdir: Path,
    *,
    quick: bool,
    log: Callable[[str], None],
    fronts: tuple[str, ...] = FRONTS,
) -> tuple[Section, list[Finding]]:
    create_database(fleet.db, DBNAME)
    try:
        with fleet.db.connect(DBNAME, socket=True) as conn:
            create_active_rows(conn)
        return _measure(fleet, workdir, 2 if quick else 3, log, fronts)
    finally:
        drop_database(fleet.db, DBNAME)


def _inventory(fleet: Fleet, workdir: Path, config: Path, n: int) -> Path:
    """The same hosts, database and lookups as `config` (fab's), as an Ansible inventory."""
    lookups = yaml.safe_load(config.read_text())["leaseguard"]
    path = workdir / f"fleet-{n}.yml"
    hosts = {h.alias: h.ansible_host_vars() for h in fleet.hosts[:n]}
    group = {
        "leaseguard_db_host": fleet.db_addr,
        "leaseguard_db_port": fleet.db.port,
        "leaseguard_db_name": DBNAME,
        "leaseguard_db_user": "postgres",
        "leaseguard_task_timeout": lookups["task_timeout"],
        "leaseguard_runtime": lookups["runtime"],
        "leaseguard_drain_poll_s": POLL_S,
        "leaseguard_drain_deadline_s": DRAIN_S,
        "leaseguard_drain_status_file": str(workdir / f"ansible-status-{n}.json"),
    }
    path.write_text(yaml.safe_dump({"app": {"hosts": hosts, "vars": group}}))
    return path


class DatabaseWatch(threading.Thread):
    """While a drain runs: the guard's backends (every 50 ms) and the drain database's
    committed transactions, read from another database so the watch adds none."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(daemon=True)
        self.fleet, self.stop, self.backends = fleet, threading.Event(), [0]

    def commits(self) -> int:
        with self.fleet.db.connect(socket=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (DBNAME,)
            ).fetchone()
        return int(row[0]) if row else 0

    def run(self) -> None:
        with self.fleet.db.connect(socket=True) as conn:
            while not self.stop.wait(0.05):
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                    "AND application_name LIKE 'leaseguard%%'",
                    (DBNAME,),
                ).fetchone()
                self.backends.append(int(row[0]) if row else 0)


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, done.stdout


def _drain(
    argv: list[str], cwd: Path, env: dict[str, str], status: Path, fleet: Fleet, n: int
) -> dict[str, float]:
    """One drain on a live claim: its figures at the database and its first verdicts."""
    status.unlink(missing_ok=True)
    watch = DatabaseWatch(fleet)
    watch.start()
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    first, at_first = None, 0
    while process.poll() is None:
        if first is None and _every_host_judged(status, n):
            first, at_first = time.perf_counter() - start, watch.commits()
        time.sleep(0.02)
    wall = time.perf_counter() - start
    watch.stop.set()
    watch.join()
    # From every host's first verdict on: the polls alone, not the session's one-time reads.
    commits = watch.commits() - at_first
    return {
        "backends": max(watch.backends),
        "polls_per_s": commits / (wall - first) if first is not None else float("nan"),
        "first_verdicts_s": first if first is not None else float("nan"),
        "wall_s": wall,
    }


def _every_host_judged(status: Path, n: int) -> bool:
    try:
        rows = json.loads(status.read_text())["drains"]
    except (OSError, ValueError, KeyError):
        return False
    return len(rows) == n and all(row["counters"]["polls"] >= 1 for row in rows)


def _measure(
    fleet: Fleet, workdir: Path, reps: int, log: Callable[[str], None], fronts: tuple[str, ...]
) -> tuple[Section, list[Finding]]:
    config = fleet_fab_config(fleet, workdir, DBNAME)
    sizes = sorted({1, min(20, len(fleet.hosts)), len(fleet.hosts)})
    inventories = {n: _inventory(fleet, workdir, config, n) for n in sizes}
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}

    # The control: the lookups' own reads (env file, pid file, /proc, clock) in one exec.
    lookups = yaml.safe_load(config.read_text())["leaseguard"]
    env_file, pid_file = lookups["task_timeout"]["path"], lookups["runtime"]["pid_file"]
    reads = f"grep -E ^APP_TASK_TIMEOUT_S= {env_file}; pid=$(cat {pid_file}); getconf CLK_TCK; "
    script = "sh -c " + shlex.quote(reads + "cat /proc/stat /proc/$pid/stat; date +%s.%N")
    commands = {"fabric alone": "true", "fabric running the lookups": script}

    def alone(kind: str, n: int) -> dict[str, float]:
        argv = [sys.executable, "-c", FABRIC_ALONE, ",".join(fleet.targets(n))]
        argv += [str(fleet.key_path), str(fleet.known_hosts), commands[kind]]
        return {"wall_s": _timed(argv, FAB_CWD, fab_env())[0]}

    def fab_guard(n: int) -> dict[str, float]:
        argv = fab_argv(config, fleet.key_path, fleet.targets(n), "guard")
        return {"wall_s": _timed(argv, FAB_CWD, fab_env())[0]}

    def fab_drain(n: int) -> dict[str, float]:
        status = workdir / f"fab-status-{n}.json"
        argv = fab_argv(
            config,
            fleet.key_path,
            fleet.targets(n),
            "drain",
            "--poll-s",
            str(POLL_S),
            "--deadline-s",
            str(DRAIN_S),
            "--status-file",
            str(status),
        )
        return _drain(argv, FAB_CWD, fab_env(), status, fleet, n)

    def ansible_drain(n: int) -> dict[str, float]:
        work = Path(workdir / f"ansible-{n}")
        work.mkdir(exist_ok=True)
        argv = [
            "ansible-playbook",
            "-f",
            str(FORKS),
            "-i",
            str(inventories[n]),
            "playbooks/drain.yml",
        ]
        status = workdir / f"ansible-status-{n}.json"
        return _drain(argv, REPO, ansible_env(work), status, fleet, n)

    kinds: dict[str, Callable[[int], dict[str, float]]] = {
        kind: functools.partial(alone, kind) for kind in commands
    }
    if "fab" in fronts:
        kinds.update({"fab guard": fab_guard, "fab drain": fab_drain})
    if "ansible" in fronts:
        kinds["ansible drain.yml"] = ansible_drain
    for measure in kinds.values():  # warm-up: caches, ansible's collection loading
        measure(sizes[-1])
    for rep in range(reps):
        order = [(kind, n) for n in sizes for kind in kinds]
        for kind, n in order if rep % 2 == 0 else list(reversed(order)):
            runs.setdefault((kind, n), []).append(kinds[kind](n))
        log(f"  fleet: round {rep + 1}/{reps}")
    return _report(runs, sizes, reps, list(kinds))


def _med(runs: list[dict[str, float]], key: str) -> float:
    return median([r[key] for r in runs])


def _per_extra_host(
    runs: dict[tuple[str, int], list[dict[str, float]]], kind: str, n: int
) -> float:
    return (_med(runs[(kind, n)], "wall_s") - _med(runs[(kind, 1)], "wall_s")) / (n - 1)


def _report(
    runs: dict[tuple[str, int], list[dict[str, float]]],
    sizes: list[int],
    reps: int,
    kinds: list[str],
) -> tuple[Section, list[Finding]]:
    section = Section(
        "3. A fleet: the database's load and the operator's wait, 1..N hosts",
        [
            "run",
            "hosts",
            "median wall time",
            "per extra host (vs Fabric alone)",
            "backends held",
            "polls/s at the database",
            "every host's first verdict",
        ],
    )
    findings: list[Finding] = []
    for kind in kinds:
        for n in sizes:
            got = runs[(kind, n)]
            per_host = "-"
            if n > 1:
                mine, plain = (
                    _per_extra_host(runs, kind, n),
                    _per_extra_host(runs, "fabric alone", n),
                )
                per_host = f"{fmt_s(mine)} ({fmt_ratio(mine / plain)})"
            drained = "backends" in got[0]
            section.rows.append(
                [
                    kind,
                    str(n),
                    fmt_s(_med(got, "wall_s")),
                    per_host,
                    str(max(int(r["backends"]) for r in got)) if drained else "-",
                    f"{_med(got, 'polls_per_s'):.2f}" if drained else "-",
                    fmt_s(_med(got, "first_verdicts_s")) if drained else "-",
                ]
            )
            if drained:
                findings += _drain_findings(runs, kind, n)
        if kind.startswith("fab ") and sizes[-1] > 1:
            n = sizes[-1]
            mine = _per_extra_host(runs, kind, n)
            ratio = mine / _per_extra_host(runs, "fabric alone", n)
            control = mine / _per_extra_host(runs, "fabric running the lookups", n)
            findings.append(
                Finding(
                    "3. fleet",
                    f"{kind}: per extra host vs Fabric alone running `true` ({n} hosts)",
                    fmt_ratio(ratio),
                    "<= 1.20x",
                    ratio <= 1.2,
                    f"{fmt_ratio(control)} Fabric alone running the lookups' reads at once: the "
                    "hosts' lookups (grep, cat, /proc reads, date) share the 2 cores",
                )
            )
    section.notes += [
        f"{reps} repetitions, every run and size rotated within each repetition (order reversed "
        f"every other one), after one warm-up of each. Drains wait {DRAIN_S:g} s on a live claim "
        f"(poll {POLL_S:g} s) and end at their deadline. Fabric alone: a ThreadingGroup running "
        "`true` (or the lookups' reads, the control) on the same hosts, key and known_hosts.",
        "Polls/s at the database: the drain database's committed transactions from every host's "
        f"first verdict to the end (one poll is one transaction; one per interval is "
        f"{1 / POLL_S:g}/s; PostgreSQL flushes the counts up to a second late, so the first "
        "poll's one-time reads may fall in). Every host's first verdict: from the process "
        "start until the status file has a row with a poll for every host.",
    ]
    return section, findings


def _drain_findings(
    runs: dict[tuple[str, int], list[dict[str, float]]], kind: str, n: int
) -> list[Finding]:
    got = runs[(kind, n)]
    backends = max(int(r["backends"]) for r in got)
    polls = _med(got, "polls_per_s")
    first = _med(got, "first_verdicts_s")
    reach = _med(runs[("fabric alone", n)], "wall_s")
    fab = kind.startswith("fab")
    return [
        Finding("3. fleet", f"{kind}, {n} hosts: backends held", str(backends), "1", backends == 1),
        Finding(
            "3. fleet",
            f"{kind}, {n} hosts: polls/s at the database",
            f"{polls:.2f}",
            f"about {1 / POLL_S:g}/s (one per poll interval)",
            polls <= 1.5 / POLL_S,
        ),
        Finding(
            "3. fleet",
            f"{kind}, {n} hosts: every host's first verdict",
            fmt_s(first),
            f"<= Fabric alone reaching every host ({fmt_s(reach)}) + one poll",
            first <= reach + POLL_S if fab else None,
            "" if fab else "ansible-playbook's own start and its lookup task come first",
        ),
    ]
