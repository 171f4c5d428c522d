-- Oban's job table as a database migrated to Oban's Postgres migration V14 (prefix
-- "public") holds it, reconstructed by hand for leaseguard's tests and benchmarks. This is
-- NOT Oban's migration code: it states, as plain DDL in our own words, the schema facts the
-- `oban` preset and its tests depend on (the state enum with its labels in order, the
-- columns with their types, NOT NULL and defaults, the primary key, the indexes).
--
-- Facts read from oban-bg/oban at commit 2939e3134d0812195fbfcfe9a8e8d4bbd30bb23b,
-- lib/oban/migrations/postgres/v01.ex .. v14.ex (the version that added a column or index
-- is noted beside it). Ecto's :utc_datetime_usec is `timestamp(6) without time zone`
-- (naive, holding UTC), :map is jsonb, :bigserial a bigserial. Left out, as the guard
-- never reads them: oban_peers (V11), the CHECK constraints, the GIN indexes on args and
-- meta (V10), the notify trigger and function (V12 dropped them) and the indexes later
-- versions dropped.

CREATE TYPE public.oban_job_state AS ENUM (                                -- V01, V09, V14
  'available', 'suspended', 'scheduled', 'executing', 'retryable', 'completed', 'discarded',
  'cancelled'
);

CREATE TABLE public.oban_jobs (                                                  -- V01
  id bigserial PRIMARY KEY,
  state public.oban_job_state NOT NULL DEFAULT 'available',
  queue text NOT NULL DEFAULT 'default',
  worker text NOT NULL,
  args jsonb NOT NULL DEFAULT '{}',                                             -- V10
  errors jsonb[] NOT NULL DEFAULT ARRAY[]::jsonb[],
  attempt integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL DEFAULT 20,
  inserted_at timestamp(6) without time zone NOT NULL DEFAULT timezone('UTC', now()),
  scheduled_at timestamp(6) without time zone NOT NULL DEFAULT timezone('UTC', now()),
  attempted_at timestamp(6) without time zone,       -- the preset's claimed_at, naive UTC
  completed_at timestamp(6) without time zone,
  attempted_by text[],                                                          -- V03
  discarded_at timestamp(6) without time zone,                                  -- V08
  priority integer NOT NULL DEFAULT 0,                                          -- V08, V10
  tags text[] DEFAULT ARRAY[]::text[],                                          -- V08
  meta jsonb DEFAULT '{}',                                                      -- V09
  cancelled_at timestamp(6) without time zone                                   -- V09
);

-- Oban's fetching index leads with `state`, so it serves the guard as it stands
-- (`leaseguard index-sql --dsn` names it); the benchmarks' plans go through it.
CREATE INDEX oban_jobs_state_queue_priority_scheduled_at_id_index
  ON public.oban_jobs (state, queue, priority, scheduled_at, id);               -- V08
-- V13's, leading with `state` too: kept so the planner weighs the same candidates as on a
-- real Oban database.
CREATE INDEX oban_jobs_state_cancelled_at_index ON public.oban_jobs (state, cancelled_at);
CREATE INDEX oban_jobs_state_discarded_at_index ON public.oban_jobs (state, discarded_at);
