"""Shared helpers of the fault suite (keep small and additive: several files use them)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from sandbox.pgcluster import PgCluster

PG_BASE_DIR = "/tmp"


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
        conn.execute(
            "SELECT cron.unschedule(jobid) FROM cron.job WHERE starts_with(jobname, %s)",
            (f"leaseguard-paused:{name}@",),
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
