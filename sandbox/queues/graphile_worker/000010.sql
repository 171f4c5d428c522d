alter table :GRAPHILE_WORKER_SCHEMA.jobs alter column queue_name drop default;
