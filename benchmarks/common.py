"""Small helpers shared by the benchmarks: timing, statistics, the machine, subprocesses."""

from __future__ import annotations

import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    """min..max, for the reader to judge the noise around a median."""
    if not values:
        return "-"
    return f"{fmt_s(min(values))}..{fmt_s(max(values))}"


def fmt_s(seconds: float) -> str:
    """A duration with a unit that keeps 3 significant digits readable."""
    if seconds != seconds:  # NaN
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"


def fmt_signed_s(seconds: float) -> str:
    """A difference of durations, signed: "+1.20 s", "-85.0 ms"."""
    return ("-" if seconds < 0 else "+") + fmt_s(abs(seconds))


def fmt_ratio(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass
class Finding:
    """One line of the summary: what was measured, against which target, met or not."""

    item: str
    measure: str
    value: str
    target: str
    met: bool | None  # None: no target, or pending
    note: str = ""
    # Not met, and a control measured in the same run shows no implementation could meet it
    # on this machine (the note names the control and its figure).
    out_of_reach: bool = False

    @property
    def verdict(self) -> str:
        if self.met is None:
            return "-"
        if self.met:
            return "met"
        return "NOT met: out of reach here" if self.out_of_reach else "NOT met"


@dataclass
class Section:
    """A benchmark's detail table and notes, rendered into RESULTS.md."""

    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if self.rows:
            lines += [markdown_table(self.header, self.rows), ""]
        lines += [f"- {note}" for note in self.notes]
        return "\n".join(lines).rstrip() + "\n"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("check", False)
    kwargs.setdefault("timeout", 300)
    return subprocess.run(list(argv), **kwargs)


def first_line(argv: Sequence[str]) -> str:
    if not shutil.which(argv[0]):
        return "-"
    done = run(argv)
    text = (done.stdout or done.stderr).strip()
    return text.splitlines()[0] if text else "-"


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    cpu = "-"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    pg = first_line(["/usr/lib/postgresql/15/bin/postgres", "--version"])
    return {
        "cpus (nproc)": str(os.cpu_count()),
        "cpu": cpu,
        "ram": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "os": _os_release(),
        "postgresql": pg,
        "python": sys.version.split()[0],
        "openssh": first_line(["ssh", "-V"]),
        "podman": first_line(["podman", "--version"]),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def _os_release() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "-"
    match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
    return match.group(1) if match else "-"


@contextmanager
def stopwatch(label: str, log: Callable[[str], None]) -> Iterator[None]:
    start = time.monotonic()
    log(f"{label} ...")
    try:
        yield
    finally:
        log(f"{label}: {time.monotonic() - start:.1f} s")


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a live process in KiB; (0, 0) once it is gone."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        return 0, 0
    return rss, hwm
