"""`make bench`: run every benchmark, write benchmarks/RESULTS.md, print the same text.

    python -m benchmarks.run [--only 2,3,4,5,6] [--quick] [--fronts fab] [--output FILE]

What users feel: seconds per host (2), a fleet against one host (3), a drain's reaction
when the last lease ends and its idle logs (4), Ansible's gated restart against a plain one
(5), a drain's memory (6).

Needs root (network namespaces, sshd, PostgreSQL run through runuser, podman), like the
integration tests whose hosts (the sandbox package) it reuses. --quick is a smoke run with
small sizes and few repetitions; its figures are not the ones to publish.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from benchmarks import bench_ansible, bench_drain, bench_fleet, bench_one_host
from benchmarks.common import REPO, Finding, Section, markdown_table, stopwatch
from benchmarks.common import machine as describe_machine
from benchmarks.infra import engine_with_backend, fleet, harness_host

ITEMS = ("2", "3", "4", "5", "6")
DEFAULT_OUTPUT = REPO / "benchmarks" / "RESULTS.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--only", default=",".join(ITEMS), help="comma-separated items to run")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repetitions")
    parser.add_argument(
        "--fronts",
        default=",".join(bench_fleet.FRONTS),
        help="item 3's fronts (" + ",".join(bench_fleet.FRONTS) + "): one alone to "
        "measure its change faster",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    fronts = tuple(f for f in bench_fleet.FRONTS if f in args.fronts.split(","))
    if os.geteuid() != 0:
        print("benchmarks: run as root (namespaces, sshd, PostgreSQL, podman)", file=sys.stderr)
        return 2
    only = set(args.only.split(","))
    # `timeout` and CI stop a run with SIGTERM, which would end Python without unwinding: the
    # hosts, engines, clusters and /tmp/lg-bench-* would stay. Unwind as for Ctrl-C instead.
    signal.signal(signal.SIGTERM, _interrupt)
    machine = describe_machine()
    date = datetime.now(UTC)
    started = time.monotonic()
    sections, findings = run_all(only, quick=args.quick, fronts=fronts)
    elapsed = time.monotonic() - started
    # Other work on the machine shows here: the figures are medians of side-by-side runs.
    machine["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = render(date, machine, elapsed, sections, findings, quick=args.quick, only=only)
    # A partial or --quick run never overwrites the published RESULTS.md by accident.
    whole = only == set(ITEMS) and fronts == bench_fleet.FRONTS
    if (not args.quick and whole) or args.output != DEFAULT_OUTPUT:
        args.output.write_text(text)
        log(f"wrote {args.output}")
    print(text)
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough; let the teardown finish
    raise KeyboardInterrupt(signal.Signals(signum).name)


def log(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%H:%M:%S")
    print(f"[bench {stamp}] {message}", file=sys.stderr, flush=True)


def run_all(
    only: set[str], *, quick: bool, fronts: tuple[str, ...] = bench_fleet.FRONTS
) -> tuple[list[Section], list[Finding]]:
    sections: list[Section] = []
    findings: list[Finding] = []

    def add(result: tuple[Section | list[Section], list[Finding]]) -> None:
        got, found = result
        sections.extend(got if isinstance(got, list) else [got])
        findings.extend(found)

    fleet_size = 5 if quick else 50
    with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        with stopwatch("podman engine + backend container", log):
            engine = stack.enter_context(engine_with_backend(work / "podman"))
        if "3" in only:
            with ExitStack() as fleet_stack:
                with stopwatch(f"fleet of {fleet_size} hosts + shared PostgreSQL", log):
                    # Lightweight hosts (sshd only): 50 of them fit on 2 cores.
                    hosts = fleet_stack.enter_context(fleet(work / "fleet", None, fleet_size))
                with stopwatch("3. fleet", log):
                    add(bench_fleet.run_bench(hosts, work, quick=quick, log=log, fronts=fronts))
        if "5" in only:
            with stopwatch("5. ansible overhead", log):
                add(bench_ansible.run_bench(work, 3 if quick else 5, log))
        if only & {"2", "4", "6"}:
            with ExitStack() as host_stack:
                with stopwatch("harness host pg1", log):
                    host = host_stack.enter_context(harness_host(work / "pg1", engine))
                if "2" in only:
                    with stopwatch("2. one host", log):
                        rc_host = host_stack.enter_context(
                            harness_host(work / "pg2", engine, "pg2", skip_bashrc=False)
                        )
                        setups = [("rc skipped", host), ("this machine's rc", rc_host)]
                        add(bench_one_host.run_bench(setups, work, 3 if quick else 7, log))
                if only & {"4", "6"}:
                    with stopwatch("4 + 6. drain reaction, idle logs, memory", log):
                        add(bench_drain.run_bench(host, work, only, quick=quick, log=log))
    order = {item: i for i, item in enumerate(ITEMS)}
    # Stable sorts by the item's digit: "4b." stays right after "4.".
    sections.sort(key=lambda s: order.get(s.title[0], 99))
    findings.sort(key=lambda f: order.get(f.item[0], 99))
    return sections, findings


# --- RESULTS.md -------------------------------------------------------------------------------


def render(
    date: datetime,
    machine: dict[str, str],
    elapsed: float,
    sections: list[Section],
    findings: list[Finding],
    *,
    quick: bool,
    only: set[str],
) -> str:
    summary = markdown_table(
        ["item", "measure", "value", "target", "verdict", "note"],
        [[f.item, f.measure, f.value, f.target, f.verdict, f.note] for f in findings],
    )
    machine_rows = markdown_table(["", ""], [[k, v] for k, v in machine.items()])
    scope = "" if only == set(ITEMS) else f" (items {','.join(sorted(only))} only)"
    lines = [
        "# leaseguard benchmark results",
        "",
        f"Measured {date.strftime('%Y-%m-%d %H:%M UTC')} by `make bench`"
        f"{' --quick' if quick else ''}{scope}; the whole run took {elapsed / 60:.1f} min. "
        "See README.md for what each item measures and how; medians over repeated runs, "
        "ratios from runs made side by side in the same process.",
        "",
        "## Machine",
        "",
        machine_rows,
        "",
        "## Summary",
        "",
        summary,
        "",
        "## Details",
        "",
    ]
    lines += [section.markdown() for section in sections]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.exit(main())
