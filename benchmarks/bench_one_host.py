"""Item 2: one host end to end - `fab guard` against the hand-written shell guard.

Both do the same work on the harness host `pg1` (real sshd in a namespace, the podman
engine behind `docker`, PostgreSQL on the host's own loopback): look up the task timeout
and the container's start time with `docker inspect backend`, open an SSH tunnel, judge
the table. The runs rotate (fab, shell, control; then shell, control, fab; ...) so
that drift in the machine's load hits all of them, and the guards' decisions are compared
on a table that must defer and on one that must proceed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import REPO, Finding, Section, fmt_ratio, fmt_s, median, run, spread
from benchmarks.infra import (
    FAB_CWD,
    PARAMIKO_KEX,
    create_active_rows,
    create_database,
    drop_database,
    fab_argv,
    fab_env,
    grow_history,
    set_live,
    vacuum_and_index,
    write_fabric_config,
)
from sandbox.hosts import AppHost
from sandbox.netns import free_port
from sandbox.subprocess_env import clean_env

DBNAME = "bench_guard"
SHELL_GUARD = REPO / "benchmarks" / "shell_guard.sh"
HISTORY_ROWS = 100_000
DECISIONS = {0: "proceed", 75: "defer"}
# As a fabfile loads them.
IMPORTS = "import fabric.main, leaseguard.fabric.tasks; leaseguard.fabric.tasks.collection()"
SHELL_SAME_KEX = "shell guard, fab's kex"

Guard = Callable[[], str]  # runs one guard, returns its decision


def run_bench(
    setups: list[tuple[str, AppHost]], workdir: Path, reps: int, log: Callable[[str], None]
) -> tuple[Section, list[Finding]]:
    """`setups`: (label, host) pairs, e.g. a host whose login shell rc is skipped and one
    that keeps this machine's."""
    section = Section(
        "2. One host end to end: `fab guard` vs a hand-written shell guard",
        [
            "host login shell",
            "guard",
            "median wall time",
            "min..max",
            "vs shell guard",
            "decisions (defer / proceed)",
        ],
    )
    findings: list[Finding] = []
    # First: no fab run can take less than its interpreter's start and imports.
    imports = [_python_imports() for _ in range(reps)]
    for label, host in setups:
        assert host.pg is not None
        create_database(host.pg, DBNAME)
        try:
            with host.pg.connect(DBNAME, socket=True) as conn:
                create_active_rows(conn)
                grow_history(conn, HISTORY_ROWS)
                vacuum_and_index(conn)
            findings += _measure(label, host, workdir, reps, section, log, median(imports))
        finally:
            drop_database(host.pg, DBNAME)
    section.rows.append(
        ["-", f"(python start + `{IMPORTS}`)", fmt_s(median(imports)), spread(imports), "", "-"]
    )
    section.notes += [
        f"{reps} runs of each guard per table state (one that must defer, one that must "
        "proceed), rotated. Hosts: sshd in a network namespace, `docker` driving the podman "
        "engine, PostgreSQL on the host's own 127.0.0.1:5432; a table of "
        f"{HISTORY_ROWS:,} rows with the recommended index.",
        "fab guard: `python -m fabric -H root@host guard` (process start, imports, one SSH "
        "connection, one exec running `docker inspect backend` and `date` for the clock "
        "offset while the tunnel is set up, the check, the once-per-session plan check). "
        "Shell guard: benchmarks/shell_guard.sh "
        "(`ssh host docker inspect`, `ssh -f -N -M -L`, `psql`, `ssh -O exit`).",
        f"{SHELL_SAME_KEX} (a control): the same script, its ssh given "
        f"`KexAlgorithms {PARAMIKO_KEX}`, the kex fab's paramiko negotiates with this "
        "OpenSSH 9.2 sshd. The shell guard as written gets OpenSSH 9.2's default, the "
        "post-quantum sntrup761x25519, whose reference implementation costs the client "
        "~90 ms of CPU per connection here, twice per run; paramiko has no sntrup761 "
        "(its post-quantum kex, mlkem768x25519, needs OpenSSH 9.9). So `fab guard` beats "
        "the shell guard as a user writes it on this machine, not the same guard with the "
        "same kex: there, Python's start and Fabric's imports alone take about as long as "
        "the whole shell guard.",
        "Login shell: this machine's /root/.bashrc runs `pyenv init` (~160 ms), and bash "
        "sources it for every command run over SSH. `rc skipped` hosts set SHLVL=1 in the "
        "session (sshd SetEnv), so bash skips it, as on an app server whose root has no "
        "pyenv; `this machine's rc` hosts keep it. leaseguard runs one command per host "
        "(`docker inspect` and `date` in one exec), as the shell guard does (its tunnel runs "
        "none).",
        f"python start + imports: `python -c '{IMPORTS}'` alone (measured first): what "
        "every fab run pays before its hosts start. The collection imports no psycopg: "
        "`fab guard` starts each host's SSH connection and lookups first, then imports "
        "psycopg and the judging code (~150 ms of CPU) while the hosts work.",
    ]
    return section, findings


def _measure(
    label: str,
    host: AppHost,
    workdir: Path,
    reps: int,
    section: Section,
    log: Callable[[str], None],
    imports_s: float,
) -> list[Finding]:
    assert host.pg is not None
    config = write_fabric_config(
        workdir / f"fabric-one-host-{host.sshd.alias}.yaml",
        dsn=f"dbname={DBNAME} user=postgres",
        known_hosts=host.known_hosts_path,
    )
    guards: dict[str, Guard] = {
        "fab guard": _fab_guard(config, host),
        "shell guard": _shell_guard(host.ssh_config_path, host),
        SHELL_SAME_KEX: _shell_guard(_same_kex_config(workdir, host), host),
    }
    times: dict[str, list[float]] = {name: [] for name in guards}
    decisions: dict[tuple[str, str], set[str]] = {}
    for guard in guards.values():  # warm-up: page cache, podman, sshd
        guard()
    names = list(guards)
    for expected in ("defer", "proceed"):
        with host.pg.connect(DBNAME, socket=True) as conn:
            set_live(conn, expected == "defer")
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                decision = guards[name]()
                times[name].append(time.perf_counter() - start)
                decisions.setdefault((name, expected), set()).add(decision)
    log(f"  one host ({label}): " + ", ".join(f"{n} {fmt_s(median(times[n]))}" for n in names))
    fab, shell, same_kex = (median(times[n]) for n in names)
    agree = all(decisions[(n, e)] == {e} for n in names for e in ("defer", "proceed"))
    for name in names:
        section.rows.append(
            [
                label,
                name,
                fmt_s(median(times[name])),
                spread(times[name]),
                fmt_ratio(median(times[name]) / shell),
                " / ".join(",".join(sorted(decisions[(name, e)])) for e in ("defer", "proceed")),
            ]
        )
    return [
        Finding(
            "2. one host",
            f"`fab guard` vs shell guard, median wall time ({label})",
            f"{fmt_s(fab)} vs {fmt_s(shell)} ({fmt_ratio(fab / shell)})",
            "<= 1.00x",
            fab <= shell,
            f"python start + the collection's imports {fmt_s(imports_s)}, psycopg imported "
            "once the host started",
        ),
        Finding(
            "2. one host",
            f"`fab guard` vs shell guard with fab's kex ({PARAMIKO_KEX}), control ({label})",
            f"{fmt_s(fab)} vs {fmt_s(same_kex)} ({fmt_ratio(fab / same_kex)})",
            "<= 1.00x",
            fab <= same_kex,
            "like for like: the shell guard's two OpenSSH connections without the "
            "post-quantum kex (sntrup761x25519) paramiko cannot negotiate here; floor: "
            f"python start + the collection's imports alone {fmt_s(imports_s)} "
            f"({fmt_ratio(imports_s / same_kex)} of it)",
        ),
        Finding(
            "2. one host",
            f"decisions agree: fab, shell; defer and proceed ({label})",
            "yes" if agree else "NO",
            "all agree",
            agree,
        ),
    ]


def _fab_guard(config: Path, host: AppHost) -> Guard:
    argv = fab_argv(config, host.client_key_path, [f"root@{host.addr}"], "guard")

    def guard() -> str:
        done = run(argv, cwd=FAB_CWD, env=fab_env(), timeout=120)
        return DECISIONS.get(done.returncode, f"failed({done.returncode})")

    return guard


def _same_kex_config(workdir: Path, host: AppHost) -> Path:
    """The host's ssh_config, with the kex paramiko negotiates here (ssh takes the first
    value it reads, so the line before the Include wins)."""
    path = workdir / f"ssh-config-same-kex-{host.sshd.alias}"
    path.write_text(f"KexAlgorithms {PARAMIKO_KEX}\nInclude {host.ssh_config_path}\n")
    return path


def _shell_guard(ssh_config: Path, host: AppHost) -> Guard:
    def guard() -> str:
        argv = ["bash", str(SHELL_GUARD), str(ssh_config), host.sshd.alias, DBNAME]
        done = run([*argv, str(free_port())], env=clean_env(), timeout=120)
        return DECISIONS.get(done.returncode, f"failed({done.returncode})")

    return guard


def _python_imports() -> float:
    start = time.perf_counter()
    run([sys.executable, "-c", IMPORTS], cwd=FAB_CWD, env=fab_env())
    return time.perf_counter() - start
