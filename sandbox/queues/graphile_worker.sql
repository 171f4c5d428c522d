-- graphile-worker's job tables as its migrations leave them, in schema graphile_worker.
-- A reconstruction written for leaseguard's tests, not graphile-worker's migrations. Facts
-- read from graphile/worker at commit abfb4cff30747ad423046d117dfb88470f03ae00:
-- sql/000011.sql creates job_queues, tasks and jobs (columns, types, defaults, checks,
-- the generated is_available, jobs_main_index and jobs_no_queue_index) and enables
-- row-level security on each with no policy; sql/000016.sql renames them to _private_*
-- (their constraints and indexes keep the names they were created with, as here: a "1"
-- where 000011.sql's legacy tables held the name then); no later migration changes them. Left out because the guard never reads
-- them: the migrations and _private_known_crontabs tables, the `jobs` view, the job_spec
-- type and every function and trigger (add_job below is ours, for the tests).

CREATE SCHEMA graphile_worker;

CREATE TABLE graphile_worker._private_job_queues (
  id integer GENERATED ALWAYS AS IDENTITY CONSTRAINT job_queues_pkey1 PRIMARY KEY,
  queue_name text NOT NULL CONSTRAINT job_queues_queue_name_key UNIQUE
    CONSTRAINT job_queues_queue_name_check CHECK (length(queue_name) <= 128),
  locked_at timestamptz,
  locked_by text,
  is_available boolean GENERATED ALWAYS AS (locked_at IS NULL) STORED NOT NULL
);

CREATE TABLE graphile_worker._private_tasks (
  id integer GENERATED ALWAYS AS IDENTITY CONSTRAINT tasks_pkey PRIMARY KEY,
  identifier text NOT NULL CONSTRAINT tasks_identifier_key UNIQUE
    CONSTRAINT tasks_identifier_check CHECK (length(identifier) <= 128)
);

-- A job is claimed while locked_at is set (src/sql/getJobs.ts sets it; resetLockedAt.ts
-- clears it after 4 hours); job_queue_id and task_id carry no foreign key, as in the stock.
CREATE TABLE graphile_worker._private_jobs (
  id bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT jobs_pkey1 PRIMARY KEY,
  job_queue_id integer,
  task_id integer NOT NULL,
  payload json NOT NULL DEFAULT '{}'::json,
  priority smallint NOT NULL DEFAULT 0,
  run_at timestamptz NOT NULL DEFAULT now(),
  attempts smallint NOT NULL DEFAULT 0,
  max_attempts smallint NOT NULL DEFAULT 25 CONSTRAINT jobs_max_attempts_check
    CHECK (max_attempts >= 1),
  last_error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  key text CONSTRAINT jobs_key_key1 UNIQUE
    CONSTRAINT jobs_key_check CHECK (length(key) > 0 AND length(key) <= 512),
  locked_at timestamptz,
  locked_by text,
  revision integer NOT NULL DEFAULT 0,
  flags jsonb,
  is_available boolean
    GENERATED ALWAYS AS (locked_at IS NULL AND attempts < max_attempts) STORED NOT NULL
);

-- The workers' fetch indexes: partial on is_available, so no use to the guard, which reads
-- locked jobs (leaseguard index-sql recommends its own partial index for them).
CREATE INDEX jobs_main_index ON graphile_worker._private_jobs
  USING btree (priority, run_at) INCLUDE (id, task_id, job_queue_id)
  WHERE is_available = true;
CREATE INDEX jobs_no_queue_index ON graphile_worker._private_jobs
  USING btree (priority, run_at) INCLUDE (id, task_id)
  WHERE is_available = true AND job_queue_id IS NULL;

-- RLS on, no policy: a role without BYPASSRLS that does not own the table sees no rows.
ALTER TABLE graphile_worker._private_job_queues ENABLE ROW LEVEL SECURITY;
ALTER TABLE graphile_worker._private_tasks ENABLE ROW LEVEL SECURITY;
ALTER TABLE graphile_worker._private_jobs ENABLE ROW LEVEL SECURITY;

-- Ours, not graphile-worker's: enqueue one job the way add_job leaves a plain one (its
-- task row created on first use, no queue, run now, the column defaults), for the tests
-- and benchmarks. Only the two arguments they pass; graphile-worker's takes nine.
CREATE FUNCTION graphile_worker.add_job(identifier text, max_attempts integer DEFAULT NULL)
RETURNS graphile_worker._private_jobs LANGUAGE sql AS $$
  INSERT INTO graphile_worker._private_tasks (identifier) VALUES (add_job.identifier)
  ON CONFLICT DO NOTHING;
  INSERT INTO graphile_worker._private_jobs (task_id, max_attempts)
  SELECT id, coalesce(add_job.max_attempts, 25) FROM graphile_worker._private_tasks
  WHERE _private_tasks.identifier = add_job.identifier
  RETURNING *;
$$;
