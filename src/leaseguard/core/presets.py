"""Presets: the stock schema and own liveness rule of off-the-shelf PostgreSQL job queues, a layer
of contract keys just above the defaults. Each claim rule and its source file: docs/queues.md."""

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from leaseguard.core.errors import ConfigError

# The claim rules besides the plain status rule, each named by the preset whose queue follows it.
STATUS_RULE = "status"
LOCKED_AT_RULE = "graphile_worker"  # claimed iff locked_at is set
ROW_EXPIRY_RULE = "pg-boss"  # started_on + expire_seconds, and its heartbeat
OWNER_HEARTBEAT_RULE = "solid_queue"  # the claiming process's heartbeat
ADVISORY_LOCK_RULE = "que"  # a session holds the job's advisory lock
PROCESS_LOCK_RULE = "good_job"  # the job's lock, or its owner process alive
WORKER_HEARTBEAT_RULE = "procrastinate"  # status + its worker's heartbeat
VISIBILITY_RULE = "pgmq"  # a read message is hidden until its vt


class Owners(NamedTuple):
    """The processes owning claims (their table beside the claims table), alive while they beat."""

    column: str
    table: str
    heartbeat_column: str
    lock_type_column: str | None = None  # good_job: set, alive exactly while it holds its lock


def _preset(table: str, task_timeout_s: float | None = None, **keys: Any) -> dict[str, Any]:
    """`task_timeout_s`: the queue's own fixed timeout, and the lease is exactly that long."""
    layer: dict[str, Any] = {"table": table, "id_column": "id", **keys}
    if task_timeout_s is not None:
        layer["lease"] = {"multiplier": 1.0}
        layer["task_timeout"] = {"source": "fixed", "value_s": task_timeout_s}
    return layer


PRESETS: dict[str, dict[str, Any]] = {
    # riverqueue/river job_rescuer.go: `running` older than RescueStuckJobsAfter (1 h).
    "river": _preset(
        "river_job",
        3600.0,
        status_column="state",
        claimed_statuses=["running"],
        queued_statuses=["available", "pending", "retryable", "scheduled"],
        finished_statuses=["completed", "cancelled", "discarded"],
        claimed_at_column="attempted_at",
    ),
    # oban: `executing` older than the Lifeline's rescue_after (2 h, as the installer writes).
    "oban": _preset(
        "oban_jobs",
        7200.0,
        schema="public",
        status_column="state",
        claimed_statuses=["executing"],
        queued_statuses=["available", "scheduled", "retryable", "suspended"],
        finished_statuses=["completed", "discarded", "cancelled"],
        claimed_at_column="attempted_at",
        timestamp_zone="UTC",
    ),
    # graphile-worker resetLockedAt.ts: locked_at older than 4 h is unlocked.
    "graphile_worker": _preset(
        "_private_jobs", 14400.0, schema="graphile_worker", claimed_at_column="locked_at"
    ),
    # pg-boss: each `active` row carries its own expiry (started_on + expire_seconds, or heartbeat).
    "pg-boss": _preset(
        "job",
        schema="pgboss",
        status_column="state",
        claimed_statuses=["active"],
        queued_statuses=["created", "retry"],
        finished_statuses=["completed", "cancelled", "failed"],
        claimed_at_column="started_on",
    ),
    # solid_queue: a claim lives while its process row beats (process_alive_threshold: 5 min).
    "solid_queue": _preset(
        "solid_queue_claimed_executions",
        300.0,
        schema="public",
        id_column="job_id",
        claimed_at_column="created_at",
        timestamp_zone="UTC",
    ),
    # que: worked while a session holds its advisory lock; the timeout only bounds a drain's wait.
    "que": _preset("que_jobs", 3600.0, schema="public"),
    # good_job: its advisory lock, or its owner process alive (updated within 5 minutes).
    "good_job": _preset(
        "good_jobs", 300.0, schema="public", claimed_at_column="locked_at", timestamp_zone="UTC"
    ),
    # procrastinate: `doing` while its worker beats (30 s); legacy 'aborting' fails the check.
    "procrastinate": _preset(
        "procrastinate_jobs",
        30.0,
        status_column="status",
        claimed_statuses=["doing"],
        queued_statuses=["todo"],
        finished_statuses=["succeeded", "failed", "cancelled", "aborted"],
    ),
    # pgmq: a read message is hidden (worked) until its vt; one table per queue, q_<queue>.
    "pgmq": {
        "schema": "pgmq",
        "id_column": "msg_id",
        "claimed_at_column": "last_read_at",
        "lease": {"expires_at_column": "vt"},
    },
}
# The job's kind (its worker's Timeout() shapes its rescue) and metadata (cancel_attempted_at).
KIND_COLUMNS = {"river": ("kind", "metadata")}
# Presets whose stock table is partitioned (pg-boss since 10.0.0).
PARTITIONED_TABLES = frozenset({"pg-boss"})
# The columns each rule reads besides the id (and claimed_at, for the rules that have one).
RULE_COLUMNS: dict[str, tuple[str, ...]] = {
    LOCKED_AT_RULE: ("attempts", "max_attempts"),
    ROW_EXPIRY_RULE: ("expire_seconds", "heartbeat_on", "heartbeat_seconds"),
    OWNER_HEARTBEAT_RULE: ("process_id",),
    ADVISORY_LOCK_RULE: ("finished_at", "expired_at"),
    PROCESS_LOCK_RULE: ("finished_at", "locked_by_id"),
    WORKER_HEARTBEAT_RULE: ("worker_id",),
    VISIBILITY_RULE: ("read_ct",),
}
# Rules that class rows by a status column (pg-boss and procrastinate beside their expiry).
STATUS_COLUMN_RULES = (STATUS_RULE, ROW_EXPIRY_RULE, WORKER_HEARTBEAT_RULE)
# Rules whose claim records no time, so no claim is ever an orphan of a restart.
NO_CLAIM_TIME_RULES = (ADVISORY_LOCK_RULE, WORKER_HEARTBEAT_RULE)
# Rules that read pg_locks, which on a standby shows only its own sessions.
ADVISORY_LOCK_RULES = (ADVISORY_LOCK_RULE, PROCESS_LOCK_RULE)
OWNERS: dict[str, Owners] = {
    OWNER_HEARTBEAT_RULE: Owners("process_id", "solid_queue_processes", "last_heartbeat_at"),
    PROCESS_LOCK_RULE: Owners("locked_by_id", "good_job_processes", "updated_at", "lock_type"),
    WORKER_HEARTBEAT_RULE: Owners("worker_id", "procrastinate_workers", "last_heartbeat"),
}


def kind_timeouts(value: object, preset: str | None) -> dict[str, float | None]:
    """River's Worker.Timeout() per kind: seconds > 0, or `unlimited` (or -1) for none."""
    if value is None or value == {}:
        return {}
    if preset not in KIND_COLUMNS:
        raise ConfigError(
            f"kind_timeouts needs a preset whose jobs have a kind: {', '.join(KIND_COLUMNS)}"
        )
    if not isinstance(value, Mapping):
        raise ConfigError("kind_timeouts must be a mapping of job kind to seconds or unlimited")
    timeouts: dict[str, float | None] = {}
    for kind, seconds in sorted(value.items(), key=lambda pair: str(pair[0])):
        if isinstance(seconds, str) and seconds.isascii() and seconds.isdigit():
            seconds = int(seconds)
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if seconds in ("unlimited", -1, "-1"):
            timeouts[str(kind)] = None
        elif number and math.isfinite(seconds) and seconds > 0:
            timeouts[str(kind)] = float(seconds)
        else:
            raise ConfigError(
                f"kind_timeouts.{kind} must be a number of seconds greater than 0, or unlimited"
            )
    return timeouts
