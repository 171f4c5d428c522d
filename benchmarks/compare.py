"""The figures users feel, for the product at a git revision (before; `git archive` into
/tmp/lg-compare-<commit> with the venv and collection link its own scripts make, kept for
the next run) and this checkout (after), alternately on the same hosts in one run (as root):

    python -m benchmarks.compare --before REV [--reps N] [--output FILE]
"""

from __future__ import annotations

import argparse
import operator
import os
import statistics
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
    fleet_fab_config,
    harness_host,
    runs_database,
)
from benchmarks.run import interrupt_on_sigterm
from sandbox.fleet import fleet

FLEET_DB = "bench_compare_fleet"
FLEET_SIZE = 20


def prepare(rev: str) -> Install:
    """The product at `rev`, installed beside this checkout."""
    git = run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, check=True)
    root = Path(tempfile.gettempdir()) / f"lg-compare-{git.stdout.strip()[:12]}"
    if not (root / ".compare-ready").exists():
        root.mkdir(exist_ok=True)
        tar = f"{root}.tar"
        run(["git", "archive", "-o", tar, git.stdout.strip()], cwd=REPO, check=True)
        run(["tar", "-xf", tar], cwd=root, check=True)
        os.remove(tar)
        for script in ("bootstrap.sh", "collection-link.sh"):
            run(["bash", f"scripts/{script}"], cwd=root, check=True, timeout=1800)
        (root / ".compare-ready").touch()
    return Install(root)


Runs = dict[str, list[tuple[float, float]]]  # install -> one (x, y) per round


def alternate(reps: int, names: list[str], measure: Callable[[str], tuple[float, float]]) -> Runs:
    """A warm-up round, then `reps` rounds of measure(name) for every name; which goes first
    flips every round."""
    got: Runs = {name: [] for name in names}
    for rep in range(reps + 1):
        for name in names[:: 1 if rep % 2 == 0 else -1]:
            result = measure(name)
            if rep:  # round 0 warms up caches, ssh masters, the page cache
                got[name].append(result)
    return got


def measure_all(installs: dict[str, Install], reps: int, work: Path) -> dict[str, dict[str, float]]:
    """figure -> {"before": x, "after": y}"""
    names = list(installs)
    figures: dict[str, dict[str, float]] = {}

    def add(figure: str, runs: Runs, of: Callable[[float, float], float]) -> None:
        # Ratios are per round, of two runs made back to back: a burst of load hits both.
        values = {k: [of(x, y) for x, y in runs[k]] for k in names}
        figures[figure] = {k: median(values[k]) for k in names}
        # The noise: half the interquartile range of one install's rounds, the wider one.
        quartiles = map(statistics.quantiles, values.values())
        figures[figure]["noise"] = max((q3 - q1) / 2 / q2 for q1, q2, q3 in quartiles)
        log(f"  {figure}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures[figure].items()))

    ratio, first = operator.truediv, lambda x, y: x
    with stopwatch(f"fleet of {FLEET_SIZE} hosts: `fab drain` over it and over one", log):
        with (
            fleet(work / "fleet", None, FLEET_SIZE) as hosts,
            runs_database(hosts.db, FLEET_DB, live=0),
        ):
            config = fleet_fab_config(hosts, work, FLEET_DB)

            def drain(name: str, n: int) -> float:
                fab = installs[name].fab(config, hosts.key_path, hosts.targets(n), "drain")
                start = time.perf_counter()
                run(fab, cwd=installs[name].root, env=installs[name].env(), check=True)
                return time.perf_counter() - start

            drains = alternate(reps, names, lambda k: (drain(k, FLEET_SIZE), drain(k, 1)))
        add(f"`fab drain` {FLEET_SIZE} hosts / 1 host", drains, ratio)
        add(f"`fab drain` {FLEET_SIZE} hosts (s)", drains, first)

    with stopwatch("Ansible gated restart vs a plain restart", log):
        with bench_ansible.ansible_sandbox(work) as (inventory, password):
            (work / "plain.yml").write_text(bench_ansible.PLAIN)
            play = {
                k: bench_ansible.player(i, work, inventory, password) for k, i in installs.items()
            }
            deploy = {k: i.root / "playbooks" / "deploy.yml" for k, i in installs.items()}
            plays = alternate(
                reps, names, lambda k: (play[k](deploy[k]), play[k](work / "plain.yml"))
            )
        add("Ansible gated restart / plain restart", plays, ratio)

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
            if wrong := {k: v for k, v in decisions.items() if v != {k[1]}}:
                raise RuntimeError(f"unexpected guard decisions: {wrong}")
        pairs = {k: list(zip(times[k], times["shell"], strict=True)) for k in names}
        add("`fab guard` / shell guard", pairs, ratio)
        add("`fab guard` (s)", pairs, first)
        with (
            stopwatch("drain reaction after a lease ends", log),
            runs_database(host.pg, bench_drain.DBNAME, live=1),
        ):
            # A poll interval's sleep dominates it, and it varies little: a third of the rounds.
            reaction = bench_drain.reaction
            ends = alternate(
                max(2, reps // 3), names, lambda k: (reaction(installs[k], host, work), 0)
            )
        add("drain reaction after a lease ends (s)", ends, first)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    parser.add_argument("--before", required=True, help="git revision to compare against")
    parser.add_argument("--reps", type=int, default=9, help="rounds per figure (2 or more)")
    parser.add_argument("--output", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    interrupt_on_sigterm()
    with stopwatch(f"installing {args.before}", log):
        before = prepare(args.before)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="lg-cmp-run-") as tmp:
        figures = measure_all({"before": before, "after": Install()}, args.reps, Path(tmp))
    rows = [
        [figure, f"{v['before']:.3f}", f"{v['after']:.3f}", f"{v['after'] / v['before'] - 1:+.1%}",
         f"±{v['noise']:.1%}"]
        for figure, v in figures.items()
    ]  # fmt: skip
    head = (
        f"Before: {args.before}; after: this checkout. Medians of {args.reps} alternating rounds "
        f"({max(2, args.reps // 3)} for the reaction) in one run of "
        f"{(time.time() - started) / 60:.1f} min; load average at the end "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs."
    )
    text = f"{head}\n\n{markdown_table(['figure', 'before', 'after', 'change', 'noise'], rows)}\n"
    if args.output:
        args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
