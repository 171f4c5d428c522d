-- Que's job table as `Que.migrate!(version: 7)` leaves it (Que 2.x), reconstructed by hand for
-- leaseguard's tests and benchmarks. This is NOT Que's migration code: it states, in our own
-- DDL, only the schema facts the `que` preset and its tests depend on: que_jobs with its
-- columns in the order a migrated database has them, their types, NOT NULL and defaults,
-- the primary key on id, the poll index the guard reads through, and the schema version.
--
-- Facts read from que-rb/que at commit 17fb2c3b75b37599bf17043dbb692555f582f249 (Que 2.4.1):
--   lib/que/migrations/1..7/up.sql  the table after each step (4 renames job_id to id,
--     adds finished_at/expired_at, args/data jsonb, fillfactor 90 and the primary key on
--     id; 5 adds job_schema_version; 6 adds kwargs and rebuilds que_poll_idx over
--     job_schema_version; 7 changes only triggers);
--   lib/que/migrations.rb  the installed version is kept as the comment on que_jobs.
-- Left out, as the guard never reads them: que_values, que_lockers, Que's functions and
-- notify triggers, the CHECK constraints (one calls a Que function) and the GIN indexes.
-- Nothing here says a job is being worked: that is the advisory lock on its id.

CREATE TABLE public.que_jobs (
  priority smallint NOT NULL DEFAULT 100,
  run_at timestamptz NOT NULL DEFAULT now(),
  id bigserial PRIMARY KEY,
  job_class text NOT NULL,
  error_count integer NOT NULL DEFAULT 0,
  last_error_message text,
  queue text NOT NULL DEFAULT 'default',
  last_error_backtrace text,
  finished_at timestamptz,                     -- done: worked to the end
  expired_at timestamptz,                      -- done: out of retries
  args jsonb NOT NULL DEFAULT '[]',
  data jsonb NOT NULL DEFAULT '{}',
  job_schema_version integer NOT NULL,
  kwargs jsonb NOT NULL DEFAULT '{}'
) WITH (fillfactor = 90);

-- The jobs not done, which is all the guard reads (index-sql names this index).
CREATE INDEX que_poll_idx ON public.que_jobs (job_schema_version, queue, priority, run_at, id)
  WHERE finished_at IS NULL AND expired_at IS NULL;

-- Que::Migrations reads the installed schema version back from this comment.
COMMENT ON TABLE public.que_jobs IS '7';
