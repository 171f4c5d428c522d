"""Small helpers shared by the benchmarks: statistics, formatting, the machine, subprocesses."""

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
    return f"{fmt_s(min(values))}..{fmt_s(max(values))}" if values else "-"


def fmt_s(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "-"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"


def fmt_signed_s(seconds: float) -> str:
    return ("-" if seconds < 0 else "+") + fmt_s(abs(seconds))


def fmt_ratio(value: float) -> str:
    return "-" if value != value else f"{value:.2f}x"


@dataclass
class Finding:
    """One line of the summary: what was measured, against which target, met or not."""

    item: str
    measure: str
    value: str
    target: str
    met: bool | None  # None: no target
    note: str = ""

    @property
    def verdict(self) -> str:
        return "-" if self.met is None else "met" if self.met else "NOT met"


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
    kwargs = {"capture_output": True, "text": True, "check": False, "timeout": 300, **kwargs}
    return subprocess.run(list(argv), **kwargs)


def machine() -> dict[str, str]:
    """What the figures were measured on."""

    def first_line(*argv: str) -> str:
        done = run(argv) if shutil.which(argv[0]) else None
        text = (done.stdout or done.stderr).strip() if done else ""
        return text.splitlines()[0] if text else "-"

    def grep(path: str, pattern: str) -> str:
        match = re.search(pattern, Path(path).read_text(), re.MULTILINE)
        return match.group(1).strip() if match else "-"

    mem_kb = int(grep("/proc/meminfo", r"^MemTotal:\s*(\d+)"))
    return {
        "cpus (nproc)": str(os.cpu_count()),
        "cpu": grep("/proc/cpuinfo", r"^model name\s*:(.*)$"),
        "ram": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "os": grep("/etc/os-release", r'^PRETTY_NAME="?([^"\n]*)"?'),
        "postgresql": first_line("/usr/lib/postgresql/15/bin/postgres", "--version"),
        "python": sys.version.split()[0],
        "openssh": first_line("ssh", "-V"),
        "podman": first_line("podman", "--version"),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


@contextmanager
def stopwatch(label: str, log: Callable[[str], None]) -> Iterator[None]:
    start = time.monotonic()
    log(f"{label} ...")
    try:
        yield
    finally:
        log(f"{label}: {time.monotonic() - start:.1f} s")


def log(message: str) -> None:
    print(
        f"[bench {time.strftime('%H:%M:%S', time.gmtime())}] {message}", file=sys.stderr, flush=True
    )


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a live process in KiB; (0, 0) once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    found = dict(re.findall(r"^(VmRSS|VmHWM):\s*(\d+)", status, re.MULTILINE))
    return int(found.get("VmRSS", 0)), int(found.get("VmHWM", 0))
