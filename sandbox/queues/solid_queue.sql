-- Solid Queue's job, process and execution tables, reconstructed by hand for leaseguard's
-- tests and benchmarks. This is NOT Solid Queue's schema file: it is our own DDL restating
-- the facts of the schema the guard depends on.
--
-- Facts from rails/solid_queue (commit 29e818d9c1181195736ffc5d7c1d1c03757b7752),
-- lib/generators/solid_queue/install/templates/db/queue_schema.rb (an ActiveRecord 7.1
-- schema), as ActiveRecord's PostgreSQL adapter creates it: a bigserial `id` key per
-- table; `t.datetime` is `timestamp(6) without time zone` (Solid Queue writes UTC in it);
-- `t.string` is `character varying` without a length; executions reference their job with
-- ON DELETE CASCADE.
--
-- Kept: solid_queue_claimed_executions (the guard's claims table), solid_queue_processes
-- (the owners' table it joins by primary key), solid_queue_jobs (what executions
-- reference) and solid_queue_ready_executions (where the tests put queued jobs), each with
-- its indexes under the same names. Left out, as neither the guard nor the tests read
-- them: the blocked, failed, scheduled and recurring executions, pauses, recurring tasks
-- and semaphores.

CREATE TABLE solid_queue_jobs (
    id bigserial PRIMARY KEY,
    queue_name character varying NOT NULL,
    class_name character varying NOT NULL,
    arguments text,
    priority integer DEFAULT 0 NOT NULL,
    active_job_id character varying,
    scheduled_at timestamp(6) without time zone,
    finished_at timestamp(6) without time zone,
    concurrency_key character varying,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL
);
CREATE INDEX index_solid_queue_jobs_on_active_job_id ON solid_queue_jobs (active_job_id);
CREATE INDEX index_solid_queue_jobs_on_class_name ON solid_queue_jobs (class_name);
CREATE INDEX index_solid_queue_jobs_on_finished_at ON solid_queue_jobs (finished_at);
CREATE INDEX index_solid_queue_jobs_for_filtering ON solid_queue_jobs (queue_name, finished_at);
CREATE INDEX index_solid_queue_jobs_for_alerting ON solid_queue_jobs (scheduled_at, finished_at);

CREATE TABLE solid_queue_processes (
    id bigserial PRIMARY KEY,
    kind character varying NOT NULL,
    last_heartbeat_at timestamp(6) without time zone NOT NULL,
    supervisor_id bigint,
    pid integer NOT NULL,
    hostname character varying,
    metadata text,
    created_at timestamp(6) without time zone NOT NULL,
    name character varying NOT NULL
);
CREATE INDEX index_solid_queue_processes_on_last_heartbeat_at ON solid_queue_processes
    (last_heartbeat_at);
CREATE UNIQUE INDEX index_solid_queue_processes_on_name_and_supervisor_id
    ON solid_queue_processes (name, supervisor_id);
CREATE INDEX index_solid_queue_processes_on_supervisor_id ON solid_queue_processes
    (supervisor_id);

-- One row per job being worked, deleted when it ends; process_id is its owner (no foreign
-- key: a pruned process leaves its claims behind until the supervisor fails them).
CREATE TABLE solid_queue_claimed_executions (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
    process_id bigint,
    created_at timestamp(6) without time zone NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_claimed_executions_on_job_id
    ON solid_queue_claimed_executions (job_id);
CREATE INDEX index_solid_queue_claimed_executions_on_process_id_and_job_id
    ON solid_queue_claimed_executions (process_id, job_id);

CREATE TABLE solid_queue_ready_executions (
    id bigserial PRIMARY KEY,
    job_id bigint NOT NULL REFERENCES solid_queue_jobs (id) ON DELETE CASCADE,
    queue_name character varying NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    created_at timestamp(6) without time zone NOT NULL
);
CREATE UNIQUE INDEX index_solid_queue_ready_executions_on_job_id
    ON solid_queue_ready_executions (job_id);
CREATE INDEX index_solid_queue_poll_all ON solid_queue_ready_executions (priority, job_id);
CREATE INDEX index_solid_queue_poll_by_queue ON solid_queue_ready_executions
    (queue_name, priority, job_id);
