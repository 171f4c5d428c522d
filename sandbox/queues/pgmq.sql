-- A pgmq queue's message table, reconstructed by hand for leaseguard's tests. This is NOT
-- pgmq's extension script: it is our own DDL restating only the schema facts the `pgmq`
-- preset and its tests depend on (tests run on a server without the pgmq extension).
--
-- Facts read from pgmq/pgmq pgmq-extension/sql/pgmq.sql at commit
-- b84659a9f3ac754bc57de6fba56462da21685cbc (pgmq 1.11.0, the commit adding
-- pgmq--1.10.0--1.11.0.sql): the schema pgmq; pgmq.create_non_partitioned(name) makes
-- pgmq.q_<name> (format_table_name: lower('q_' || name)) with the columns below and the
-- index q_<name>_vt_idx (vt ASC); pgmq.read() sets vt = clock_timestamp() + vt seconds,
-- read_ct = read_ct + 1 and last_read_at = clock_timestamp() on messages whose
-- vt <= clock_timestamp(); delete and archive remove the row.
-- Left out: pgmq.meta, the archive table a_<name>, every function. `q_jobs` is the queue
-- `jobs` of the tests; create_pgmq makes more from the same template.

CREATE SCHEMA IF NOT EXISTS pgmq;

CREATE TABLE pgmq.q_jobs (
    msg_id BIGINT PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct INT DEFAULT 0 NOT NULL,
    enqueued_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    last_read_at TIMESTAMP WITH TIME ZONE,
    vt TIMESTAMP WITH TIME ZONE NOT NULL,
    message JSONB,
    headers JSONB
);

CREATE INDEX q_jobs_vt_idx ON pgmq.q_jobs (vt ASC);
