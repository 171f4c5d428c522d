"""Shared helpers of the fault suite (keep small and additive: several files use them)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sandbox.pgcluster import PgCluster

PG_BASE_DIR = "/tmp"


class Lines:
    """A process's output, read line by line in a thread, so a test can wait for one."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, text: str, timeout_s: float = 60) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def text(self) -> str:
        self._thread.join(timeout=60)
        return "".join(self.lines)


def wait_until(condition: Callable[[], bool], timeout_s: float = 60) -> bool:
    """Poll a condition with a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def job_active(cluster: PgCluster, name: str) -> str:
    """cron.job.active of a job, read on a connection of the test's own: 't' or 'f'."""
    with cluster.connect(socket=True) as conn:
        row = conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (name,)).fetchone()
    return {True: "t", False: "f"}[row[0]]


def unschedule_with_records(cluster: PgCluster, name: str) -> None:
    """Remove a test's job and any pause record of it (records live in the cron database)."""
    with cluster.connect(socket=True) as conn:
        conn.execute(
            "SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname IN (%s, %s)",
            (name, f"leaseguard-paused:{name}"),
        )


@pytest.fixture
def own_cluster() -> Iterator[PgCluster]:
    """A private PostgreSQL + pg_cron that a test may stop and start (the session one is shared)."""
    with PgCluster(PG_BASE_DIR) as cluster:
        yield cluster


def stop_server(cluster: PgCluster) -> None:
    cluster._pg_ctl("stop", "-m", "fast", check=True)


def start_server(cluster: PgCluster) -> None:
    cluster._pg_ctl("start", "-l", str(cluster.logfile), check=True)


def terminate(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
