"""`make bench`: run every benchmark, write benchmarks/RESULTS.md, print the same text.

    python -m benchmarks.run [--only 2,3,4,5,6] [--quick] [--fronts fab] [--output FILE]

Items: one host (2), a fleet against one host (3), a drain's reaction and idle logs (4),
Ansible's gated restart against a plain one (5), a drain's memory (6). Needs root, like the
integration tests whose sandbox it reuses. --quick is a smoke run (small sizes, few
repetitions); it and --only write only where --output says, never over RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from benchmarks import bench_ansible, bench_drain, bench_fleet, bench_one_host
from benchmarks.common import REPO, Finding, Section, log, markdown_table, stopwatch
from benchmarks.common import machine as describe_machine
from benchmarks.infra import engine_with_backend, harness_host
from sandbox.fleet import fleet

ITEMS = ("2", "3", "4", "5", "6")
DEFAULT_OUTPUT = REPO / "benchmarks" / "RESULTS.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--only", default=",".join(ITEMS), help="comma-separated items to run")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repetitions")
    parser.add_argument("--fronts", default=",".join(bench_fleet.FRONTS), help="item 3's fronts")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    fronts = tuple(f for f in bench_fleet.FRONTS if f in args.fronts.split(","))
    if os.geteuid() != 0:
        print("benchmarks: run as root (namespaces, sshd, PostgreSQL, podman)", file=sys.stderr)
        return 2
    only = set(args.only.split(","))
    interrupt_on_sigterm()
    machine = describe_machine()
    started = time.time()
    sections, findings = run_all(only, quick=args.quick, fronts=fronts)
    machine["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    how = (" --quick" if args.quick else "") + (
        "" if only == set(ITEMS) else f" --only {args.only}"
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    rows = [[f.item, f.measure, f.value, f.target, f.verdict, f.note] for f in findings]
    summary = markdown_table(["item", "measure", "value", "target", "verdict", "note"], rows)
    details = "\n".join(section.markdown() for section in sections)
    text = f"""# leaseguard benchmark results

Measured {when} by `make bench`{how}; the whole run took \
{(time.time() - started) / 60:.1f} min. See README.md for what each item measures; medians \
over repeated runs, ratios from runs made side by side.

## Machine

{markdown_table(["", ""], [[k, v] for k, v in machine.items()])}

## Summary

{summary}

## Details

{details}"""
    whole = only == set(ITEMS) and fronts == bench_fleet.FRONTS
    if (not args.quick and whole) or args.output != DEFAULT_OUTPUT:
        args.output.write_text(text)
        log(f"wrote {args.output}")
    print(text)
    return 0


def interrupt_on_sigterm() -> None:
    """`timeout` and CI stop a run with SIGTERM, which ends Python without unwinding: the
    hosts, engines and clusters would stay. Unwind as for Ctrl-C instead."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough; let teardown finish
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)


def run_all(
    only: set[str], *, quick: bool, fronts: tuple[str, ...] = bench_fleet.FRONTS
) -> tuple[list[Section], list[Finding]]:
    sections: list[Section] = []
    findings: list[Finding] = []

    def add(result: tuple[Section, list[Finding]]) -> None:
        sections.append(result[0])
        findings.extend(result[1])

    size = 5 if quick else 50
    with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        if "3" in only:
            with ExitStack() as fleet_stack:
                with stopwatch(f"fleet of {size} hosts + shared PostgreSQL", log):
                    hosts = fleet_stack.enter_context(fleet(work / "fleet", None, size))
                with stopwatch("3. fleet", log):
                    add(bench_fleet.run_bench(hosts, work, quick=quick, log=log, fronts=fronts))
        if "5" in only:
            with stopwatch("5. ansible overhead", log):
                add(bench_ansible.run_bench(work, 3 if quick else 5, log))
        if only & {"2", "4", "6"}:
            with stopwatch("podman engine, backend container, harness host pg1", log):
                engine = stack.enter_context(engine_with_backend(work / "podman"))
                host = stack.enter_context(harness_host(work / "pg1", engine))
            if "2" in only:
                with stopwatch("2. one host", log):
                    add(bench_one_host.run_bench(host, work, 3 if quick else 7, log))
            if only & {"4", "6"}:
                with stopwatch("4 + 6. drain reaction, idle logs, memory", log):
                    add(bench_drain.run_bench(host, work, only, quick=quick, log=log))
    order = {item: i for i, item in enumerate(ITEMS)}
    sections.sort(key=lambda s: order.get(s.title[0], 99))
    findings.sort(key=lambda f: order.get(f.item[0], 99))
    return sections, findings


if __name__ == "__main__":
    sys.exit(main())
