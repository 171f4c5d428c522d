-- River's job table as a database migrated to River's latest "main" migration line (007)
-- holds it, reconstructed by hand for leaseguard's tests and benchmarks. This is NOT River's
-- migration code: it states, in our own DDL, only the schema facts the `river` preset and
-- its tests depend on (table, column names and types, NOT NULL and defaults, the state enum
-- with its labels in order, the finalized CHECK, the indexes leading with `state`).
--
-- Facts read from riverqueue/river at commit fdf6cdf12567a5b70c003f5ff850273f09e7efcf,
-- riverdriver/riverpgxv5/migration/main/:
--   002_initial_schema.up.sql  river_job, river_job_state, the two state-led indexes;
--   003_river_job_tags_non_null.up.sql  tags NOT NULL DEFAULT '{}';
--   004_pending_and_more.up.sql  'pending' (after 'discarded'), args/metadata NOT NULL,
--                                the finalized CHECK in its current form;
--   005/006  unique_key bytea, unique_states bit(8);  007  max_attempts DEFAULT 25.
-- Left out, as the guard never reads them: River's other tables (river_leader,
-- river_migration, river_queue, river_notification), its function and unique index over
-- unique_states, and the kind and GIN indexes. Created in the search path's first schema,
-- as River does for its default schema.

CREATE TYPE river_job_state AS ENUM (
  'available', 'cancelled', 'completed', 'discarded', 'pending', 'retryable', 'running',
  'scheduled'
);

CREATE TABLE river_job (
  id bigserial PRIMARY KEY,
  state river_job_state NOT NULL DEFAULT 'available',
  attempt smallint NOT NULL DEFAULT 0,
  max_attempts smallint NOT NULL DEFAULT 25,
  attempted_at timestamptz,                    -- the preset's claimed_at column
  created_at timestamptz NOT NULL DEFAULT now(),
  finalized_at timestamptz,
  scheduled_at timestamptz NOT NULL DEFAULT now(),
  priority smallint NOT NULL DEFAULT 1,
  args jsonb NOT NULL,
  attempted_by text[],
  errors jsonb[],
  kind text NOT NULL,
  metadata jsonb NOT NULL DEFAULT '{}',
  queue text NOT NULL DEFAULT 'default',
  tags varchar(255)[] NOT NULL DEFAULT '{}',
  unique_key bytea,
  unique_states bit(8),
  -- The preset's finished statuses are exactly the states this CHECK calls finalized.
  CONSTRAINT finalized_or_finalized_at_null CHECK (
    CASE WHEN state IN ('cancelled', 'completed', 'discarded')
      THEN finalized_at IS NOT NULL
      ELSE finalized_at IS NULL
    END
  )
);

-- River's fetching index: it leads with `state`, so it serves the guard as it stands
-- (`leaseguard index-sql --dsn` names it); the benchmarks' plans go through it.
CREATE INDEX river_job_prioritized_fetching_index
  ON river_job (state, queue, priority, scheduled_at, id);

-- Also leads with `state`: kept so the planner weighs the same candidates as on a real
-- River database.
CREATE INDEX river_job_state_and_finalized_at_index
  ON river_job (state, finalized_at) WHERE finalized_at IS NOT NULL;
