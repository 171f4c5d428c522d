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

import gc
import json
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from benchmarks.bench_predicate import set_nodelay
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
from leaseguard.adapters.ssh import DatabaseAddress, SshOptions, make_connection, open_connection
from leaseguard.core.contract import Contract
from leaseguard.orchestration.drain import DEFAULT_POLL_S, DrainCounters, DrainState
from leaseguard.orchestration.drain_status import StatusBoard
from leaseguard.orchestration.ssh_session import ssh_session
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
            sections.append(_poll_cost(host, 10 if quick else 40, log))
            section, finding = _observer_cost(host, workdir, 20 if quick else 60, log)
            sections.append(section)
            findings.append(finding)
        more, found = _idle_and_memory(host, base, 10 if quick else 45, log)
        sections += more
        if "6" in only:
            sections.append(_retained(host, 50 if quick else 200, log))
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


def _poll_cost(host: AppHost, polls: int, log: Callable[[str], None]) -> Section:
    """One drain poll (GuardSession.judge through the tunnel), in-process, side by side:
    as leaseguard opens the SSH connection, and with TCP_NODELAY set on its socket."""
    options = SshOptions(
        key_filename=str(host.client_key_path), known_hosts=str(host.known_hosts_path)
    )
    times: dict[str, list[float]] = {"as shipped": [], "with TCP_NODELAY": []}
    with ExitStack() as stack:
        sessions = {}
        for name in times:
            connection = make_connection(f"root@{host.addr}", options)
            stack.callback(connection.close)
            open_connection(connection)  # as leaseguard opens it (TCP_NODELAY on)
            if name == "with TCP_NODELAY":
                set_nodelay(connection)
            sessions[name] = stack.enter_context(
                ssh_session(
                    connection, Contract(), f"dbname={DBNAME} user=postgres", DatabaseAddress()
                )
            )
            sessions[name].judge()  # the first judgment measures the clocks: not a poll
        for i in range(polls):
            for name in list(times) if i % 2 == 0 else list(reversed(times)):
                start = time.perf_counter()
                sessions[name].judge()
                times[name].append(time.perf_counter() - start)
    log("  poll cost: " + ", ".join(f"{n} {fmt_s(median(v))}" for n, v in times.items()))
    return Section(
        "4b. What one drain poll costs (in-process, through the tunnel)",
        ["SSH socket", "polls", "median", "p90", "max"],
        rows=[
            [
                name,
                str(len(v)),
                fmt_s(median(v)),
                fmt_s(sorted(v)[int(len(v) * 0.9)]),
                fmt_s(max(v)),
            ]
            for name, v in times.items()
        ],
        notes=[
            "A poll after the first: a new database connection through the open tunnel, "
            "the check, disconnect. `as shipped` is leaseguard.adapters.ssh's connection, which "
            "sets TCP_NODELAY on the SSH socket as OpenSSH does (paramiko does not); `with "
            "TCP_NODELAY` sets it again explicitly, alternating with it, so the two should "
            "agree. Before leaseguard set it, requests that left as two SSH packets waited "
            "for the server's delayed ACK (~40 ms; a poll took ~60 ms instead of ~15 ms).",
        ],
    )


def _observer_cost(
    host: AppHost, workdir: Path, polls: int, log: Callable[[str], None]
) -> tuple[Section, Finding]:
    """One drain poll with and without rewriting --status-file and --metrics-file, side by
    side on one session (alternating), plus the two writes alone."""
    options = SshOptions(
        key_filename=str(host.client_key_path), known_hosts=str(host.known_hosts_path)
    )
    board = StatusBoard(workdir / "drain-status.json", workdir / "drain.prom")
    board.check_writable()
    observer = board.observer(host.addr)
    counters = DrainCounters()
    times: dict[str, list[float]] = {"poll": [], "poll + status and metrics files": []}
    writes: list[float] = []
    connection = make_connection(f"root@{host.addr}", options)
    try:
        with ssh_session(
            connection, Contract(), f"dbname={DBNAME} user=postgres", DatabaseAddress()
        ) as session:
            session.judge()  # the first judgment measures the clocks: not a poll
            for i in range(polls):
                for name in list(times) if i % 2 == 0 else list(reversed(times)):
                    start = time.perf_counter()
                    verdict = session.judge()
                    if name != "poll":
                        counters.polls += 1
                        before_write = time.perf_counter()
                        observer.after_poll(DrainState(verdict, counters, float(i), 600.0))
                        writes.append(time.perf_counter() - before_write)
                    times[name].append(time.perf_counter() - start)
    finally:
        connection.close()
    plain, observed = (median(v) for v in times.values())
    write = median(writes)
    log(
        f"  observer cost: poll {fmt_s(plain)}, with files {fmt_s(observed)}, "
        f"writes alone {fmt_s(write)}"
    )
    rows = [
        [name, str(len(v)), fmt_s(median(v)), fmt_s(sorted(v)[int(len(v) * 0.9)]), fmt_s(max(v))]
        for name, v in [*times.items(), ("the observer call alone", writes)]
    ]
    section = Section(
        "4c. What --status-file and --metrics-file add to a drain poll (in-process, tunnel)",
        ["", "polls", "median", "p90", "max"],
        rows=rows,
        notes=[
            "One GuardSession through the tunnel, the two variants alternating (A B, B A, ...). "
            "The files are rewritten as the drain does after every poll: JSON snapshot and "
            "Prometheus text, each into a temp file in the same directory, then renamed "
            "over the old one (no fsync), on the board's writer thread. The observer call "
            "renders both texts and hands them over; done inline, the two writes cost "
            "2-8 ms here, mostly ext4 flushing a file's data before a rename over an "
            "existing one (auto_da_alloc).",
        ],
    )
    finding = Finding(
        "4. drain",
        "status + metrics files: time added to a poll (observer call, median)",
        f"{fmt_s(write)} ({write / plain:.1%} of a {fmt_s(plain)} poll)",
        "< 1 ms (under the poll's own spread)",
        write < 1e-3,
        f"poll {fmt_s(plain)} vs with files {fmt_s(observed)} (median, same run)",
    )
    return section, finding


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


def _retained(host: AppHost, polls: int, log: Callable[[str], None]) -> Section:
    """Where a drain's memory goes: polls in-process under tracemalloc, on one shared
    connection and with the connection replaced before every poll (the recovery path)."""
    rows = [
        _retained_row(host, polls, replace=False, log=log),
        _retained_row(host, polls // 2, replace=True, log=log),
    ]
    return Section(
        "6b. Where the growth comes from (in-process, under tracemalloc)",
        [
            "polls",
            "database connection",
            "Python memory retained per poll",
            "of which allocated under leaseguard/adapters/ssh.py or paramiko",
            "paramiko Channels alive: before -> after",
            "threads alive: before -> after",
        ],
        rows=rows,
        notes=[
            "One GuardSession over one leaseguard.adapters.ssh.DatabaseTunnel, as `fab drain` "
            "holds it; memory traced across the polls after 20 warm-up polls. `shared`: the "
            "session's polls share one database connection (one forwarded SSH channel). "
            "`replaced every poll`: the guard's backend is terminated (pg_terminate_backend) "
            "before each poll, so every poll opens a new connection through the tunnel - a "
            "new channel and forwarding thread each time, the path a drain takes after a "
            "database restart. Fabric's forward_local, used before, kept every finished "
            "forwarder until the tunnel closed (~11 KiB a connection).",
        ],
    )


def _retained_row(
    host: AppHost, polls: int, *, replace: bool, log: Callable[[str], None]
) -> list[str]:
    assert host.pg is not None
    options = SshOptions(
        key_filename=str(host.client_key_path), known_hosts=str(host.known_hosts_path)
    )
    connection = make_connection(f"root@{host.addr}", options)
    try:
        with (
            host.pg.connect(DBNAME, socket=True) as admin,
            ssh_session(
                connection, Contract(), f"dbname={DBNAME} user=postgres", DatabaseAddress()
            ) as session,
        ):

            def poll() -> None:
                if replace:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                        "WHERE datname = %s AND application_name = 'leaseguard'",
                        (DBNAME,),
                    )
                session.judge()

            for _ in range(20):  # warm-up: first judgment, caches, pools
                poll()
            gc.collect()
            channels_before, threads_before = _alive(paramiko.Channel), threading.active_count()
            tracemalloc.start(30)
            try:
                before = tracemalloc.take_snapshot()
                for _ in range(polls):
                    poll()
                gc.collect()
                after = tracemalloc.take_snapshot()
            finally:
                tracemalloc.stop()
            channels_after, threads_after = _alive(paramiko.Channel), threading.active_count()
    finally:
        connection.close()
    stats = after.compare_to(before, "traceback")
    total = sum(stat.size_diff for stat in stats)
    in_tunnel = sum(
        stat.size_diff
        for stat in stats
        if any(
            "leaseguard/adapters/ssh.py" in frame.filename or "/paramiko/" in frame.filename
            for frame in stat.traceback
        )
    )
    label = "replaced every poll" if replace else "shared"
    log(
        f"  retained ({label}): {total / polls / 1024:.2f} KiB per poll, channels "
        f"{channels_before} -> {channels_after}, threads {threads_before} -> {threads_after}"
    )
    return [
        str(polls),
        label,
        f"{total / polls / 1024:.2f} KiB",
        f"{in_tunnel / polls / 1024:.2f} KiB",
        f"{channels_before} -> {channels_after}",
        f"{threads_before} -> {threads_after}",
    ]


def _alive(kind: type) -> int:
    return sum(1 for obj in gc.get_objects() if isinstance(obj, kind))
