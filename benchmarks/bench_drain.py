"""Items 4 and 6: `fab -H pg1 drain` - its reaction when the last live lease ends, the log
lines it writes while idle, and its memory over a drain (the notes of run_bench say how)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Finding, Section, fmt_s, median, rss_kib, spread
from benchmarks.infra import Install, fab_on_host, runs_database, set_live
from sandbox.hosts import AppHost

DBNAME = "bench_drain"
DEFAULT_POLL_S = 5.0  # `fab drain`'s default (README)
FAST_POLL_S = 0.05
MARGIN_S = 0.1  # the target: one poll interval + 100 ms
DEFAULT_POLLS = 120  # a 10-minute drain at the default interval
START = " start live="

Drain = tuple[subprocess.Popen[str], threading.Thread, list[tuple[float, str]], float]


def _start(install: Install, argv: list[str]) -> Drain:
    """A `fab drain` process once it has polled, the thread reading its stderr, the lines
    read (timed as they arrive) and when its `start` line came."""
    proc = subprocess.Popen(
        argv,
        cwd=install.root,
        env=install.env(),
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: list[tuple[float, str]] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.perf_counter(), line.rstrip("\n")))
            if START in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not started.wait(60):
        proc.kill()
        raise RuntimeError(f"fab drain did not start polling: {lines[-5:]}")
    return proc, reader, lines, next(t for t, line in lines if START in line)


def _end(drain: Drain, timeout: float) -> str:
    """Waits for the drain to exit 0 (its stdout, a report, fits a pipe); returns stdout."""
    proc, reader, lines, _ = drain
    try:
        code = proc.wait(timeout=timeout)
    finally:
        proc.kill()
        reader.join(timeout=10)
    assert proc.stdout is not None
    if code != 0:
        raise RuntimeError(f"fab drain exited {code}: {lines[-3:]}")
    return proc.stdout.read()


def reaction(install: Install, host: AppHost, workdir: Path) -> float:
    """Seconds from the last lease's end (committed) to `fab drain` having exited 0."""
    assert host.pg is not None
    set_live(host.pg, DBNAME, True)
    drain = _start(install, fab_on_host(install, host, DBNAME, workdir, "drain"))
    set_live(host.pg, DBNAME, False)
    ended = time.perf_counter()
    _end(drain, DEFAULT_POLL_S * 4 + 30)
    return time.perf_counter() - ended


def run_bench(
    host: AppHost, workdir: Path, only: set[str], *, quick: bool, log: Callable[[str], None]
) -> tuple[Section, list[Finding]]:
    assert host.pg is not None
    findings: list[Finding] = []
    with runs_database(host.pg, DBNAME, live=1):
        if "4" in only:
            reactions = [reaction(Install(), host, workdir) for _ in range(2 if quick else 4)]
            log("  drain reaction: " + ", ".join(fmt_s(r) for r in reactions))
            worst, bound = max(reactions), DEFAULT_POLL_S + MARGIN_S
            findings.append(
                Finding(
                    "4. drain",
                    "reaction, worst of runs (default poll)",
                    f"{fmt_s(worst)} (median {fmt_s(median(reactions))})",
                    f"<= {fmt_s(bound)}",
                    worst <= bound,
                    f"spread {spread(reactions)}",
                )
            )
        idle = _idle_and_memory(host, workdir, 10 if quick else 45, log)
        findings += [f for f in idle if f.item[0] in only]
    section = Section(
        "4 + 6. `fab drain`: reaction, idle logs, memory",
        [],
        notes=[
            "Reaction: the lease ends as soon as the first poll has logged `start live=1` (the "
            "worst phase); timed until the `fab` process has exited.",
            f"Idle logs and memory: one drain polling every {fmt_s(FAST_POLL_S)}; INFO lines "
            "between `start` and the lease's end per idle poll, x 720 polls an hour at the "
            "default interval. RSS from /proc every 0.1 s; memory follows polls, not seconds, "
            f"so the second half's trend per poll is extrapolated to {DEFAULT_POLLS} polls "
            "(a 10-minute drain at the default interval).",
        ],
    )
    return section, findings


def _idle_and_memory(
    host: AppHost, workdir: Path, duration_s: float, log: Callable[[str], None]
) -> list[Finding]:
    assert host.pg is not None
    set_live(host.pg, DBNAME, True)
    args = ("drain", "--poll-s", str(FAST_POLL_S), "--json")
    drain = _start(Install(), fab_on_host(Install(), host, DBNAME, workdir, *args))
    proc, _, lines, t_start = drain
    samples: list[tuple[float, int]] = []  # the measurement window: RSS every 0.1 s
    while (now := time.perf_counter()) < t_start + duration_s:
        samples.append((now - t_start, rss_kib(proc.pid)[0]))
        time.sleep(0.1)
    peak = rss_kib(proc.pid)[1] / 1024
    set_live(host.pg, DBNAME, False)
    counters = json.loads(_end(drain, 60).strip().splitlines()[-1])["counters"]
    polls, idle_polls = counters["polls"], counters["idle_polls"]
    idle_lines = [line for t, line in lines if t_start < t <= now]
    per_hour = len(idle_lines) / max(idle_polls, 1) * (3600 / DEFAULT_POLL_S)
    duration = samples[-1][0] if samples else 0.0
    half = [(t, k) for t, k in samples if t >= duration / 2]
    per_drain = _slope(half) * duration / polls * DEFAULT_POLLS if polls and duration else 0.0
    log(f"  idle: {polls} polls, {len(idle_lines)} idle lines; peak RSS {peak:.1f} MiB")
    seen = f"lines seen: {idle_lines[:3]}" if idle_lines else ""
    return [
        Finding(
            "4. drain",
            "INFO log lines per idle hour (extrapolated)",
            f"{per_hour:.0f} ({len(idle_lines)} in {idle_polls} idle polls)",
            "0",
            per_hour == 0,
            seen,
        ),
        Finding(
            "6. memory",
            f"RSS trend over a {DEFAULT_POLLS}-poll drain (peak)",
            f"{per_drain:+.0f} KiB (peak {peak:.1f} MiB)",
            "flat (within 1 MiB)",
            abs(per_drain) <= 1024,
            f"{polls} polls, {len(samples)} RSS samples",
        ),
    ]


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope (KiB per second); 0 with fewer than two points."""
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_k = sum(k for _, k in points) / len(points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (k - mean_k) for t, k in points) / var if var else 0.0
