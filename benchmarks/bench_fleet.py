"""Item 3: a fleet - `fab -H h1..hN guard` and `ansible-playbook` (guard role, forks 25) over
1, 20 and 50 hosts, side by side in one run.

Every host is its own network namespace with its own sshd and nothing else: no container per
host, so that 2 cores can hold 50 of them. The per-host lookups are real and run on each host
over SSH - the task timeout from an env file, the runtime's start from a pid file's process
(`env_file` and `process` sources) - and every host judges the one shared PostgreSQL (in the
root namespace) through its own SSH tunnel, as the app servers of a fleet share a database.
The fronts and the sizes rotate within every repetition, so load drift hits them all alike.

Besides wall time, each run's controller CPU (user + system of the `fab` or
`ansible-playbook` process and everything it waited for: Ansible's forks and their ssh
clients) and the whole machine's busy share over the run (/proc/stat) are recorded: they say
whether a size is bound by the controller's own work or by the shared machine's CPUs, which
here also run every host's sshd and Python.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_one_host import IMPORTS, SHELL_GUARD
from benchmarks.common import REPO, Finding, Section, fmt_ratio, fmt_s, median, spread
from benchmarks.infra import (
    FAB_CWD,
    LIVE_ROWS,
    PARAMIKO_KEX,
    Fleet,
    create_active_rows,
    create_database,
    drop_database,
    fab_argv,
    fab_env,
    grow_history,
    vacuum_and_index,
)
from leaseguard.core.contract import contract_from_mapping
from leaseguard.core.one_exec import batch_script, planned_commands
from leaseguard.fabric.guard_task import JUDGING_CODE
from sandbox.ansible_env import ansible_env
from sandbox.pgcluster import PG_BIN

DBNAME = "bench_fleet"
HISTORY_ROWS = 100_000
FORKS = 25
# The control: Ansible's OpenSSH client with the kex fab's paramiko negotiates here.
ANSIBLE_FAB_KEX = "ansible (fab's kex)"
# The engines alone, without leaseguard (see _controls): what a host costs them on this machine.
FABRIC_ALONE = "fabric alone (control)"
ANSIBLE_ALONE = "ansible alone (control)"
FRONTS = ("fab", "ansible", ANSIBLE_FAB_KEX, FABRIC_ALONE, ANSIBLE_ALONE)
# Each front's engine control: its per-extra-host cost is a floor for the front's own.
FLOOR_OF = {"fab": FABRIC_ALONE, "ansible": ANSIBLE_ALONE}
TARGETS = {20: 2.0, 50: 3.0}
JUDGE_TASK = "Judge the claims by the system's own lease"

GATE_PLAY = """
- name: The gate over the fleet
  hosts: app
  gather_facts: false
  roles:
    - role: leaseguard.deploy.guard
"""

CONTROL_PLAY = """
- name: Ansible alone, a control
  hosts: app
  gather_facts: false
  tasks:
    - name: The guard's lookup script and the shell guard's judgment, one raw exec per host
      ansible.builtin.raw: sh {script}
"""
# The shell guard's judgment, run on the host itself: psql straight to the database, no tunnel.
# Like every host of the fronts, it must find the live claims (exit 1 when it finds none).
CONTROL_JUDGMENT = """
live=$({psql} -X -A -t -q -v ON_ERROR_STOP=1 -v started={started} -v lease_s={lease_s} \\
    {conninfo} <<'SQL'
{judgment}
SQL
) && [ "$live" -gt 0 ]
"""


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # the controller process and every child it waited for
    busy: float  # share of the machine's CPU time spent busy during the run (0..1)
    fleet_cpu_s: float = 0.0  # the hosts' sshd trees and PostgreSQL during the run


def tree_cpu_s(roots: list[int]) -> float:
    """CPU time so far of the processes under `roots` (their own time not included).

    A root's cutime/cstime hold every descendant it or its children reaped; the descendants
    still alive (an SSH session kept open by ControlPersist, a backend) add their own time.
    """
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            stats[int(entry.name)] = text.rsplit(")", 1)[1].split()
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
    ticks = 0
    for root in roots:
        if root not in stats:
            continue
        ticks += int(stats[root][13]) + int(stats[root][14])  # cutime, cstime
        todo = list(children.get(root, []))
        while todo:
            pid = todo.pop()
            fields = stats[pid]
            ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
            todo += children.get(pid, [])
    return ticks / os.sysconf("SC_CLK_TCK")


def fleet_roots(fleet: Fleet) -> list[int]:
    """The hosts' sshd listeners and the shared PostgreSQL's postmaster."""
    pids = [int(h.sshd.pid_path.read_text().split()[0]) for h in fleet.hosts]
    postmaster = (fleet.db.data_dir / "postmaster.pid").read_text().split()[0]
    return [*pids, int(postmaster)]


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
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, roots: list[int]
) -> tuple[Run, int, str, str]:
    """Run `argv` to its end: wall time, its CPU time (wait4's rusage), the fleet's CPU
    time (the process trees under `roots`) and the machine's busy share."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        fleet0 = tree_cpu_s(roots)
        busy0, total0 = _cpu_jiffies()
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
        busy1, total1 = _cpu_jiffies()
        out.seek(0)
        err.seek(0)
        busy = (busy1 - busy0) / max(total1 - total0, 1)
        fleet_cpu = tree_cpu_s(roots) - fleet0
        run = Run(wall, usage.ru_utime + usage.ru_stime, busy, fleet_cpu)
        return run, process.returncode, out.read(), err.read()


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat's `cpu` line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


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
    roots = fleet_roots(fleet)
    problems: list[str] = []

    def fab(n: int) -> Run:
        argv = fab_argv(config, fleet.key_path, fleet.targets(n), "guard")
        run, code, out, err = measured(argv, cwd=FAB_CWD, env=fab_env(), timeout=300, roots=roots)
        defers = sum("decision=defer" in line for line in out.splitlines())
        if code != 75 or defers != n:
            others = [line for line in out.splitlines() if "decision=defer" not in line]
            said = " | ".join([*others[-3:], err[-300:]])
            problems.append(f"fab, {n} hosts: exit {code}, {defers}/{n} defer: {said}")
        return run

    def ansible(n: int, front: str = "ansible", **env: str) -> Run:
        work = Path(tempfile.mkdtemp(prefix="ansible-", dir=workdir))
        argv = ["ansible-playbook", "-f", str(FORKS), "-i", str(inventories[n]), str(playbook)]
        run, code, out, _ = measured(
            argv, cwd=REPO, env=ansible_env(work, **env), timeout=600, roots=roots
        )
        decisions = _decisions(work / "results.json")
        defers = sum(d == "defer" for d in decisions.values())
        if code != 0 or defers != n:
            problems.append(f"{front}, {n} hosts: exit {code}, {defers}/{n} defer: {out[-300:]}")
        return run

    def ansible_fab_kex(n: int) -> Run:
        kex = f"-o KexAlgorithms={PARAMIKO_KEX}"
        return ansible(n, ANSIBLE_FAB_KEX, ANSIBLE_SSH_EXTRA_ARGS=kex)

    run_front = {"fab": fab, "ansible": ansible, ANSIBLE_FAB_KEX: ansible_fab_kex}
    run_front |= _controls(fleet, workdir, lookups, inventories, roots, problems)
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
    return _report(runs, sizes, reps, problems, fronts, _overlapped_import_s())


def _controls(
    fleet: Fleet,
    workdir: Path,
    lookups: dict[str, Any],
    inventories: dict[int, Path],
    roots: list[int],
    problems: list[str],
) -> dict[str, Callable[[int], Run]]:
    """The engines alone: per host the least a front's guard does through that engine.

    Both look the host up (leaseguard's one-exec script) and judge its claims once (the
    shell guard's hand-written query). `fabric alone`: benchmarks.fleet_control (SSH
    connection, the script in one exec, Fabric's forward_local to the database, psycopg
    connect, the query). `ansible alone`: a play of one raw task per host (Ansible's cheapest
    task) running the script and then the query with psql, from the host straight to the
    database: no tunnel, no module. Same hosts, same script, same judgment.
    """
    # Any start before the live claims (made minutes ago) counts them live.
    started = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    lease_s = 7200
    script = _lookup_script(lookups)
    lookup = workdir / "lookup.sh"
    lookup.write_text(script)
    judged = workdir / "lookup-and-judgment.sh"
    judged.write_text(script + _control_judgment(fleet, started, lease_s))
    play = workdir / "control.yml"
    play.write_text(CONTROL_PLAY.format(script=judged))

    def fabric_alone(n: int) -> Run:
        spec = workdir / f"control-{n}.json"
        spec.write_text(
            json.dumps(
                {
                    "hosts": fleet.targets(n),
                    "key": str(fleet.key_path),
                    "known_hosts": str(fleet.known_hosts),
                    "command": f"sh {lookup}",
                    "db_host": fleet.db_addr,
                    "db_port": fleet.db.port,
                    "dsn": f"dbname={DBNAME} user=postgres",
                    "started": started,
                    "lease_s": lease_s,
                }
            )
        )
        argv = [sys.executable, "-m", "benchmarks.fleet_control", str(spec)]
        run, code, out, err = measured(argv, cwd=REPO, env=fab_env(), timeout=300, roots=roots)
        if code != 0 or out.count("ok ") != n:
            problems.append(f"{FABRIC_ALONE}, {n} hosts: exit {code}: {err[-300:]}")
        return run

    def ansible_alone(n: int) -> Run:
        work = Path(tempfile.mkdtemp(prefix="ansible-", dir=workdir))
        argv = ["ansible-playbook", "-f", str(FORKS), "-i", str(inventories[n]), str(play)]
        env = ansible_env(work)
        run, code, out, _ = measured(argv, cwd=REPO, env=env, timeout=600, roots=roots)
        if code != 0 or out.count(" failed=0 ") != n:
            problems.append(f"{ANSIBLE_ALONE}, {n} hosts: exit {code}: {out[-300:]}")
        return run

    return {FABRIC_ALONE: fabric_alone, ANSIBLE_ALONE: ansible_alone}


def _lookup_script(lookups: dict[str, Any]) -> str:
    """The one-exec script leaseguard runs on each host for these lookups (and the clock)."""
    plan = planned_commands(contract_from_mapping(lookups), timeout_given=False, start_given=False)
    return batch_script(plan.commands, secrets.token_hex(8), plan.on_pid)


def _control_judgment(fleet: Fleet, started: str, lease_s: int) -> str:
    """psql on the host running shell_guard.sh's judgment (its heredoc) on the database."""
    heredoc = SHELL_GUARD.read_text().split("<<'SQL'\n", 1)[1].split("\nSQL\n", 1)[0]
    conninfo = f"host={fleet.db_addr} port={fleet.db.port} dbname={DBNAME} user=postgres"
    return CONTROL_JUDGMENT.format(
        psql=PG_BIN / "psql",
        started=shlex.quote(started),
        lease_s=lease_s,
        conninfo=shlex.quote(conninfo),
        judgment=heredoc,
    )


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
    overlapped_s: float,
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
            "hosts + database CPU",
            "CPU floor on this machine",
            "machine busy",
        ],
    )
    findings: list[Finding] = []
    for front in fronts:
        one = median([r.wall_s for r in runs[(front, 1)]])
        for n in sizes:
            got = runs[(front, n)]
            wall = median([r.wall_s for r in got])
            cpu = median([r.cpu_s for r in got])
            busy = median([r.busy for r in got])
            fleet_cpu = median([r.fleet_cpu_s for r in got])
            floor = (cpu + fleet_cpu) / _cpus()
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
                    fmt_s(fleet_cpu),
                    fmt_s(floor),
                    f"{busy * 100:.0f}%",
                ]
            )
            target = TARGETS.get(n)
            if target is None or front in FLOOR_OF.values():
                continue
            bad = [p for p in problems if p.startswith(f"{front}, {n} hosts")]
            allowance = overlapped_s if front == "fab" else 0.0
            budget = one * (target - 1) / (n - 1)
            engine, out_of_reach = _engine_floor(runs, front, n, budget, allowance)
            if not out_of_reach and (cpu_floor := _engine_cpu_floor(runs, front, n, one * target)):
                engine, out_of_reach = engine + cpu_floor, True
            findings.append(
                Finding(
                    "3. fleet",
                    f"{front}: {n} hosts vs 1 host (median wall time)",
                    f"{fmt_s(wall)} vs {fmt_s(one)} ({fmt_ratio(wall / one)})",
                    f"<= {target:.2f}x",
                    wall / one <= target and not bad,
                    f"controller CPU {fmt_s(cpu)}, hosts + database {fmt_s(fleet_cpu)}: "
                    f"floor {fmt_s(floor)} on {_cpus()} CPUs = {fmt_ratio(floor / one)} of "
                    f"1 host; machine {busy * 100:.0f}% busy{engine}"
                    + ("; all decisions as expected" if not bad else "; unexpected decisions"),
                    out_of_reach=out_of_reach,
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
        f"`{ANSIBLE_FAB_KEX}`, a control: the `ansible` runs with Ansible's ssh client given "
        f"`-o KexAlgorithms={PARAMIKO_KEX}` (ANSIBLE_SSH_EXTRA_ARGS), the kex fab's paramiko "
        "negotiates with these OpenSSH 9.2 hosts. OpenSSH 9.2's own default, the "
        "post-quantum sntrup761x25519, costs its client ~90 ms of CPU per connection here "
        "(a reference implementation; OpenSSH 9.9's mlkem768x25519 is far cheaper): a cost "
        "of the SSH engine that each host's first Ansible connection pays, not leaseguard's.",
        f"`{FABRIC_ALONE}` and `{ANSIBLE_ALONE}`: the engines without leaseguard, same hosts, "
        "same lookup script (leaseguard's one-exec script, written to a file the hosts share). "
        "Fabric alone (benchmarks/fleet_control.py, one process, a thread per host): SSH "
        "connection, the script in one exec, Fabric's forward_local to the database, psycopg "
        "connect and one judgment, the hand-written query of benchmarks/shell_guard.sh, "
        "close. Ansible alone: a play of one `ansible.builtin.raw` task per host (Ansible's "
        "cheapest task: no module, no Python on the host) running the script and then the "
        "same judgment with psql, from the host straight to the database (no tunnel). Both "
        "look each host up and judge its claims once: each is the least its front's guard "
        "does per host, so its time per extra "
        "host is a floor for the front's own: a target leaves (target - 1) x the front's 1-host "
        "time to the other hosts, and where the control alone takes more per extra host, no "
        "guard built on that engine meets the target on this machine (the summary says so); "
        "so too where the control's CPU at N hosts (controller + hosts + database), spread "
        "over every CPU, needs longer than the target's wall time: no run ends sooner than "
        "that, and the front spends at least its control's CPU. "
        "The one allowance: `fab guard` imports psycopg and its judging code while its hosts "
        f"start, which the control does before them; that overlap saves at most the "
        f"import's CPU time ({fmt_s(overlapped_s)}, measured in this run) once per run, and "
        "is granted to `fab` before a target is called out of reach.",
        "Controller CPU: user + system time of the controller process and the children it "
        "waited for (Ansible's forks, their ssh clients and the modules' local parts), from "
        "wait4; `CPUs` = that over wall time. Hosts + database CPU: what the hosts' sshd "
        "(SSH sessions, the remote lookups and Ansible's modules) and PostgreSQL spent during "
        "the run (the process trees under each sshd listener and the postmaster, /proc). CPU "
        "floor: (controller + hosts + database CPU) / CPUs, the shortest wall time this "
        "machine could give the run even with nothing else running. Machine busy: the whole "
        "machine's non-idle CPU "
        f"share over the run (/proc/stat), on {_cpus()} CPUs that also run every host's sshd "
        "and remote Python, PostgreSQL and whatever else runs on this machine. Near 100%, a "
        "size is bound by the shared CPUs, not by waiting; the controller's share says how "
        "much of that a real fleet (N machines) would still pay on the controller.",
    ]
    if problems:
        section.notes.append("Unexpected outcomes: " + "; ".join(sorted(set(problems))[:6]))
    return section, findings


def _engine_floor(
    runs: dict[tuple[str, int], list[Run]],
    front: str,
    n: int,
    budget_s: float,
    allowance_s: float,
) -> tuple[str, bool]:
    """The target's time per extra host against what the engine alone takes per extra host.

    A target leaves (target - 1) x the 1-host time to the other n - 1 hosts. Every host of
    the front does at least what its engine's control does, on the same shared CPUs: when the
    control alone takes more than that per extra host, no guard built on that engine meets
    the target on this machine. `allowance_s`: work the front overlaps with its hosts that
    the control does before them (fab's psycopg import), granted once per run. Returns the
    note's text and whether the target is out of reach.
    """
    control = FLOOR_OF.get(front)
    if control is None or (control, n) not in runs or (control, 1) not in runs:
        return "", False
    one = median([r.wall_s for r in runs[(control, 1)]])
    extra = (median([r.wall_s for r in runs[(control, n)]]) - one) / (n - 1)
    left = budget_s + allowance_s / (n - 1) - extra
    granted = f" ({fmt_s(allowance_s)} of fab's import granted once)" if allowance_s else ""
    said = f"; the target leaves {fmt_s(budget_s)} per extra host, {control} takes {fmt_s(extra)}"
    if left <= 0:
        return f"{said}{granted}: out of reach here", True
    return (
        f"{said}{granted}: {fmt_s(left)} per extra host left for all leaseguard adds "
        f"({_added_per_host(runs, front, control, n)})",
        False,
    )


def _engine_cpu_floor(
    runs: dict[tuple[str, int], list[Run]], front: str, n: int, target_s: float
) -> str:
    """The target's wall time against the CPU the engine's control alone spends at n hosts.

    No run ends sooner than its CPU time spread over every CPU of the machine (the hosts,
    the database and the controller share them here). The front spends at least its
    control's CPU - the same imports, connections, lookups and judgment, plus its own: when
    the control's CPU alone needs longer than the target allows, the target is out of reach
    on this machine, however the front overlaps its work. Returns the note's text when it
    is, else "".
    """
    control = FLOOR_OF.get(front)
    if control is None or (control, n) not in runs:
        return ""
    got = runs[(control, n)]
    cpu = median([r.cpu_s for r in got]) + median([r.fleet_cpu_s for r in got])
    floor = cpu / _cpus()
    if floor <= target_s:
        return ""
    return (
        f"; {control} spends {fmt_s(cpu)} of CPU at {n} hosts: at least "
        f"{fmt_s(floor)} on {_cpus()} CPUs, more than the target's {fmt_s(target_s)}: out of "
        "reach here"
    )


def _added_per_host(
    runs: dict[tuple[str, int], list[Run]], front: str, control: str, n: int
) -> str:
    """CPU per host the front spends beyond its engine's control, controller and hosts apart."""

    def added(cpu: Callable[[Run], float]) -> float:
        spent = (median([cpu(r) for r in runs[(key, n)]]) for key in (front, control))
        return (next(spent) - next(spent)) / n

    return (
        f"here it adds {fmt_s(added(lambda r: r.cpu_s))} of controller and "
        f"{fmt_s(added(lambda r: r.fleet_cpu_s))} of hosts' and database CPU per host, "
        f"on {_cpus()} CPUs"
    )


def _overlapped_import_s() -> float:
    """CPU time of what `fab guard` imports while its hosts start (guard_task.JUDGING_CODE,
    after the collection's imports): the most that overlap can save a run."""
    probe = (
        f"import time; {IMPORTS}\n"
        "start = time.process_time()\n"
        f"import {JUDGING_CODE}\n"
        "print(time.process_time() - start)"
    )
    argv = [sys.executable, "-c", probe]
    return median(
        [
            float(subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO).stdout)
            for _ in range(3)
        ]
    )


def _cpus() -> int:
    return os.cpu_count() or 1
