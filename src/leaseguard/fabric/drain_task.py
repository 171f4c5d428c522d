"""`fab -H app1,app2 drain`: pause intake, wait until no live lease remains, resume intake.

The task only: what it runs (leaseguard.fabric.drain_hosts) brings psycopg and the drain's
machinery, imported when a drain runs, not whenever a fabfile loads the collection.
"""

from __future__ import annotations

from typing import NamedTuple

from fabric import task
from invoke.context import Context

from leaseguard.fabric.fleet import fleet


class DrainFlags(NamedTuple):
    """The task's own flags as given (None: not given; the `drain:` section decides)."""

    deadline_s: float | None
    poll_s: float | None
    pause_cron_job: list[str] | None
    resume_retry_s: float | None
    json_: bool
    status_file: str | None
    metrics_file: str | None
    run: str | None = None


@task(
    help={
        "deadline_s": "give up after N seconds (default and maximum: the longest remaining "
        "lease seen at the start)",
        "poll_s": "seconds between polls (default 5)",
        "pause_cron_job": "pg_cron job to deactivate during the drain and reactivate after "
        "(repeatable); shared intake: paused once for all hosts, resumed after the last",
        "resume_retry_s": "retry a failed resume for up to N seconds (default 60)",
        "json_": "print a JSON list (one object per host; one, host fleet, for a fleet "
        "drain) instead of timeline lines",
        "status_file": "rewrite a JSON snapshot of the drain (every host) here after every "
        "poll; read it with `leaseguard status PATH`",
        "metrics_file": "rewrite Prometheus text metrics here after every poll",
        "run": "once drained, run this shell command on every host with intake still held; "
        "intake is given back only after every host's command has ended (exit status: the "
        "first failing host's)",
    },
    iterable=["pause_cron_job"],
)
@fleet
def drain(
    c: Context,
    deadline_s: float | None = None,
    poll_s: float | None = None,
    pause_cron_job: list[str] | None = None,
    resume_retry_s: float | None = None,
    json_: bool = False,
    status_file: str | None = None,
    metrics_file: str | None = None,
    run: str | None = None,
) -> None:
    """Pause intake, wait until no live lease remains (lease-bounded), resume intake.

    With pg_cron jobs to pause (shared intake), the fleet is drained as one: intake is
    held once, the wait judges every host's facts with the fleet rule, and intake is
    given back once, after the wait (and after --run's command on every host), on every
    exit path (Ctrl-C, SIGTERM and SIGHUP included).
    """
    from leaseguard.fabric.drain_hosts import drain_hosts

    flags = DrainFlags(
        deadline_s, poll_s, pause_cron_job, resume_retry_s, json_, status_file, metrics_file, run
    )
    drain_hosts(c, flags)
