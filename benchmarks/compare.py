"""Issue 35's before/after table: the figures users feel, measured side by side in one run
for the product at a git revision (before) and for this checkout (after).

    python -m benchmarks.compare --before REV [--reps N] [--output FILE]     # as root

The before tree is `git archive REV` in /tmp/lg-compare-<commit>, with the venv and the
collection link its own scripts make (kept for the next run). Both installs run against the
same hosts, databases and sandbox, alternately: which goes first flips every round.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from benchmarks import bench_ansible, bench_drain, bench_one_host
from benchmarks.common import REPO, log, markdown_table, median, run, stopwatch
from benchmarks.infra import (
    Install,
    engine_with_backend,
    fleet,
    fleet_fab_config,
    harness_host,
    runs_database,
)
from benchmarks.run import interrupt_on_sigterm

FLEET_DB = "bench_compare_fleet"
FLEET_SIZE = 20


def prepare(rev: str) -> Install:
    """The product at `rev`, installed beside this checkout."""
    commit = run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, check=True)
    root = Path(tempfile.gettempdir()) / f"lg-compare-{commit.stdout.strip()[:12]}"
    if not (root / ".compare-ready").exists():
        root.mkdir(exist_ok=True)
        archive = subprocess.Popen(
            ["git", "archive", commit.stdout.strip()], cwd=REPO, stdout=subprocess.PIPE
        )
        run(["tar", "-x", "-C", str(root)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise RuntimeError(f"git archive {rev} failed")
        for script in ("bootstrap.sh", "collection-link.sh"):
            run(["bash", f"scripts/{script}"], cwd=root, check=True, timeout=1800)
        (root / ".compare-ready").touch()
    return Install(root)


def alternate(
    reps: int, names: list[str], measure: Callable[[str], float]
) -> dict[str, list[float]]:
    """`reps` rounds of measure(name) for every name; which goes first flips every round."""
    got: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names[:: 1 if rep % 2 == 0 else -1]:
            got[name].append(measure(name))
    return got


def measure_all(installs: dict[str, Install], reps: int, work: Path) -> dict[str, dict[str, float]]:
    """figure -> {"before": x, "after": y}"""
    names = list(installs)
    figures: dict[str, dict[str, float]] = {}

    def ratio(a: dict[str, list[float]], b: dict[str, list[float]]) -> dict[str, float]:
        return {k: median(a[k]) / median(b[k]) for k in names}

    def add(figure: str, values: dict[str, float]) -> None:
        figures[figure] = values
        log(f"  {figure}: " + ", ".join(f"{k} {v:.3f}" for k, v in values.items()))

    with ExitStack() as stack:
        with stopwatch(f"fleet of {FLEET_SIZE} hosts; `fab drain` over it and over one", log):
            hosts = stack.enter_context(fleet(work / "fleet", None, FLEET_SIZE))
            stack.enter_context(runs_database(hosts.db, FLEET_DB, live=0))
            config = fleet_fab_config(hosts, work, FLEET_DB)

            def drain(n: int) -> Callable[[str], float]:
                def timed(name: str) -> float:
                    fab = installs[name].fab(config, hosts.key_path, hosts.targets(n), "drain")
                    start = time.perf_counter()
                    run(fab, cwd=installs[name].root, env=installs[name].env(), check=True)
                    return time.perf_counter() - start

                return timed

            drain(FLEET_SIZE)("after")  # warm-up
            one, many = alternate(reps, names, drain(1)), alternate(reps, names, drain(FLEET_SIZE))
        add(f"`fab drain` {FLEET_SIZE} hosts / 1 host", ratio(many, one))
        add(f"`fab drain` {FLEET_SIZE} hosts (s)", {k: median(many[k]) for k in names})

    with stopwatch("Ansible gated restart vs a plain restart", log), ExitStack() as stack:
        inventory, password = stack.enter_context(bench_ansible.ansible_sandbox(work))
        (work / "plain.yml").write_text(bench_ansible.PLAIN)
        plays = {k: bench_ansible.player(i, work, inventory, password) for k, i in installs.items()}
        plain: dict[str, list[float]] = {k: [] for k in names}

        def gated(name: str) -> float:  # each right after a plain restart
            plain[name].append(plays[name](work / "plain.yml"))
            return plays[name](installs[name].root / "playbooks" / "deploy.yml")

        alternate(1, names, gated)  # warm-up: ssh's ControlPersist master, caches
        for values in plain.values():
            values.clear()
        gates = alternate(reps, names, gated)
        add("Ansible gated restart / plain restart", ratio(gates, plain))

    with ExitStack() as stack:
        with stopwatch("podman engine, backend container, harness host", log):
            engine = stack.enter_context(engine_with_backend(work / "podman"))
            host = stack.enter_context(harness_host(work / "pg1", engine))
        assert host.pg is not None
        with stopwatch("`fab guard` vs the shell guard", log):
            guards = {k: bench_one_host.fab_guard(i, host, work) for k, i in installs.items()}
            guards["shell"] = bench_one_host.shell_guard(host, work)
            with runs_database(host.pg, bench_one_host.DBNAME):
                times, decisions = bench_one_host.race(host, guards, reps)
            wrong = {k: v for k, v in decisions.items() if v != {k[1]}}
            if wrong:
                raise RuntimeError(f"unexpected guard decisions: {wrong}")
        add("`fab guard` / shell guard", ratio(times, {k: times["shell"] for k in names}))
        add("`fab guard` (s)", {k: median(times[k]) for k in names})
        with (
            stopwatch("drain reaction after a lease ends", log),
            runs_database(host.pg, bench_drain.DBNAME, live=1),
        ):
            ends = alternate(reps, names, lambda k: bench_drain.reaction(installs[k], host, work))
        add("drain reaction after a lease ends (s)", {k: median(ends[k]) for k in names})
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    parser.add_argument("--before", required=True, help="git revision to compare against")
    parser.add_argument("--reps", type=int, default=5, help="rounds per figure")
    parser.add_argument("--output", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    interrupt_on_sigterm()
    with stopwatch(f"installing {args.before}", log):
        before = prepare(args.before)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="lg-cmp-run-") as tmp:
        figures = measure_all({"before": before, "after": Install()}, args.reps, Path(tmp))
    rows = [
        [figure, f"{v['before']:.3f}", f"{v['after']:.3f}", f"{v['after'] / v['before'] - 1:+.1%}"]
        for figure, v in figures.items()
    ]
    head = (
        f"Before: {args.before}; after: this checkout. Medians of {args.reps} alternating rounds "
        f"in one run of {(time.time() - started) / 60:.1f} min."
    )
    text = head + "\n\n" + markdown_table(["figure", "before", "after", "change"], rows) + "\n"
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
