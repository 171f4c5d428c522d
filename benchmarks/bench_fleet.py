"""Item 3: a fleet - `fab -H h1..hN guard` and `ansible-playbook` (guard role, forks 25) over
1, 20 and 50 hosts, side by side in one run.

Every host is its own network namespace with its own sshd and nothing else: no container per
host, so that 2 cores can hold 50 of them. The per-host lookups are real and run on each host
over SSH - the task timeout from an env file, the runtime's start from a pid file's process
(`env_file` and `process` sources) - and every host judges the one shared PostgreSQL (in the
root namespace) through its own SSH tunnel, as the app servers of a fleet share a database.
The fronts and the sizes rotate within every repetition, so load drift hits them all alike.
Besides wall time, each run's controller CPU (user + system of the `fab` or
`ansible-playbook` process and everything it waited for) is recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import REPO, Finding, Section, fmt_ratio, fmt_s, median, spread
from benchmarks.infra import (
    FAB_CWD,
    LIVE_ROWS,
    Fleet,
    create_active_rows,
    create_database,
    drop_database,
    fab_argv,
    fab_env,
    grow_history,
    vacuum_and_index,
)
from sandbox.ansible_env import ansible_env

DBNAME = "bench_fleet"
HISTORY_ROWS = 100_000
FORKS = 25
FRONTS = ("fab", "ansible")
TARGETS = {20: 2.0, 50: 3.0}
JUDGE_TASK = "Judge the claims by the system's own lease"

GATE_PLAY = """
- name: The gate over the fleet
  hosts: app
  gather_facts: false
  roles:
    - role: leaseguard.deploy.guard
"""


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # the controller process and every child it waited for


def run_bench(
    fleet: Fleet,
    workdir: Path,
    *,
    quick: bool,
    log: Callable[[str], None],
    fronts: tuple[str, ...] = FRONTS,
) -> tuple[Section, list[Finding]]:
    """`fronts`: a subset of FRONTS, e.g. ("fab",) to measure one front's change alone."""
    create_database(fleet.db, DBNAME)
    try:
        with fleet.db.connect(DBNAME, socket=True) as conn:
            create_active_rows(conn)
            grow_history(conn, HISTORY_ROWS)
            vacuum_and_index(conn)
        return _measure(fleet, workdir, 2 if quick else 4, log, fronts)
    finally:
        drop_database(fleet.db, DBNAME)


def _lookups(workdir: Path) -> dict[str, Any]:
    """An env file and a pid file every host reads over SSH (namespaces share the files).

    The runtime is this benchmark's own process, started before the live claims were made.
    """
    env_file, pid_file = workdir / "app.env", workdir / "app.pid"
    env_file.write_text("APP_TASK_TIMEOUT_S=3600\n")
    pid_file.write_text(f"{os.getpid()}\n")
    return {
        "task_timeout": {"source": "env_file", "path": str(env_file)},
        "runtime": {"source": "process", "pid_file": str(pid_file)},
    }


def _fab_config(fleet: Fleet, workdir: Path, lookups: dict[str, Any]) -> Path:
    path = workdir / "fabric-fleet.yaml"
    connection = {
        "dsn": f"dbname={DBNAME} user=postgres",
        "known_hosts": str(fleet.known_hosts),
        "db_host": fleet.db_addr,
        "db_port": fleet.db.port,
    }
    path.write_text(yaml.safe_dump({"leaseguard": {"connection": connection, **lookups}}))
    return path


def _inventory(fleet: Fleet, workdir: Path, lookups: dict[str, Any], n: int) -> Path:
    path = workdir / f"fleet-{n}.yml"
    hosts = {h.alias: h.ansible_host_vars() for h in fleet.hosts[:n]}
    group = {
        "leaseguard_db_host": fleet.db_addr,
        "leaseguard_db_port": fleet.db.port,
        "leaseguard_db_name": DBNAME,
        "leaseguard_db_user": "postgres",
        "leaseguard_task_timeout": lookups["task_timeout"],
        "leaseguard_runtime": lookups["runtime"],
    }
    path.write_text(yaml.safe_dump({"app": {"hosts": hosts, "vars": group}}))
    return path


def measured(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> tuple[Run, int, str, str]:
    """Run `argv` to its end: wall time and its CPU time (wait4's rusage)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        killer = threading.Timer(timeout, process.kill)
        killer.start()
        try:
            # wait4, not Popen.wait: it returns the child's resource usage too.
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            killer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        run = Run(wall, usage.ru_utime + usage.ru_stime)
        return run, process.returncode, out.read(), err.read()


def _measure(
    fleet: Fleet, workdir: Path, reps: int, log: Callable[[str], None], fronts: tuple[str, ...]
) -> tuple[Section, list[Finding]]:
    lookups = _lookups(workdir)
    config = _fab_config(fleet, workdir, lookups)
    playbook = workdir / "gate_fleet.yml"
    playbook.write_text(GATE_PLAY)
    sizes = sorted({1, min(20, len(fleet.hosts)), len(fleet.hosts)})
    inventories = {n: _inventory(fleet, workdir, lookups, n) for n in sizes}
    runs: dict[tuple[str, int], list[Run]] = {(f, n): [] for f in fronts for n in sizes}
    problems: list[str] = []

    def fab(n: int) -> Run:
        argv = fab_argv(config, fleet.key_path, fleet.targets(n), "guard")
        run, code, out, err = measured(argv, cwd=FAB_CWD, env=fab_env(), timeout=300)
        defers = sum("decision=defer" in line for line in out.splitlines())
        if code != 75 or defers != n:
            others = [line for line in out.splitlines() if "decision=defer" not in line]
            said = " | ".join([*others[-3:], err[-300:]])
            problems.append(f"fab, {n} hosts: exit {code}, {defers}/{n} defer: {said}")
        return run

    def ansible(n: int) -> Run:
        work = Path(tempfile.mkdtemp(prefix="ansible-", dir=workdir))
        argv = ["ansible-playbook", "-f", str(FORKS), "-i", str(inventories[n]), str(playbook)]
        run, code, out, _ = measured(argv, cwd=REPO, env=ansible_env(work), timeout=600)
        decisions = _decisions(work / "results.json")
        defers = sum(d == "defer" for d in decisions.values())
        if code != 0 or defers != n:
            problems.append(f"ansible, {n} hosts: exit {code}, {defers}/{n} defer: {out[-300:]}")
        return run

    run_front = {"fab": fab, "ansible": ansible}
    for front in fronts:  # warm-up: caches, ansible's collection loading
        run_front[front](sizes[-1])
    for rep in range(reps):
        order = [(f, n) for n in sizes for f in fronts]
        for front, n in order if rep % 2 == 0 else list(reversed(order)):
            runs[(front, n)].append(run_front[front](n))
        log(f"  fleet: round {rep + 1}/{reps}")
    log(
        "  fleet: "
        + ", ".join(
            f"{f} {n} hosts {fmt_s(median([r.wall_s for r in runs[(f, n)]]))}"
            for f in fronts
            for n in sizes
        )
    )
    return _report(runs, sizes, reps, problems, fronts)


def _decisions(results: Path) -> dict[str, str]:
    """Each host's decision from the results_file callback's report of the judge task."""
    found: dict[str, str] = {}
    try:
        report = json.loads(results.read_text())
    except (OSError, ValueError):
        return found
    for play in report.get("plays", []):
        for task in play.get("tasks", []):
            if task["task"]["name"].rpartition(" : ")[2] == JUDGE_TASK:
                for host, result in task["hosts"].items():
                    found[host] = str(result.get("decision"))
    return found


def _report(
    runs: dict[tuple[str, int], list[Run]],
    sizes: list[int],
    reps: int,
    problems: list[str],
    fronts: tuple[str, ...],
) -> tuple[Section, list[Finding]]:
    section = Section(
        f"3. A fleet: `fab guard` and `ansible-playbook` (guard role, forks {FORKS}) over "
        "1..N hosts",
        [
            "front",
            "hosts",
            "median wall time",
            "min..max",
            "vs 1 host",
            "per extra host",
            "controller CPU",
        ],
    )
    findings: list[Finding] = []
    for front in fronts:
        one = median([r.wall_s for r in runs[(front, 1)]])
        for n in sizes:
            got = runs[(front, n)]
            wall = median([r.wall_s for r in got])
            cpu = median([r.cpu_s for r in got])
            extra = fmt_s((wall - one) / (n - 1)) if n > 1 else "-"
            section.rows.append(
                [
                    front,
                    str(n),
                    fmt_s(wall),
                    spread([r.wall_s for r in got]),
                    fmt_ratio(wall / one),
                    extra,
                    f"{fmt_s(cpu)} ({cpu / wall:.2f} CPUs)",
                ]
            )
            target = TARGETS.get(n)
            if target is None:
                continue
            bad = [p for p in problems if p.startswith(f"{front}, {n} hosts")]
            findings.append(
                Finding(
                    "3. fleet",
                    f"{front}: {n} hosts vs 1 host (median wall time)",
                    f"{fmt_s(wall)} vs {fmt_s(one)} ({fmt_ratio(wall / one)})",
                    f"<= {target:.2f}x",
                    wall / one <= target and not bad,
                    f"controller CPU {fmt_s(cpu)} on {os.cpu_count() or 1} CPUs shared with "
                    "every host's sshd and the database"
                    + ("; all decisions as expected" if not bad else "; unexpected decisions"),
                )
            )
    section.notes += [
        f"{reps} repetitions, every front and size rotated within each repetition (order "
        "reversed every other one), after one warm-up run of each front. `fab`: a whole "
        "`python -m fabric -H h1,...,hN guard` process (SSH connection, the lookups, a tunnel "
        "and one check per host). `ansible`: a whole `ansible-playbook -f "
        f"{FORKS}` process running the guard role (one lease_guard task per host: the "
        "lookups as one command on the host, the check through its tunnel). Every host's "
        f"decision must be defer ({LIVE_ROWS} live claims).",
        "Hosts: a network namespace with sshd only; lookups `env_file` (the task timeout) and "
        "`process` (the runtime's start from a pid file) run on each host over SSH. One "
        "PostgreSQL for all, reached through each host's own tunnel.",
    ]
    if problems:
        section.notes.append("Unexpected outcomes: " + "; ".join(sorted(set(problems))[:6]))
    return section, findings
