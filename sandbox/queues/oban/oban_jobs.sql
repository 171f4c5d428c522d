-- oban_jobs as Oban's Postgres migrations V01..V14 leave it (prefix "public").
-- Translated by hand from Ecto to SQL: oban-bg/oban lib/oban/migrations/postgres/v01.ex
-- .. v14.ex at commit 2939e3134d0812195fbfcfe9a8e8d4bbd30bb23b. Ecto's :utc_datetime_usec
-- is `timestamp(6) without time zone` (naive, holding UTC), :map is jsonb, :bigserial a
-- bigserial. Triggers that V12 dropped and indexes later versions dropped are left out.
CREATE TYPE public.oban_job_state AS ENUM (
  'available', 'suspended', 'scheduled', 'executing', 'retryable', 'completed', 'discarded',
  'cancelled'
);

CREATE TABLE public.oban_jobs (
  id bigserial PRIMARY KEY,
  state public.oban_job_state NOT NULL DEFAULT 'available',
  queue text NOT NULL DEFAULT 'default',
  worker text NOT NULL,
  args jsonb NOT NULL DEFAULT '{}',
  errors jsonb[] NOT NULL DEFAULT ARRAY[]::jsonb[],
  attempt integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL DEFAULT 20,
  inserted_at timestamp(6) without time zone NOT NULL DEFAULT timezone('UTC', now()),
  scheduled_at timestamp(6) without time zone NOT NULL DEFAULT timezone('UTC', now()),
  attempted_at timestamp(6) without time zone,
  completed_at timestamp(6) without time zone,
  attempted_by text[],                                         -- V03
  discarded_at timestamp(6) without time zone,                 -- V08
  priority integer NOT NULL DEFAULT 0,                         -- V08, V10
  tags text[] DEFAULT ARRAY[]::text[],                         -- V08
  meta jsonb DEFAULT '{}',                                     -- V09
  cancelled_at timestamp(6) without time zone,                 -- V09
  CONSTRAINT worker_length CHECK (char_length(worker) > 0 AND char_length(worker) < 128),
  CONSTRAINT queue_length CHECK (char_length(queue) > 0 AND char_length(queue) < 128),
  CONSTRAINT positive_max_attempts CHECK (max_attempts > 0),
  CONSTRAINT attempt_range CHECK (attempt BETWEEN 0 AND max_attempts),
  CONSTRAINT non_negative_priority CHECK (priority >= 0)
);

CREATE INDEX oban_jobs_state_queue_priority_scheduled_at_id_index
  ON public.oban_jobs (state, queue, priority, scheduled_at, id);                 -- V08
CREATE INDEX oban_jobs_args_index ON public.oban_jobs USING gin (args);         -- V10
CREATE INDEX oban_jobs_meta_index ON public.oban_jobs USING gin (meta);         -- V10
CREATE INDEX oban_jobs_state_cancelled_at_index ON public.oban_jobs (state, cancelled_at);
CREATE INDEX oban_jobs_state_discarded_at_index ON public.oban_jobs (state, discarded_at);

CREATE UNLOGGED TABLE public.oban_peers (                                       -- V11
  name text PRIMARY KEY,
  node text NOT NULL,
  started_at timestamp(6) without time zone NOT NULL,
  expires_at timestamp(6) without time zone NOT NULL
);
