"""Item 2: one host end to end - `fab guard` against the hand-written shell guard, both
doing the same work on the harness host `pg1` (`docker inspect backend`, an SSH tunnel, the
judgment), rotated, on a table that must defer and on one that must proceed."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Finding, Section, fmt_ratio, fmt_s, median, run, spread
from benchmarks.infra import PARAMIKO_KEX, Install, fab_on_host, runs_database, set_live
from sandbox.hosts import AppHost
from sandbox.netns import free_port
from sandbox.subprocess_env import clean_env

DBNAME = "bench_guard"
SHELL_GUARD = REPO / "benchmarks" / "shell_guard.sh"
DECISIONS = {0: "proceed", 75: "defer"}
STATES = ("defer", "proceed")
SAME_KEX = "shell guard, fab's kex"

Guard = Callable[[], str]  # runs one guard, returns its decision


def _guard(argv: Callable[[], list[str]], **kwargs: Any) -> Guard:
    def guard() -> str:
        code = run(argv(), timeout=120, **kwargs).returncode
        return DECISIONS.get(code, f"failed({code})")

    return guard


def fab_guard(install: Install, host: AppHost, workdir: Path) -> Guard:
    argv = fab_on_host(install, host, DBNAME, workdir, "guard")
    return _guard(lambda: argv, cwd=install.root, env=install.env())


def shell_guard(host: AppHost, workdir: Path, kex: str | None = None) -> Guard:
    ssh_config = host.ssh_config_path
    if kex:  # ssh takes the first value it reads: the line before the Include wins
        ssh_config = workdir / f"ssh-config-{kex}-{host.sshd.alias}"
        ssh_config.write_text(f"KexAlgorithms {kex}\nInclude {host.ssh_config_path}\n")

    argv = ["bash", str(SHELL_GUARD), str(ssh_config), host.sshd.alias, DBNAME]
    return _guard(lambda: [*argv, str(free_port())], env=clean_env())


def race(
    host: AppHost, guards: dict[str, Guard], reps: int
) -> tuple[dict[str, list[float]], dict[tuple[str, str], set[str]]]:
    """Wall times of every guard, rotated, `reps` times per table state (in DBNAME, which
    the caller made with runs_database); the decisions each guard gave per state."""
    assert host.pg is not None
    times: dict[str, list[float]] = {name: [] for name in guards}
    decisions: dict[tuple[str, str], set[str]] = {}
    names = list(guards)
    for guard in guards.values():  # warm-up: page cache, podman, sshd
        guard()
    for expected in STATES:
        set_live(host.pg, DBNAME, expected == "defer")
        for rep in range(reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                start = time.perf_counter()
                decisions.setdefault((name, expected), set()).add(guards[name]())
                times[name].append(time.perf_counter() - start)
    return times, decisions


def run_bench(
    host: AppHost, workdir: Path, reps: int, log: Callable[[str], None]
) -> tuple[Section, list[Finding]]:
    assert host.pg is not None
    guards = {
        "fab guard": fab_guard(Install(), host, workdir),
        "shell guard": shell_guard(host, workdir),
        SAME_KEX: shell_guard(host, workdir, PARAMIKO_KEX),
    }
    with runs_database(host.pg, DBNAME):
        times, decisions = race(host, guards, reps)
    fab, shell, same_kex = (median(times[n]) for n in guards)
    log(f"  one host: fab {fmt_s(fab)}, shell {fmt_s(shell)}, same kex {fmt_s(same_kex)}")
    agree = all(decisions[(n, e)] == {e} for n in guards for e in STATES)
    section = Section(
        "2. One host end to end: `fab guard` vs a hand-written shell guard",
        ["guard", "median wall time", "min..max", "vs shell guard", "decisions (defer / proceed)"],
        [
            [
                name,
                fmt_s(median(times[name])),
                spread(times[name]),
                fmt_ratio(median(times[name]) / shell),
                " / ".join(",".join(sorted(decisions[(name, e)])) for e in STATES),
            ]
            for name in guards
        ],
        [
            f"{reps} runs of each guard per table state (must defer, must proceed), rotated, "
            "on 100,000 rows with the recommended index. Shell guard: benchmarks/shell_guard.sh "
            "(`ssh host docker inspect`, `ssh -f -N -M -L`, `psql`, `ssh -O exit`).",
            f"{SAME_KEX} (a control): its ssh given `KexAlgorithms {PARAMIKO_KEX}`, the kex "
            "paramiko negotiates here; OpenSSH 9.2's default sntrup761x25519 costs its client "
            "~90 ms of CPU per connection here. The hosts' SSH sessions skip this machine's "
            "/root/.bashrc (`pyenv init`, ~160 ms per command), as an app server would.",
        ],
    )
    return section, [
        Finding(
            "2. one host",
            "`fab guard` vs shell guard, median wall time",
            f"{fmt_s(fab)} vs {fmt_s(shell)} ({fmt_ratio(fab / shell)})",
            "<= 1.00x, decisions agree",
            fab <= shell and agree,
            f"decisions {'agree' if agree else 'DIFFER'}; with fab's kex the shell guard takes "
            f"{fmt_s(same_kex)} ({fmt_ratio(fab / same_kex)})",
        )
    ]
