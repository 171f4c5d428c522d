"""Presets: the stock schema and own liveness rule of off-the-shelf PostgreSQL job queues.

A preset is a layer of ordinary contract keys (see `leaseguard.core.contract.merge_layers`),
placed just above the built-in defaults: every key a user sets explicitly overrides it.
The values come from each system's source; docs/queues.md cites the file for every one.

Where a system's rule is not "status + claimed_at + lease" (graphile-worker has no status
column, pg-boss computes each row's expiry from its own columns, Solid Queue's and
procrastinate's claims live as long as the process that owns them keeps beating, Que's job
is worked exactly while a session holds its advisory lock, good_job's while its lock or its
owner process lives, pgmq's message while its visibility timeout runs), the
preset also names a claim rule; the SQL of that rule lives in `leaseguard.core.predicate`,
written in code with psycopg.sql, never taken from configuration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
WORKER_HEARTBEAT_RULE = "worker_heartbeat"  # procrastinate: status + its worker's heartbeat
VISIBILITY_RULE = "visibility"  # pgmq: a read message is hidden until its vt

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
    # oban-bg/oban 2.23.0: lib/oban/engines/basic.ex rescue_jobs: state == "executing" and
    # attempted_at < now - rescue_after. lib/oban/lifeline.ex defaults rescue_after to 60 min
    # when unset, but the installer (lib/mix/tasks/oban.install.ex) writes
    # `lifeline: [rescue_after: {2, :hours}]` into every new app's config: 2 h, the longer
    # (safe) of the two. attempted_at is :utc_datetime_usec, a naive `timestamp` holding UTC.
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
        task_timeout_s=2 * HOUR_S,
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
    # procrastinate-org/procrastinate 3.x (heartbeats since 3.1.0, procrastinate/sql/
    # schema.sql): a fetched job is `doing` with worker_id naming a procrastinate_workers row,
    # whose last_heartbeat the worker sets every update_heartbeat_interval (10 s). queries.sql
    # select_stalled_jobs_by_heartbeat: a `doing` job is stalled when worker_id IS NULL (the
    # worker unregistered: ON DELETE SET NULL) or its worker's last_heartbeat is older than
    # stalled_worker_timeout (worker.py: 30 s). 'aborting' (legacy; 03.00.00 turned every
    # such row into 'doing') is left unclassified: a row holding it fails the check.
    "procrastinate": _preset(
        "procrastinate_jobs",
        status_column="status",
        claimed_statuses=["doing"],
        queued_statuses=["todo"],
        finished_statuses=["succeeded", "failed", "cancelled", "aborted"],
        task_timeout_s=30.0,
    ),
    # pgmq/pgmq 1.11 (pgmq-extension/sql/pgmq.sql, create_non_partitioned): one table
    # pgmq.q_<queue> per queue; pgmq.read() takes messages whose vt <= clock_timestamp() and
    # sets vt = clock_timestamp() + vt seconds, read_ct + 1, last_read_at; delete/archive
    # remove the row. A read message is hidden (being worked) until its vt; then any reader
    # may take it again. Each row carries its own expiry: no task timeout is looked up.
    # The queue's table has no stock name: `table: q_<queue>` is required.
    "pgmq": {
        "schema": "pgmq",
        "id_column": "msg_id",
        "claimed_at_column": "last_read_at",
        "lease": {"expires_at_column": "vt"},
    },
}

# Presets whose table has no stock name: the user names it (pgmq: one table per queue).
TABLE_REQUIRED = {"pgmq": "q_<queue>"}

# riverqueue/river: the job's kind, whose worker's Timeout() shapes its rescue.
KIND_COLUMNS = {"river": "kind"}

# Presets whose stock table is partitioned: pg-boss since 10.0.0 (commit 4b3d9f4), src/plans.ts
# createTableJob: PARTITION BY LIST (name), unless created with noTablePartitioning.
PARTITIONED_TABLES = frozenset({"pg-boss"})

# The per-row expiry columns of pg-boss's job table (src/plans.ts createTableJob).
PG_BOSS_EXPIRY_COLUMNS = ("expire_seconds", "heartbeat_on", "heartbeat_seconds")

# Presets whose claim rule is not the plain status rule.
CLAIM_RULES: dict[str, str] = {
    "graphile_worker": LOCKED_AT_RULE,
    "pg-boss": ROW_EXPIRY_RULE,
    "solid_queue": OWNER_HEARTBEAT_RULE,
    "que": ADVISORY_LOCK_RULE,
    "good_job": PROCESS_LOCK_RULE,
    "procrastinate": WORKER_HEARTBEAT_RULE,
    "pgmq": VISIBILITY_RULE,
}

# The columns each rule reads besides the id (and claimed_at, for the rules that have one).
RULE_COLUMNS: dict[str, tuple[str, ...]] = {
    LOCKED_AT_RULE: ("attempts", "max_attempts"),
    ROW_EXPIRY_RULE: PG_BOSS_EXPIRY_COLUMNS,
    OWNER_HEARTBEAT_RULE: ("process_id",),
    # que: a job with neither is not done (lib/que/poller.rb polls exactly those).
    ADVISORY_LOCK_RULE: ("finished_at", "expired_at"),
    PROCESS_LOCK_RULE: ("finished_at", "locked_by_id"),
    WORKER_HEARTBEAT_RULE: ("worker_id",),
    VISIBILITY_RULE: ("read_ct",),
}

# Rules that class rows by a status column (pg-boss and procrastinate beside their expiry).
STATUS_COLUMN_RULES = (STATUS_RULE, ROW_EXPIRY_RULE, WORKER_HEARTBEAT_RULE)
# Rules whose claim records no time (Que's lock; procrastinate's job has no claim column:
# its worker's heartbeat is the whole story), so no claim is ever an orphan of a restart.
NO_CLAIM_TIME_RULES = (ADVISORY_LOCK_RULE, WORKER_HEARTBEAT_RULE)


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
    WORKER_HEARTBEAT_RULE: Owners("worker_id", "procrastinate_workers", "last_heartbeat"),
}

# Rules that read pg_locks: they see other sessions' advisory locks, which a standby does
# not have (its pg_locks shows its own sessions only).
ADVISORY_LOCK_RULES = (ADVISORY_LOCK_RULE, PROCESS_LOCK_RULE)


def preset_layer(name: str, keys: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The preset's contract keys, as a fresh layer (callers may merge into it); `keys` are
    the ones set explicitly, checked for what the preset cannot supply (pgmq's table)."""
    try:
        layer = PRESETS[name]
    except KeyError:
        raise ConfigError(f"preset must be one of {', '.join(sorted(PRESETS))}") from None
    if name in TABLE_REQUIRED and not (keys or {}).get("table"):
        raise ConfigError(
            f"preset {name} needs table: the queue's own table, {TABLE_REQUIRED[name]} "
            "(one check per queue)"
        )
    return {k: dict(v) if isinstance(v, dict) else v for k, v in layer.items()}


UNLIMITED = "unlimited"


class KindTimeouts(dict[str, float | None]):
    """{kind: seconds, or None for unlimited}. Hashable like every other part of a Contract
    (a frozen dataclass); never changed once validated."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda pair: pair[0])))


def kind_timeouts(value: object, preset: str | None) -> KindTimeouts:
    """`kind_timeouts: {kind: seconds | unlimited}` as {kind: seconds, or None: unlimited}.

    River's Worker.Timeout(): a positive duration, or -1 for none (`unlimited`; -1 is taken
    too). Only a preset whose table names each job's kind can use it.
    """
    if value is None or value == {}:
        return KindTimeouts()
    if preset not in KIND_COLUMNS:
        raise ConfigError(
            f"kind_timeouts needs a preset whose jobs have a kind: {', '.join(KIND_COLUMNS)}"
        )
    if not isinstance(value, Mapping):
        raise ConfigError("kind_timeouts must be a mapping of job kind to seconds or unlimited")
    pairs = sorted(value.items(), key=lambda pair: str(pair[0]))
    return KindTimeouts((str(kind), _kind_timeout(kind, s)) for kind, s in pairs)


def _kind_timeout(kind: object, value: object) -> float | None:
    """Seconds > 0 (a number, or ASCII digits as `-e` gives them), or None for unlimited."""
    if value in (UNLIMITED, -1, "-1") and not isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    seconds = value if isinstance(value, int | float) and not isinstance(value, bool) else 0
    if math.isfinite(seconds) and seconds > 0:
        return float(seconds)
    raise ConfigError(
        f"kind_timeouts.{kind} must be a number of seconds greater than 0, or unlimited"
    )


def kind_column(preset: str | None) -> str:
    """The column holding a job's kind (River's `kind`)."""
    return KIND_COLUMNS[preset or ""]


def claim_rule(preset: str | None) -> str:
    """The claim rule of a preset (the plain status rule without one)."""
    return CLAIM_RULES.get(preset or "", STATUS_RULE)
