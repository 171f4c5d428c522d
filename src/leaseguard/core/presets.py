"""Presets: the stock schema and own liveness rule of off-the-shelf PostgreSQL job queues.

A preset is a layer of ordinary contract keys (see `leaseguard.core.contract.merge_layers`),
placed just above the built-in defaults: every key a user sets explicitly overrides it.
The values come from each system's source; docs/queues.md cites the file for every one.

Where a system's rule is not "status + claimed_at + lease" (graphile-worker has no status
column, pg-boss computes each row's expiry from its own columns, Solid Queue's claim lives
as long as the process that owns it keeps beating, Que's job is worked exactly while a
session holds its advisory lock, good_job's while its lock or its owner process lives), the
preset also names a claim rule; the SQL of that rule lives in `leaseguard.core.predicate`,
written in code with psycopg.sql, never taken from configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leaseguard.core.errors import ConfigError

# The claim rules the predicate knows besides the plain status rule.
STATUS_RULE = "status"
LOCKED_AT_RULE = "locked_at"  # graphile-worker: claimed iff locked_at is set
ROW_EXPIRY_RULE = "row_expiry"  # pg-boss: started_on + expire_seconds, and its heartbeat
OWNER_HEARTBEAT_RULE = "owner_heartbeat"  # solid_queue: the claiming process's heartbeat
ADVISORY_LOCK_RULE = "advisory_lock"  # que: a session holds the job's advisory lock
PROCESS_LOCK_RULE = "process_lock"  # good_job: the job's lock, or its owner process alive

HOUR_S = 3600.0


def _preset(table: str, *, task_timeout_s: float | None = None, **keys: Any) -> dict[str, Any]:
    """A preset's contract keys: its table (id column `id` unless `keys` says otherwise) and
    `keys` as given. `task_timeout_s` is the queue's own fixed task timeout, and the lease is
    exactly that long (multiplier 1); without it no task timeout is set or looked up."""
    layer: dict[str, Any] = {"table": table, "id_column": "id", **keys}
    if task_timeout_s is not None:
        layer["lease"] = {"multiplier": 1.0}
        layer["task_timeout"] = {"source": "fixed", "value_s": task_timeout_s}
    return layer


PRESETS: dict[str, dict[str, Any]] = {
    # riverqueue/river: internal/maintenance/job_rescuer.go rescues `running` jobs whose
    # attempted_at is older than RescueStuckJobsAfter (JobRescuerRescueAfterDefault = 1 h).
    "river": _preset(
        "river_job",
        status_column="state",
        claimed_statuses=["running"],
        queued_statuses=["available", "pending", "retryable", "scheduled"],
        # rivertype/job.go: the finalized states (finalized_at set, the table's CHECK).
        finished_statuses=["completed", "cancelled", "discarded"],
        claimed_at_column="attempted_at",
        task_timeout_s=HOUR_S,
    ),
    # oban-bg/oban: lib/oban/lifeline.ex (rescue_after: 60 min) and
    # lib/oban/engines/basic.ex rescue_jobs: state == "executing" and attempted_at < cut.
    # attempted_at is :utc_datetime_usec, a naive `timestamp` holding UTC.
    "oban": _preset(
        "oban_jobs",
        schema="public",
        status_column="state",
        claimed_statuses=["executing"],
        queued_statuses=["available", "scheduled", "retryable", "suspended"],
        # lib/oban/job.ex: the terminal states, which Oban's Pruner deletes.
        finished_statuses=["completed", "discarded", "cancelled"],
        claimed_at_column="attempted_at",
        timestamp_zone="UTC",
        task_timeout_s=HOUR_S,
    ),
    # graphile/worker: src/sql/resetLockedAt.ts unlocks jobs whose locked_at is older than
    # 4 hours; sql/000011.sql defines is_available = locked_at is null and attempts <
    # max_attempts, so an unlocked job with attempts >= max_attempts is finished (exhausted).
    "graphile_worker": _preset(
        "_private_jobs",
        schema="graphile_worker",
        claimed_at_column="locked_at",
        task_timeout_s=4 * HOUR_S,
    ),
    # timgit/pg-boss (schema 37, package 12): src/plans.ts failJobsByTimeout fails `active`
    # jobs once started_on + expire_seconds has passed, and failJobsByHeartbeat those whose
    # heartbeat_on + heartbeat_seconds has (when the job has a heartbeat). Each row carries
    # its own expiry: no task timeout is looked up. `pgboss.job` is PARTITION BY LIST (name).
    "pg-boss": _preset(
        "job",
        schema="pgboss",
        status_column="state",
        claimed_statuses=["active"],
        queued_statuses=["created", "retry"],
        # src/plans.ts: no worker fetches a job in these states again.
        finished_statuses=["completed", "cancelled", "failed"],
        claimed_at_column="started_on",
    ),
    # rails/solid_queue: a job is claimed by a row of solid_queue_claimed_executions (deleted
    # when the job finishes), owned by a solid_queue_processes row whose last_heartbeat_at is
    # touched every process_heartbeat_interval (60 s). app/models/solid_queue/process/
    # prunable.rb prunes processes silent for process_alive_threshold (lib/solid_queue.rb:
    # 5 minutes) and fails their claims; a claim whose process row is gone is `orphaned`
    # (claimed_execution.rb) and failed by the supervisor. Timestamps are naive UTC.
    "solid_queue": _preset(
        "solid_queue_claimed_executions",
        schema="public",
        id_column="job_id",
        claimed_at_column="created_at",
        timestamp_zone="UTC",
        task_timeout_s=300.0,
    ),
    # que-rb/que 2.x: lib/que/poller.rb and lib/que/locker.rb take pg_try_advisory_lock(id)
    # (the one-bigint form) on a job and hold it until the worker is done; nothing else
    # says a job is being worked, and Que never rescues one by age. The task timeout here
    # is not a rescue horizon: it only bounds how long a drain waits (docs/queues.md).
    "que": _preset("que_jobs", schema="public", task_timeout_s=HOUR_S),
    # bensheldon/good_job 4.x: app/models/good_job/job.rb perform sets locked_by_id (the
    # process) and locked_at; the default :advisory strategy also holds a session advisory
    # lock on the job (app/models/concerns/good_job/advisory_lockable.rb). A process is
    # active while its own advisory lock is held (lock_type advisory) or, without one,
    # while updated_at is within EXPIRED_INTERVAL (app/models/good_job/process.rb: 5
    # minutes); Process.cleanup unlocks the jobs of the others. Timestamps are naive UTC.
    "good_job": _preset(
        "good_jobs",
        schema="public",
        claimed_at_column="locked_at",
        timestamp_zone="UTC",
        task_timeout_s=300.0,
    ),
}

# The per-row expiry columns of pg-boss's job table (src/plans.ts createTableJob).
PG_BOSS_EXPIRY_COLUMNS = ("expire_seconds", "heartbeat_on", "heartbeat_seconds")

# Presets whose claim rule is not the plain status rule.
CLAIM_RULES: dict[str, str] = {
    "graphile_worker": LOCKED_AT_RULE,
    "pg-boss": ROW_EXPIRY_RULE,
    "solid_queue": OWNER_HEARTBEAT_RULE,
    "que": ADVISORY_LOCK_RULE,
    "good_job": PROCESS_LOCK_RULE,
}

# The columns each rule reads besides the id (and claimed_at, for the rules that have one).
RULE_COLUMNS: dict[str, tuple[str, ...]] = {
    LOCKED_AT_RULE: ("attempts", "max_attempts"),
    ROW_EXPIRY_RULE: PG_BOSS_EXPIRY_COLUMNS,
    OWNER_HEARTBEAT_RULE: ("process_id",),
    # que: a job with neither is not done (lib/que/poller.rb polls exactly those).
    ADVISORY_LOCK_RULE: ("finished_at", "expired_at"),
    PROCESS_LOCK_RULE: ("finished_at", "locked_by_id"),
}


@dataclass(frozen=True)
class Owners:
    """The processes that own claims: their table (beside the claims table, in its schema),
    the claims table's column naming the owner, and how an owner is known to be alive."""

    column: str
    table: str
    heartbeat_column: str
    # good_job: an owner whose lock_type is set (advisory) is alive exactly while a session
    # holds its advisory lock, whatever its heartbeat says.
    lock_type_column: str | None = None


OWNERS: dict[str, Owners] = {
    OWNER_HEARTBEAT_RULE: Owners("process_id", "solid_queue_processes", "last_heartbeat_at"),
    PROCESS_LOCK_RULE: Owners("locked_by_id", "good_job_processes", "updated_at", "lock_type"),
}

# Rules that read pg_locks: they see other sessions' advisory locks, which a standby does
# not have (its pg_locks shows its own sessions only).
ADVISORY_LOCK_RULES = (ADVISORY_LOCK_RULE, PROCESS_LOCK_RULE)


def preset_layer(name: str) -> dict[str, Any]:
    """The preset's contract keys, as a fresh layer (callers may merge into it)."""
    try:
        layer = PRESETS[name]
    except KeyError:
        raise ConfigError(f"preset must be one of {', '.join(sorted(PRESETS))}") from None
    return {k: dict(v) if isinstance(v, dict) else v for k, v in layer.items()}


def claim_rule(preset: str | None) -> str:
    """The claim rule of a preset (the plain status rule without one)."""
    return CLAIM_RULES.get(preset or "", STATUS_RULE)
