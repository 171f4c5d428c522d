"""Presets: the stock schema and own liveness rule of off-the-shelf PostgreSQL job queues.

A preset is a layer of ordinary contract keys (see `leaseguard.core.contract.merge_layers`),
placed just above the built-in defaults: every key a user sets explicitly overrides it.
The values come from each system's source; docs/queues.md cites the file for every one.

Where a system's rule is not "status + claimed_at + lease" (graphile-worker has no status
column, pg-boss computes each row's expiry from its own columns, Solid Queue's claim lives
as long as the process that owns it keeps beating), the preset also names a
claim rule; the SQL of that rule lives in `leaseguard.core.predicate`, written in code with
psycopg.sql, never taken from configuration.
"""

from __future__ import annotations

from typing import Any

from leaseguard.core.errors import ConfigError

# The claim rules the predicate knows besides the plain status rule.
STATUS_RULE = "status"
LOCKED_AT_RULE = "locked_at"  # graphile-worker: claimed iff locked_at is set
ROW_EXPIRY_RULE = "row_expiry"  # pg-boss: started_on + expire_seconds, and its heartbeat
OWNER_HEARTBEAT_RULE = "owner_heartbeat"  # solid_queue: the claiming process's heartbeat

HOUR_S = 3600.0

PRESETS: dict[str, dict[str, Any]] = {
    # riverqueue/river: internal/maintenance/job_rescuer.go rescues `running` jobs whose
    # attempted_at is older than RescueStuckJobsAfter (JobRescuerRescueAfterDefault = 1 h).
    "river": {
        "table": "river_job",
        "id_column": "id",
        "status_column": "state",
        "claimed_statuses": ["running"],
        "queued_statuses": ["available", "pending", "retryable", "scheduled"],
        # rivertype/job.go: the finalized states (finalized_at set, the table's CHECK).
        "finished_statuses": ["completed", "cancelled", "discarded"],
        "claimed_at_column": "attempted_at",
        "lease": {"multiplier": 1.0},
        "task_timeout": {"source": "fixed", "value_s": HOUR_S},
    },
    # oban-bg/oban: lib/oban/lifeline.ex (rescue_after: 60 min) and
    # lib/oban/engines/basic.ex rescue_jobs: state == "executing" and attempted_at < cut.
    # attempted_at is :utc_datetime_usec, a naive `timestamp` holding UTC.
    "oban": {
        "schema": "public",
        "table": "oban_jobs",
        "id_column": "id",
        "status_column": "state",
        "claimed_statuses": ["executing"],
        "queued_statuses": ["available", "scheduled", "retryable", "suspended"],
        # lib/oban/job.ex: the terminal states, which Oban's Pruner deletes.
        "finished_statuses": ["completed", "discarded", "cancelled"],
        "claimed_at_column": "attempted_at",
        "timestamp_zone": "UTC",
        "lease": {"multiplier": 1.0},
        "task_timeout": {"source": "fixed", "value_s": HOUR_S},
    },
    # graphile/worker: src/sql/resetLockedAt.ts unlocks jobs whose locked_at is older than
    # 4 hours; sql/000011.sql defines is_available = locked_at is null and attempts <
    # max_attempts, so an unlocked job with attempts >= max_attempts is finished (exhausted).
    "graphile_worker": {
        "schema": "graphile_worker",
        "table": "_private_jobs",
        "id_column": "id",
        "claimed_at_column": "locked_at",
        "lease": {"multiplier": 1.0},
        "task_timeout": {"source": "fixed", "value_s": 4 * HOUR_S},
    },
    # timgit/pg-boss (schema 37, package 12): src/plans.ts failJobsByTimeout fails `active`
    # jobs once started_on + expire_seconds has passed, and failJobsByHeartbeat those whose
    # heartbeat_on + heartbeat_seconds has (when the job has a heartbeat). Each row carries
    # its own expiry: no task timeout is looked up. `pgboss.job` is PARTITION BY LIST (name).
    "pg-boss": {
        "schema": "pgboss",
        "table": "job",
        "id_column": "id",
        "status_column": "state",
        "claimed_statuses": ["active"],
        "queued_statuses": ["created", "retry"],
        # src/plans.ts: no worker fetches a job in these states again.
        "finished_statuses": ["completed", "cancelled", "failed"],
        "claimed_at_column": "started_on",
    },
    # rails/solid_queue: a job is claimed by a row of solid_queue_claimed_executions (deleted
    # when the job finishes), owned by a solid_queue_processes row whose last_heartbeat_at is
    # touched every process_heartbeat_interval (60 s). app/models/solid_queue/process/
    # prunable.rb prunes processes silent for process_alive_threshold (lib/solid_queue.rb:
    # 5 minutes) and fails their claims; a claim whose process row is gone is `orphaned`
    # (claimed_execution.rb) and failed by the supervisor. Timestamps are naive UTC.
    "solid_queue": {
        "schema": "public",
        "table": "solid_queue_claimed_executions",
        "id_column": "job_id",
        "claimed_at_column": "created_at",
        "timestamp_zone": "UTC",
        "lease": {"multiplier": 1.0},
        "task_timeout": {"source": "fixed", "value_s": 300.0},
    },
}

# The per-row expiry columns of pg-boss's job table (src/plans.ts createTableJob).
PG_BOSS_EXPIRY_COLUMNS = ("expire_seconds", "heartbeat_on", "heartbeat_seconds")

# Presets whose claim rule is not the plain status rule.
CLAIM_RULES: dict[str, str] = {
    "graphile_worker": LOCKED_AT_RULE,
    "pg-boss": ROW_EXPIRY_RULE,
    "solid_queue": OWNER_HEARTBEAT_RULE,
}
# solid_queue: the claim's owner column and the owners' table with its heartbeat column.
OWNER_COLUMN = "process_id"
OWNERS_TABLE = "solid_queue_processes"
OWNER_HEARTBEAT_COLUMN = "last_heartbeat_at"


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
