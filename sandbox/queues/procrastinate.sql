-- procrastinate's job and worker tables, reconstructed by hand for leaseguard's tests. This
-- is NOT procrastinate's schema file: it is our own DDL restating only the schema facts the
-- `procrastinate` preset and its tests depend on.
--
-- Facts read from procrastinate-org/procrastinate at commit
-- f099a753730d5492bdebdc1c1f2796ffa5cf5671 (3.9.0 + 11), procrastinate/sql/schema.sql:
--   procrastinate_job_status, every label in order ('aborting' is legacy: migration
--     03.00.00_50_post_cancel_notification.sql turned every such row into 'doing');
--   procrastinate_workers (id identity, last_heartbeat timestamptz NOT NULL DEFAULT NOW()),
--     added with worker_id by migrations/03.01.00_01_pre_add_heartbeat.sql;
--   procrastinate_jobs with the columns fetch, heartbeat and stalled-job queries use, and
--     worker_id REFERENCES procrastinate_workers ON DELETE SET NULL (unregistering a
--     worker leaves its `doing` jobs with no worker: stalled, queries.sql
--     select_stalled_jobs_by_heartbeat);
--   the two indexes over the jobs the guard reads (`doing` with a worker, `todo`/`doing`).
-- Left out: events, periodic defers, functions, triggers, the other indexes.

CREATE TYPE procrastinate_job_status AS ENUM (
    'todo', 'doing', 'succeeded', 'failed', 'cancelled', 'aborting', 'aborted'
);

CREATE TABLE procrastinate_workers (
    id bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    last_heartbeat timestamp with time zone NOT NULL DEFAULT NOW()
);

CREATE TABLE procrastinate_jobs (
    id bigserial PRIMARY KEY,
    queue_name character varying(128) NOT NULL,
    task_name character varying(128) NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    lock text,
    queueing_lock text,
    args jsonb DEFAULT '{}' NOT NULL,
    status procrastinate_job_status DEFAULT 'todo'::procrastinate_job_status NOT NULL,
    scheduled_at timestamp with time zone NULL,
    attempts integer DEFAULT 0 NOT NULL,
    abort_requested boolean DEFAULT false NOT NULL,
    worker_id bigint REFERENCES procrastinate_workers (id) ON DELETE SET NULL,
    CONSTRAINT check_not_todo_abort_requested CHECK (NOT (status = 'todo' AND abort_requested = true))
);

CREATE INDEX idx_procrastinate_jobs_worker_not_null ON procrastinate_jobs (worker_id)
    WHERE worker_id IS NOT NULL AND status = 'doing'::procrastinate_job_status;
CREATE INDEX procrastinate_jobs_id_lock_idx_v1 ON procrastinate_jobs (id, lock)
    WHERE status = ANY (ARRAY['todo'::procrastinate_job_status, 'doing'::procrastinate_job_status]);
CREATE INDEX idx_procrastinate_workers_last_heartbeat ON procrastinate_workers (last_heartbeat);
