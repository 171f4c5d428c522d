-- good_job's job and process tables, reconstructed by hand for leaseguard's tests and
-- benchmarks. This is NOT good_job's migration: it is our own DDL restating the facts of
-- the schema the guard depends on.
--
-- Facts from bensheldon/good_job 4.19.2 (commit 81db22b7cfde2579b2d735e076fa6eaacc65affa),
-- lib/generators/good_job/templates/install/migrations/create_good_jobs.rb.erb, as
-- ActiveRecord 7's PostgreSQL adapter creates it: `id: :uuid` tables have a uuid key
-- defaulting to gen_random_uuid(); `t.datetime` and `t.timestamps` are
-- `timestamp(6) without time zone` (good_job writes UTC in them), `t.timestamps` NOT NULL;
-- `t.integer ..., limit: 2` is smallint; `t.text ..., array: true` is text[].
--
-- Kept: good_jobs (the guard's claims table) with every index the install creates on it,
-- under the same names, columns, order, method and predicates: the guard reads unfinished
-- jobs through the `WHERE finished_at IS NULL` ones (`index-sql --dsn` names
-- index_good_jobs_on_scheduled_at), and the planner weighs all of them. good_job_processes
-- (the owners' table the guard joins). Left out, as the guard never reads them:
-- good_job_batches, good_job_executions, good_job_settings.

CREATE TABLE good_jobs (
    id uuid DEFAULT gen_random_uuid() PRIMARY KEY,
    queue_name text,
    priority integer,
    serialized_params jsonb,
    scheduled_at timestamp(6) without time zone,
    performed_at timestamp(6) without time zone,
    finished_at timestamp(6) without time zone,
    error text,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    active_job_id uuid,
    concurrency_key text,
    cron_key text,
    retried_good_job_id uuid,
    cron_at timestamp(6) without time zone,
    batch_id uuid,
    batch_callback_id uuid,
    is_discrete boolean,
    executions_count integer,
    job_class text,
    error_event smallint,
    labels text[],
    locked_by_id uuid,
    locked_at timestamp(6) without time zone,
    lock_type smallint
);

CREATE TABLE good_job_processes (
    id uuid DEFAULT gen_random_uuid() PRIMARY KEY,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    state jsonb,
    lock_type smallint
);

-- The indexes in the order the migration creates them: the planner weighs a table's
-- indexes in creation (oid) order and keeps the first of equal-cost paths, so the order is
-- part of which plan the guard gets.
CREATE INDEX index_good_jobs_on_scheduled_at ON good_jobs (scheduled_at)
    WHERE (finished_at IS NULL);
CREATE INDEX index_good_jobs_on_queue_name_and_scheduled_at ON good_jobs
    (queue_name, scheduled_at) WHERE (finished_at IS NULL);
CREATE INDEX index_good_jobs_on_active_job_id_and_created_at ON good_jobs
    (active_job_id, created_at);
CREATE INDEX index_good_jobs_on_concurrency_key_when_unfinished ON good_jobs (concurrency_key)
    WHERE (finished_at IS NULL);
CREATE INDEX index_good_jobs_on_concurrency_key_and_created_at ON good_jobs
    (concurrency_key, created_at);
CREATE INDEX index_good_jobs_on_cron_key_and_created_at_cond ON good_jobs (cron_key, created_at)
    WHERE (cron_key IS NOT NULL);
CREATE UNIQUE INDEX index_good_jobs_on_cron_key_and_cron_at_cond ON good_jobs (cron_key, cron_at)
    WHERE (cron_key IS NOT NULL);
CREATE INDEX index_good_jobs_jobs_on_finished_at_only ON good_jobs (finished_at)
    WHERE finished_at IS NOT NULL;
CREATE INDEX index_good_jobs_jobs_on_priority_created_at_when_unfinished ON good_jobs
    (priority DESC NULLS LAST, created_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_job_jobs_for_candidate_lookup ON good_jobs
    (priority NULLS LAST, created_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_batch_id ON good_jobs (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX index_good_jobs_on_batch_callback_id ON good_jobs (batch_callback_id)
    WHERE batch_callback_id IS NOT NULL;
CREATE INDEX index_good_jobs_on_job_class ON good_jobs (job_class);
CREATE INDEX index_good_jobs_on_labels ON good_jobs USING gin (labels)
    WHERE (labels IS NOT NULL);
CREATE INDEX index_good_jobs_on_priority_scheduled_at_unfinished_unlocked ON good_jobs
    (priority NULLS LAST, scheduled_at) WHERE finished_at IS NULL AND locked_by_id IS NULL;
CREATE INDEX index_good_jobs_on_priority_scheduled_at_unfinished ON good_jobs
    (priority, scheduled_at, id) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_queue_name_priority_scheduled_at_unfinished ON good_jobs
    (queue_name, scheduled_at, id) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_locked_by_id ON good_jobs (locked_by_id)
    WHERE locked_by_id IS NOT NULL;
CREATE INDEX index_good_jobs_for_candidate_dequeue_unlocked ON good_jobs
    (priority NULLS LAST, scheduled_at, id) WHERE finished_at IS NULL AND locked_by_id IS NULL;
CREATE INDEX index_good_jobs_on_queue_name ON good_jobs (queue_name);
CREATE INDEX index_good_jobs_on_created_at ON good_jobs (created_at);
CREATE INDEX index_good_jobs_on_discarded ON good_jobs (finished_at DESC)
    WHERE finished_at IS NOT NULL AND error IS NOT NULL;
CREATE INDEX index_good_jobs_on_scheduled_at_and_queue_name ON good_jobs
    (scheduled_at, queue_name);
CREATE INDEX index_good_jobs_on_unfinished_or_errored ON good_jobs (id)
    WHERE finished_at IS NULL OR error IS NOT NULL;
