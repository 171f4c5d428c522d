"""A pg_cron intake job for a test's database, and a busy intake that claims through it.

The busy intake claims a row every `period_s` while its pg_cron job is active (as pg_cron
starts runs only of active jobs), each claim finished 0.3 s later: the incident's busy
intake, for the tests that prove no claim is taken while intake is held.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import datetime

import psycopg

from sandbox.runs_table import create_runs_table

RECORD_PREFIX = "leaseguard-paused:"


@contextlib.contextmanager
def intake_job(db, *, with_table: bool = True) -> Iterator[str]:
    """pg_cron job `claim_<db>` in the cron database, for the test's database (and its
    execution_runs table unless it has one); it and any hold records of it go after."""
    job = f"claim_{db.name}"
    with cron_conn(db) as conn:
        conn.execute(
            "SELECT cron.schedule_in_database(%s, '* * * * *', 'SELECT 1', %s)", (job, db.name)
        )
    if with_table:
        with db.connect(socket=True) as conn:
            create_runs_table(conn)
    try:
        yield job
    finally:
        with cron_conn(db) as conn:
            conn.execute(
                "SELECT cron.unschedule(jobid) FROM cron.job WHERE starts_with(jobname, %s)",
                (f"{RECORD_PREFIX}{job}@",),
            )


def active(db, job: str) -> bool:
    """cron.job.active, read on the test's own connection."""
    with db.cluster.connect(socket=True) as conn:
        row = conn.execute("SELECT active FROM cron.job WHERE jobname = %s", (job,)).fetchone()
    return bool(row[0])


def cron_conn(db) -> psycopg.Connection:
    return db.cluster.connect(socket=True)


class BusyIntake(threading.Thread):
    """Claims a row every `period_s` while `job` is active; finishes each 0.3 s later."""

    def __init__(self, db, job: str, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.db, self.job, self.halt = db, job, threading.Event()
        self.period_s = period_s
        self.claims = 0
        self.looks = 0  # reads of the job's active flag: each a chance to claim

    def run(self) -> None:
        with cron_conn(self.db) as cron, self.db.connect(socket=True) as app:
            next_id, last_claim = 1000, 0.0
            while not self.halt.wait(0.05):
                app.execute(
                    "UPDATE execution_runs SET status = 'done' WHERE status = 'running' "
                    "AND claimed_at < clock_timestamp() - interval '0.3 s'"
                )
                if time.monotonic() - last_claim < self.period_s:
                    continue
                row = cron.execute(
                    "SELECT active FROM cron.job WHERE jobname = %s", (self.job,)
                ).fetchone()
                self.looks += 1
                if row and row[0]:
                    next_id, last_claim = next_id + 1, time.monotonic()
                    app.execute(
                        "INSERT INTO execution_runs (id, status, claimed_at) "
                        "VALUES (%s, 'running', clock_timestamp())",
                        (next_id,),
                    )
                    self.claims += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)


def claims_between(db, start: datetime, end: datetime) -> int:
    with db.connect(socket=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM execution_runs WHERE claimed_at > %s AND claimed_at <= %s",
            (start, end),
        ).fetchone()
    return int(row[0])
