"""Items 4 and 6: `fab drain` - its reaction when the last live lease ends, the log lines it
writes while idle, and its memory over a drain.

Reaction (item 4): `fab -H pg1 drain` at the default poll interval, one live lease. The
lease is ended right after a poll has read it (the "start" log line is written after the
first poll, just before the first sleep), which is the worst phase: the next poll is a
whole interval away. Measured: from the UPDATE that ends the lease committing to the
`fab` process having exited.

Idle logs and memory (items 4 and 6): one drain with a fast poll (--poll-s 0.05) over one
live lease that does not end for a while. The INFO lines written during the idle polls
are counted and extrapolated to an hour at the default interval; the process's RSS is
sampled from /proc all along, and its VmHWM (peak) read at the end. The fast poll packs
more polls into the run than a 10-minute drain at the default 5 s interval makes (120).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import Finding, Section, fmt_s, median, rss_kib, spread
from benchmarks.infra import (
    FAB_CWD,
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
from leaseguard.orchestration.drain import DEFAULT_POLL_S
from sandbox.hosts import AppHost

DBNAME = "bench_drain"
HISTORY_ROWS = 100_000
FAST_POLL_S = 0.05
MARGIN_S = 0.1  # the "one poll interval + 100 ms"
DEFAULT_DRAIN_S = 600  # "a 10-minute drain"
START_MARKER = " start live="
DRAINED_MARKER = " drained live=0"


@dataclass
class DrainRun:
    """One `fab drain` process, its stderr lines timed as they arrive, its RSS samples."""

    argv: list[str]
    lines: list[tuple[float, str]] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    proc: subprocess.Popen[str] | None = None
    stdout: str = ""
    hwm_kib: int = 0
    _readers: list[threading.Thread] = field(default_factory=list)

    def start(self, sample_rss: bool = False) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=FAB_CWD,
            env=fab_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Each pipe has its own reader: a communicate() beside the stderr reader would take
        # some of its lines (a `drained` line missed now and then).
        self._readers = [
            threading.Thread(target=self._read_stderr, daemon=True),
            threading.Thread(target=self._read_stdout, daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        if sample_rss:
            threading.Thread(target=self._sample, daemon=True).start()

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append((time.perf_counter(), line.rstrip("\n")))
            if START_MARKER in line:
                self.started.set()

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()

    def _sample(self) -> None:
        assert self.proc is not None
        while self.proc.poll() is None:
            rss, hwm = rss_kib(self.proc.pid)
            if rss:
                self.rss.append((time.perf_counter(), rss))
                self.hwm_kib = max(self.hwm_kib, hwm)
            time.sleep(0.1)

    def wait_started(self, timeout: float = 60) -> float:
        if not self.started.wait(timeout):
            self.kill()
            raise RuntimeError(f"fab drain did not start polling: {self.lines[-5:]}")
        return next(t for t, line in self.lines if START_MARKER in line)

    def wait(self, timeout: float) -> int:
        """The exit status, once the process has exited (timed by the caller) and its
        output has been read to the end."""
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_bench(
    host: AppHost, workdir: Path, only: set[str], *, quick: bool, log: Callable[[str], None]
) -> tuple[list[Section], list[Finding]]:
    assert host.pg is not None
    create_database(host.pg, DBNAME)
    try:
        with host.pg.connect(DBNAME, socket=True) as conn:
            create_active_rows(conn, live=1)
            grow_history(conn, HISTORY_ROWS)
            vacuum_and_index(conn)
        config = write_fabric_config(
            workdir / "fabric-drain.yaml",
            dsn=f"dbname={DBNAME} user=postgres",
            known_hosts=host.known_hosts_path,
        )
        base = fab_argv(config, host.client_key_path, [f"root@{host.addr}"], "drain")
        sections: list[Section] = []
        findings: list[Finding] = []
        if "4" in only:
            section, found = _reaction(host, base, 2 if quick else 4, log)
            sections.append(section)
            findings += found
        more, found = _idle_and_memory(host, base, 10 if quick else 45, log)
        sections += more
        findings += found if "6" in only else [f for f in found if f.item.startswith("4")]
        return sections, findings
    finally:
        drop_database(host.pg, DBNAME)


def _end_lease(host: AppHost) -> float:
    assert host.pg is not None
    with host.pg.connect(DBNAME, socket=True) as conn:
        set_live(conn, False)
    return time.perf_counter()


def _make_live(host: AppHost) -> None:
    assert host.pg is not None
    with host.pg.connect(DBNAME, socket=True) as conn:
        set_live(conn, True)


def _reaction(
    host: AppHost, base: list[str], reps: int, log: Callable[[str], None]
) -> tuple[Section, list[Finding]]:
    reactions: list[float] = []
    tails: list[float] = []  # the "drained" log line -> the process has exited
    exits: list[int] = []
    for _ in range(reps):
        _make_live(host)
        drain = DrainRun(base)
        drain.start()
        try:
            drain.wait_started()
            ended = _end_lease(host)
            exits.append(drain.wait(timeout=DEFAULT_POLL_S * 4 + 30))
            exited = time.perf_counter()
        finally:
            drain.kill()
        reactions.append(exited - ended)
        drained = [t for t, line in drain.lines if DRAINED_MARKER in line]
        if drained:
            tails.append(exited - drained[0])
    log("  drain reaction: " + ", ".join(fmt_s(r) for r in reactions))
    worst = max(reactions)
    bound = DEFAULT_POLL_S + MARGIN_S
    over = [r - DEFAULT_POLL_S for r in reactions]
    section = Section(
        "4. Drain reaction: last live lease ends -> `fab drain` has exited",
        [
            "poll interval",
            "runs",
            "median",
            "worst",
            "beyond one interval (median, worst)",
            "of which `drained` logged -> exited (median)",
        ],
        rows=[
            [
                fmt_s(DEFAULT_POLL_S),
                str(len(reactions)),
                fmt_s(median(reactions)),
                fmt_s(worst),
                f"{fmt_s(median(over))}, {fmt_s(max(over))}",
                fmt_s(median(tails)),
            ]
        ],
        notes=[
            "The lease is ended (its row set to done, committed) as soon as the drain's "
            "first poll has logged `start live=1`, i.e. at the worst phase; the time runs "
            "until the `fab` process has exited (last poll through the tunnel, report, SSH "
            f"and tunnel teardown, interpreter exit). Exit statuses: {exits}.",
        ],
    )
    finding = Finding(
        "4. drain",
        "reaction, worst of runs (default poll)",
        f"{fmt_s(worst)} (median {fmt_s(median(reactions))})",
        f"<= {fmt_s(bound)}",
        worst <= bound and all(e == 0 for e in exits),
        f"spread {spread(reactions)}",
    )
    return section, [finding]


def _idle_and_memory(
    host: AppHost, base: list[str], duration_s: float, log: Callable[[str], None]
) -> tuple[Section, list[Finding]]:
    _make_live(host)
    drain = DrainRun([*base, "--poll-s", str(FAST_POLL_S), "--json"])
    drain.start(sample_rss=True)
    try:
        t_start = drain.wait_started()
        time.sleep(duration_s)  # the measurement window itself, not a wait for a condition
        t_end_idle = time.perf_counter()
        _end_lease(host)
        code = drain.wait(timeout=60)
    finally:
        drain.kill()
    result = json.loads(drain.stdout.strip().splitlines()[-1])
    counters = result["counters"]
    idle_lines = [line for t, line in drain.lines if t_start < t <= t_end_idle]
    polls, idle_polls = counters["polls"], counters["idle_polls"]
    per_hour = len(idle_lines) / max(idle_polls, 1) * (3600 / DEFAULT_POLL_S)
    log(
        f"  idle: {polls} polls ({idle_polls} idle), {len(idle_lines)} lines; "
        f"peak RSS {drain.hwm_kib / 1024:.1f} MiB"
    )
    memory = _memory(drain, t_start, polls)
    sections = [
        Section(
            "4. Idle drain: log lines while nothing changes",
            [
                "poll (run)",
                "polls",
                "idle polls",
                "lines while idle",
                "lines per idle hour (5 s poll)",
            ],
            rows=[
                [
                    fmt_s(FAST_POLL_S),
                    str(polls),
                    str(idle_polls),
                    str(len(idle_lines)),
                    f"{per_hour:.0f}",
                ]
            ],
            notes=[
                "Default log level (INFO) of `fab drain`; lines counted between the `start` "
                "line and the end of the lease, extrapolated: lines / idle polls x 720 polls "
                f"an hour at {fmt_s(DEFAULT_POLL_S)}. Exit status {code}."
            ]
            + ([f"Lines seen: {idle_lines[:3]}"] if idle_lines else []),
        ),
        memory[0],
    ]
    findings = [
        Finding(
            "4. drain",
            "INFO log lines per idle hour (extrapolated)",
            f"{per_hour:.0f} ({len(idle_lines)} in {idle_polls} idle polls)",
            "0",
            per_hour == 0,
        ),
        memory[1],
    ]
    return sections, findings


def _memory(drain: DrainRun, t_start: float, polls: int) -> tuple[Section, Finding]:
    samples = [(t - t_start, kib) for t, kib in drain.rss if t >= t_start]
    duration = samples[-1][0] if samples else 0.0

    def at(share: float) -> int:
        target = duration * share
        return min(samples, key=lambda s: abs(s[0] - target))[1] if samples else 0

    early, middle, late = at(0.1), at(0.5), at(1.0)
    polls_per_s = polls / duration if duration else 0.0
    # The trend of the second half (least squares), per poll, over a 10-minute drain.
    half = [(t, kib) for t, kib in samples if t >= duration / 2]
    slope_kib_per_s = _slope(half)
    default_polls = DEFAULT_DRAIN_S / DEFAULT_POLL_S
    per_default_drain = slope_kib_per_s / polls_per_s * default_polls if polls_per_s else 0.0
    flat = abs(per_default_drain) <= 1024
    section = Section(
        "6. Memory of `fab drain` over a drain",
        [
            "polls",
            "RSS at 10% / 50% / 100%",
            "peak (VmHWM)",
            "trend of the 2nd half",
            "extrapolated over a 10-min drain (120 polls)",
        ],
        rows=[
            [
                str(polls),
                f"{early / 1024:.1f} / {middle / 1024:.1f} / {late / 1024:.1f} MiB",
                f"{drain.hwm_kib / 1024:.1f} MiB",
                f"{slope_kib_per_s / polls_per_s * 100 if polls_per_s else 0:+.1f} KiB / 100 polls",
                f"{per_default_drain:+.0f} KiB",
            ]
        ],
        notes=[
            f"Shortened: the drain polls every {fmt_s(FAST_POLL_S)} instead of every "
            f"{fmt_s(DEFAULT_POLL_S)}, so this {duration:.0f} s run makes {polls} polls where a "
            f"10-minute drain at the default interval makes {default_polls:.0f}. Memory "
            "follows polls, not seconds (the polls share one database connection), "
            "not seconds, so the trend per poll is extrapolated to 120 polls.",
            f"RSS sampled every 0.1 s from /proc/PID/status ({len(samples)} samples); the first "
            "half of the run is warm-up (imports done, caches filling); 'flat' means the "
            "least-squares trend of the second half, extrapolated to 120 polls, is within 1 MiB.",
        ],
    )
    finding = Finding(
        "6. memory",
        f"RSS over a drain of {polls} polls (peak; trend over 120 polls)",
        f"peak {drain.hwm_kib / 1024:.1f} MiB; {per_default_drain:+.0f} KiB",
        "flat (within 1 MiB)",
        flat,
        f"RSS {early / 1024:.1f} MiB at 10%, {late / 1024:.1f} MiB at the end",
    )
    return section, finding


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares slope (KiB per second); 0 with fewer than two points."""
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_k = sum(k for _, k in points) / len(points)
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (k - mean_k) for t, k in points)
    return cov / var if var else 0.0
