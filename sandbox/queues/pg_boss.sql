-- pg-boss's job table as its schema version 37 (package 12.27.0) leaves it, in schema
-- pgboss. A reconstruction written for leaseguard's tests, not pg-boss's own DDL. Facts read
-- from timgit/pg-boss src/plans.ts at commit 55ee32f66f0bf683ff823c0ad8be2056dbc91ce4:
-- createEnumJobState (the job_state labels, in order: pg-boss compares states with < and
-- <=), createTableJob (job's columns and defaults, PARTITION BY LIST (name), primary key
-- (name, id)), createTableJobCommon (job_common, the DEFAULT partition, with the job_iN
-- indexes of every policy) and createQueueFunction (a partition per queue: see
-- create_pg_boss in __init__.py). Left out because the guard never reads them: the queue,
-- version, schedule, subscription, bam, warning, queue_stats and job_dependency tables,
-- the foreign keys and CHECK constraints of the partitions, and every function.

CREATE SCHEMA pgboss;

CREATE TYPE pgboss.job_state AS ENUM (
  'created', 'retry', 'active', 'completed', 'cancelled', 'failed'
);

-- An `active` job is failed by pg-boss once started_on + expire_seconds has passed, or
-- heartbeat_on + heartbeat_seconds when it has a heartbeat (failJobsByTimeout/Heartbeat).
CREATE TABLE pgboss.job (
  id uuid NOT NULL DEFAULT gen_random_uuid(),
  name text NOT NULL,
  priority integer NOT NULL DEFAULT 0,
  data jsonb,
  state pgboss.job_state NOT NULL DEFAULT 'created',
  retry_limit integer NOT NULL DEFAULT 2,
  retry_count integer NOT NULL DEFAULT 0,
  retry_delay integer NOT NULL DEFAULT 0,
  retry_backoff boolean NOT NULL DEFAULT false,
  retry_delay_max integer,
  expire_seconds integer NOT NULL DEFAULT 900,
  deletion_seconds integer NOT NULL DEFAULT 604800,
  singleton_key text,
  singleton_on timestamp without time zone,
  group_id text,
  group_tier text,
  start_after timestamptz NOT NULL DEFAULT now(),
  created_on timestamptz NOT NULL DEFAULT now(),
  started_on timestamptz,
  completed_on timestamptz,
  keep_until timestamptz NOT NULL DEFAULT now() + interval '1209600 seconds',
  output jsonb,
  dead_letter text,
  policy text,
  heartbeat_on timestamptz,
  heartbeat_seconds integer,
  blocked boolean NOT NULL DEFAULT false,
  blocking boolean NOT NULL DEFAULT false,
  pending_dependencies integer NOT NULL DEFAULT 0,
  source_name text,
  source_id uuid,
  source_created_on timestamptz,
  source_retry_count integer,
  PRIMARY KEY (name, id)
) PARTITION BY LIST (name);

-- Jobs of queues created without a partition of their own. Its primary key index comes
-- from the parent's (job_common_pkey); the other indexes exist on this partition only.
CREATE TABLE pgboss.job_common PARTITION OF pgboss.job DEFAULT;
CREATE UNIQUE INDEX job_common_i1 ON pgboss.job_common (name, COALESCE(singleton_key, ''))
  WHERE state = 'created' AND policy = 'short';
CREATE UNIQUE INDEX job_common_i2 ON pgboss.job_common (name, COALESCE(singleton_key, ''))
  WHERE state = 'active' AND policy = 'singleton';
CREATE UNIQUE INDEX job_common_i3
  ON pgboss.job_common (name, state, COALESCE(singleton_key, ''))
  WHERE state <= 'active' AND policy = 'stately';
CREATE UNIQUE INDEX job_common_i6 ON pgboss.job_common (name, COALESCE(singleton_key, ''))
  WHERE state <= 'active' AND policy = 'exclusive';
CREATE UNIQUE INDEX job_common_i8 ON pgboss.job_common (name, singleton_key)
  WHERE state IN ('active', 'retry', 'failed') AND policy = 'key_strict_fifo';
CREATE UNIQUE INDEX job_common_i4
  ON pgboss.job_common (name, singleton_on, COALESCE(singleton_key, ''))
  WHERE state <> 'cancelled' AND singleton_on IS NOT NULL;
CREATE INDEX job_common_i5 ON pgboss.job_common (name, start_after)
  WHERE state < 'active' AND NOT blocked;
CREATE INDEX job_common_i7 ON pgboss.job_common (name, group_id)
  WHERE state = 'active' AND group_id IS NOT NULL;
CREATE INDEX job_common_i9 ON pgboss.job_common (name, id)
  WHERE blocking AND state = 'completed';
